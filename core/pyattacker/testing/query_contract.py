"""The store contract's cases for ``find_pipelines`` (the viewer's pipelines table) and
``attempt_numbers`` (what a resume numbers attempts after): a mixin of ``StoreContract``, which
gives it the ``store`` fixture; ``QUERIES`` and ``findable_rows`` also feed the contract's check
that a store's own reads agree with the defaults."""

from __future__ import annotations

from pyattacker.plugins.api import StoreBase as Store
from pyattacker.plugins.store_queries import PIPELINE_SORTS, PipelineQuery, pipeline_sort_value
from pyattacker.testing.rows import attempt, commit, pipeline, task

__all__ = ["QUERIES", "QueryContract", "find_all", "findable_rows"]


#: a query of each filter and each order (``find_pipelines``)
QUERIES = (
    PipelineQuery(run_id="r1", state="failed"),
    PipelineQuery(task="t1", error_class="ValueError"),
    PipelineQuery(error_class="fatal"),
    PipelineQuery(text="K-F1"),
    *(PipelineQuery(sort=s, descending=d) for s in PIPELINE_SORTS for d in (False, True)),
)


def findable_rows(store: Store) -> None:
    """Pipelines with failures, ties in every sort and attempts ending over a few seconds."""
    pipes = []
    for i in range(9):
        p = pipeline(f"f{i}", run_id="r1" if i < 6 else "r2", created_at=10.0 + i // 3, attempts_total=i % 4)
        if i % 3:
            p.started_at, p.finished_at = 20.0, 20.0 + (i % 5) * 0.5
        if i % 3 == 1:
            p.state, p.failed_task, p.error_type = "failed", "t1", "ValueError"
            p.error_class, p.error_message = "fatal", f"bad <b>{i}</b>"
        pipes.append(p)
    attempts = [
        attempt(f"f{i}", run_id="r1" if i < 6 else "r2", outcome="failed" if i % 4 == 0 else "succeeded")
        for i in range(9)
    ]
    for i, a in enumerate(attempts):
        a.ended_at, a.duration_ms = 1.0 + i * 0.3, float((i * 37) % 11)
    commit(store, pipelines=pipes, attempts=attempts)


def find_all(store: Store, query: PipelineQuery, size: int) -> list[str]:
    """The ids ``find_pipelines`` gives page after page of ``size``, each after the last's keyset."""
    seen: list[str] = []
    after = None
    while page := store.find_pipelines(query, after, size):
        seen += [p.pipeline_id for p in page]
        after = (pipeline_sort_value(page[-1], query.sort), page[-1].pipeline_id)
    return seen


class QueryContract:
    """``find_pipelines`` filters, sorts and pages by keyset like its default."""

    def test_find_pipelines_filters_sorts_and_pages(self, store: Store) -> None:
        """Each filter holds; paging by the last row's keyset visits every match once, in order."""
        findable_rows(store)
        failed = store.find_pipelines(PipelineQuery(run_id="r1", state="failed"))
        assert [p.pipeline_id for p in failed] == ["f1", "f4"]
        assert [p.pipeline_id for p in store.find_pipelines(PipelineQuery(text="<B>7"))] == ["f7"]
        query = PipelineQuery(sort="duration", descending=True)
        seen = find_all(store, query, 2)
        assert seen == [p.pipeline_id for p in store.find_pipelines(query, None, 100)]
        assert sorted(seen) == [f"f{i}" for i in range(9)] and seen[0] == "f4"

    def test_attempt_numbers(self, store: Store) -> None:
        """What a resume numbers a task's next attempt after: recorded attempts of that id, and
        the slot's task row (a reservation)."""
        assert store.attempt_numbers("p1", "p1:1", "p1:1") == (0, 0)
        commit(
            store,
            pipelines=[pipeline("p1")],
            tasks=[task("p1", 1, state="running", attempts_used=4)],
            attempts=[attempt("p1", 1, n=1), attempt("p1", 1, n=3), attempt("p1", 0, n=7)],
        )
        assert store.attempt_numbers("p1", "p1:1", "p1:1") == (3, 4)
        assert store.attempt_numbers("p1", "p1:1#2", "p1:1") == (0, 4)
