"""The store contract suite: what every store must do, as tests a store package runs itself.

Subclass ``StoreContract`` in a test module (the class name must start with ``Test``) and say
where a fresh store lives::

    from pyattacker.testing import StoreContract

    class TestMyStore(StoreContract):
        location = "mystore://{tmp}/runs"      # {tmp}: a new temporary folder per test

Every test opens stores through the installed store plugins (``open_store``), exactly as a
run does, so the suite also proves the plugin is registered and claims its scheme. Override
``open`` to build the store another way. Class attributes say what a store does not offer:
``persistent = False`` (nothing survives a close: the reopen, reader and writer-lock tests
are skipped), ``exclusive_writer = False`` (no second-writer refusal). Every optional read a
store overrides is checked against ``StoreBase``'s default on the same rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from pyattacker.errors import StoreUnavailable
from pyattacker.model import Batch, HandoffRecord
from pyattacker.plugins.api import PAGE_KINDS, StoreBase, iter_rows
from pyattacker.plugins.store_base import OPTIONAL_READS
from pyattacker.plugins.store_queries import PipelineQuery
from pyattacker.plugins.store_stats import compute_stats
from pyattacker.store.location import open_store
from pyattacker.testing.log_contract import LogContract
from pyattacker.testing.notes_contract import NotesContract
from pyattacker.testing.query_contract import QUERIES, QueryContract, findable_rows
from pyattacker.testing.rows import (
    artifact,
    attempt,
    batch_of,
    commit,
    event,
    metric,
    pipeline,
    point,
    resource,
    run,
    task,
)

__all__ = ["StoreContract", "StoreFactory"]

Store = StoreBase


class StoreFactory:
    """Opens stores at one location for one test; ``reopen`` proves persistence."""

    def __init__(self, contract: StoreContract, location: str) -> None:
        self.contract = contract
        self.location = location
        self.opened: list[StoreBase] = []

    def open(self, *, read_only: bool = False) -> StoreBase:
        store = self.contract.open(self.location, read_only=read_only)
        self.opened.append(store)
        return store

    def reopen(self, store: StoreBase, *, read_only: bool = False) -> StoreBase:
        store.close()
        return self.open(read_only=read_only)

    def close_all(self) -> None:
        for store in self.opened:
            try:
                store.close()
            except Exception:  # a test may have closed it, or left it broken on purpose
                pass


def keys_of(rows: list[Any], kind: str) -> list[tuple[Any, ...]]:
    return [tuple(getattr(r, k) for k in PAGE_KINDS[kind]) for r in rows]


def _jump(pid: str, run_id: str = "r1", **kw: Any) -> HandoffRecord:
    fields: dict[str, Any] = dict(
        pipeline_id=pid, run_id=run_id, from_seq=1, from_task="ask", to_seq=3, to_task="report",
        entry_seq=5, entry_artifact_id=f"{pid}:5", entry_reused=False, reason="r", ts=1.0,
    )  # fmt: skip
    fields.update(kw)
    return HandoffRecord(**fields)


def _tied_pipelines() -> list[Any]:
    # many rows share created_at, so page boundaries fall inside a tie
    return [
        pipeline(f"p{i:03d}", created_at=float(i // 7), run_id="r1" if i % 2 else "r2") for i in range(50)
    ][::-1]


def _stats_rows(store: Store) -> None:
    pipes = []
    for i in range(11):
        state = ["succeeded", "failed", "running"][i % 3]
        p = pipeline(f"p{i}", run_id="r1" if i < 8 else "r2", state=state, started_at=100.0)
        if state != "running":
            p.finished_at = 100.0 + i * 0.0123
        pipes.append(p)
    commit(
        store,
        pipelines=pipes,
        tasks=[
            task(f"p{i}", s, run_id="r1" if i < 8 else "r2", state="succeeded")
            for i in range(11)
            for s in (0, 1)
        ],
        attempts=[attempt(f"p{i}", run_id="r1" if i < 5 else "r2") for i in range(9)],
        events=[event(run_id="r2") for _ in range(4)],
    )


class StoreContract(NotesContract, LogContract, QueryContract):
    """The contract suite; see the module docstring for how to use it."""

    #: where a fresh store lives; ``{tmp}`` is replaced by a new temporary folder per test
    location: ClassVar[str] = ""
    #: what is committed survives ``close`` and a new ``open`` of the same location
    persistent: ClassVar[bool] = True
    #: a second writer of one location is refused (``StoreUnavailable``)
    exclusive_writer: ClassVar[bool] = True
    #: what the second writer's ``StoreUnavailable`` says (a regex; ``WriterLock``'s by default)
    second_writer_message: ClassVar[str] = "is being written by pid"
    #: a failed commit raises ``StoreUnavailable`` with the cause chained
    wraps_commit_errors: ClassVar[bool] = True

    def open(self, location: str, *, read_only: bool = False) -> StoreBase:
        """Open the store at ``location`` (default: through the installed store plugins)."""
        return open_store(location, read_only=read_only)

    def break_mid_batch(self, monkeypatch: pytest.MonkeyPatch, batch: Batch) -> None:
        """Make the commit of ``batch`` fail after some of its rows could have been applied.
        Default: a task row holding a value no serializer accepts (runs and pipelines come
        first in a batch). Override it when your store would accept that value."""
        monkeypatch.setattr(batch.tasks[0], "attempts_used", object())

    @pytest.fixture
    def store_factory(self, tmp_path: Path) -> Iterator[StoreFactory]:
        if not self.location:
            raise AssertionError(f"{type(self).__name__}: set the class attribute location")
        factory = StoreFactory(self, self.location.format(tmp=tmp_path))
        yield factory
        factory.close_all()

    @pytest.fixture
    def store(self, store_factory: StoreFactory) -> StoreBase:
        return store_factory.open()

    # -- commit ------------------------------------------------------------------------------------
    def test_commit_round_trips_every_kind(self, store: Store) -> None:
        commit(
            store,
            runs=[run("r1", label="first", config={"a": [1, 2]}, stats={"x": 1.5})],
            pipelines=[pipeline("p1", tags={"t": "v"}, traceback="tb")],
            tasks=[task("p1", 0, state="succeeded", duration_ms=1.5)],
            artifacts=[artifact("p1", 0, payload=b"\x00\xffbytes", is_final=True)],
            attempts=[attempt("p1", decision={"retry": False, "delay": 0.5}, leases=[{"pool": "a"}])],
            events=[event(pid="p1", data={"k": [1, "x"]})],
            metrics=[metric("acc", 0.5)],
            metric_points=[point("op1", 0)],
            resources=[resource("pool", "res1", spec={"url": "***"}, stats={"ok": 3})],
        )
        r = store.get_run("r1")
        assert r is not None and r.label == "first" and r.config == {"a": [1, 2]} and r.stats == {"x": 1.5}
        p = store.lookup_pipelines(["p1"])["p1"]
        assert p.tags == {"t": "v"} and p.traceback == "tb"
        (t,) = store.page("tasks")
        assert t.state == "succeeded" and t.duration_ms == 1.5
        a = store.get_artifact("p1", 0)
        assert a is not None and a.payload == b"\x00\xffbytes" and a.is_final is True
        (at,) = store.page("attempts")
        assert at.decision == {"retry": False, "delay": 0.5} and at.leases == [{"pool": "a"}]
        (ev,) = store.page("events")
        assert ev.data == {"k": [1, "x"]}
        assert [m.value for m in store.metrics()] == [0.5]
        assert [pt.op_id for pt in store.metric_points("r1", "p1")] == ["op1"]
        (res,) = store.resources()
        assert res.spec == {"url": "***"} and res.stats == {"ok": 3}

    def test_commit_assigns_increasing_ids(self, store: Store) -> None:
        b1 = commit(store, attempts=[attempt("p1"), attempt("p1", n=2)], events=[event(), event()])
        b2 = commit(store, attempts=[attempt("p2")], events=[event(pid="p2")])
        ids = [a.attempt_id for a in b1.attempts + b2.attempts]
        assert ids == [1, 2, 3]
        assert [e.event_id for e in b1.events + b2.events] == [1, 2, 3]
        assert [a.attempt_id for a in store.page("attempts")] == [1, 2, 3]

    def test_failed_commit_leaves_nothing(
        self,
        store: Store,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        commit(store, pipelines=[pipeline("p0")], attempts=[attempt("p0")])
        bad = batch_of(
            runs=[run("r9")],
            pipelines=[pipeline("p1")],
            tasks=[task("p1", 0)],
            attempts=[attempt("p1")],
            events=[event()],
        )
        self.break_mid_batch(monkeypatch, bad)
        try:
            store.commit(bad)
        except Exception as exc:
            if self.wraps_commit_errors:
                assert isinstance(exc, StoreUnavailable) and exc.__cause__ is not None
        else:
            pytest.fail("the broken batch was committed: override break_mid_batch for this store")
        monkeypatch.undo()
        assert store.get_run("r9") is None
        assert set(store.lookup_pipelines(["p0", "p1"])) == {"p0"}
        assert store.page("tasks") == []
        assert [a.attempt_id for a in store.page("attempts")] == [1]
        assert bad.attempts[0].attempt_id is None and bad.events[0].event_id is None
        # the store is still usable and ids continue without a gap
        again = commit(store, attempts=[attempt("p1")])
        assert again.attempts[0].attempt_id == 2

    def test_control_ledger(self, store: Store) -> None:
        """Stores that keep a ledger append handoffs with increasing ids, atomically with the rest,
        and unmark a pipeline's earlier final artifacts before a batch's artifacts are written."""
        if not store.supports_handoffs:
            pytest.skip("this store keeps no control ledger (pipelines with control are refused)")
        commit(
            store, pipelines=[pipeline("p1"), pipeline("p2")], artifacts=[artifact("p1", 0, is_final=True)]
        )
        first = commit(store, handoffs=[_jump("p1"), _jump("p2", run_id="r2")])
        second = commit(
            store,
            handoffs=[_jump("p1", to_seq=None, to_task=None, operation="forward", entry_seq=6)],
            artifacts=[artifact("p1", 6, is_final=True)],
            finals_cleared=["p1", "unknown"],
        )
        assert [h.handoff_id for h in first.handoffs + second.handoffs] == [1, 2, 3]
        ledger = store.handoffs("p1")
        assert [(h.handoff_id, h.to_seq, h.entry_reused) for h in ledger] == [(1, 3, False), (3, None, False)]
        assert ledger[0] == _jump("p1", handoff_id=1)
        assert [a.seq for a in iter_rows(store, "artifacts", pipeline_id="p1") if a.is_final] == [6]
        count = store.count_handoffs
        assert (count(), count("r1"), count("r2"), count("r9")) == (3, 2, 1, 0)

    def test_final_artifacts_match_the_first_marked_in_page_order(self, store: Store) -> None:
        """``final_artifacts`` (what ``export --rows results`` reads) agrees with paging a
        pipeline's artifacts, payload included, across unmarking and re-marking."""
        finals = store.final_artifacts
        commit(
            store,
            pipelines=[pipeline("p1"), pipeline("p2")],
            artifacts=[artifact("p1", 0, b"a", is_final=True)],
        )
        commit(
            store,
            artifacts=[artifact("p1", 5, b"b", is_final=True), artifact("p2", 1, b"c")],
            finals_cleared=["p1"],
        )
        commit(
            store, artifacts=[artifact("p2", 1, b"d", is_final=True), artifact("p2", 2, b"e", is_final=True)]
        )
        got = finals(["p1", "p2", "nope"])
        for pid in ("p1", "p2"):
            expected = next(a for a in iter_rows(store, "artifacts", pipeline_id=pid) if a.is_final)
            assert got[pid] == expected
        assert (got["p1"].seq, got["p1"].payload, got["p2"].seq, got["p2"].payload) == (5, b"b", 1, b"d")
        assert "nope" not in got

    def test_upsert_keeps_created_at_and_replaces_the_rest(self, store: Store) -> None:
        commit(store, pipelines=[pipeline("p1", created_at=10.0, state="running")])
        commit(store, pipelines=[pipeline("p1", created_at=99.0, state="succeeded", cursor=3)])
        p = store.lookup_pipelines(["p1"])["p1"]
        assert (p.created_at, p.state, p.cursor) == (10.0, "succeeded", 3)
        # twice in one batch: the last row wins, created_at still the first one
        commit(
            store, pipelines=[pipeline("p2", created_at=1.0), pipeline("p2", created_at=2.0, state="failed")]
        )
        p2 = store.lookup_pipelines(["p2"])["p2"]
        assert (p2.created_at, p2.state) == (1.0, "failed")

    def test_upserts_replace_tasks_artifacts_runs_resources(self, store: Store) -> None:
        commit(store, runs=[run("r1")], tasks=[task("p1", 0)], artifacts=[artifact("p1", 0, b"old")])
        commit(
            store,
            runs=[run("r1", status="completed", ended_at=5.0)],
            tasks=[task("p1", 0, state="succeeded")],
            artifacts=[artifact("p1", 0, b"new", is_final=True)],
            resources=[resource("pool", "a")],
        )
        commit(store, resources=[resource("pool", "a", state="dead")])
        assert store.get_run("r1").status == "completed"  # type: ignore[union-attr]
        assert [t.state for t in store.page("tasks")] == ["succeeded"]
        a = store.get_artifact("p1", 0)
        assert a is not None and a.payload == b"new" and a.is_final
        assert [r.state for r in store.resources()] == ["dead"]

    def test_returned_rows_are_copies(self, store: Store) -> None:
        b = commit(store, pipelines=[pipeline("p1")])
        b.pipelines[0].state = "mutated"
        got = store.lookup_pipelines(["p1"])["p1"]
        assert got.state == "pending"
        got.state = "mutated-again"
        assert store.lookup_pipelines(["p1"])["p1"].state == "pending"

    # -- reads -------------------------------------------------------------------------------------
    def test_lookup_pipelines(self, store: Store) -> None:
        commit(store, pipelines=[pipeline(f"p{i}") for i in range(1200)])
        ids = [f"p{i}" for i in range(0, 1300, 3)] + ["p3", "nope"]
        found = store.lookup_pipelines(ids)
        assert set(found) == {f"p{i}" for i in range(0, 1200, 3)}
        assert all(found[k].pipeline_id == k for k in found)
        assert store.lookup_pipelines([]) == {}

    def test_get_artifact_and_seed_slot(self, store: Store) -> None:
        commit(store, artifacts=[artifact("p1", -1, b"seed"), artifact("p1", 0, None, blob_ref="null:x:4")])
        seed = store.get_artifact("p1", -1)
        assert seed is not None and seed.payload == b"seed" and seed.available
        empty = store.get_artifact("p1", 0)
        assert (
            empty is not None
            and empty.payload is None
            and empty.blob_ref == "null:x:4"
            and not empty.available
        )
        assert store.get_artifact("p1", 1) is None

    def test_runs_oldest_first(self, store: Store) -> None:
        commit(store, runs=[run("b", started_at=2.0), run("a", started_at=2.0), run("c", started_at=1.0)])
        assert [r.run_id for r in store.runs()] == ["c", "a", "b"]
        assert store.get_run("zzz") is None

    @pytest.mark.parametrize("size", [1, 3, 7, 10, 1000])
    def test_paging_pipelines_with_ties(self, store: Store, size: int) -> None:
        rows = _tied_pipelines()
        commit(store, pipelines=rows)
        expected = sorted((p.created_at, p.pipeline_id) for p in rows)
        walked = keys_of(list(iter_rows(store, "pipelines", batch=size)), "pipelines")
        assert walked == expected
        after = expected[9]
        assert keys_of(store.page("pipelines", after=after, limit=5), "pipelines") == expected[10:15]

    def test_paging_filters(self, store: Store) -> None:
        rows = _tied_pipelines()
        for i, p in enumerate(rows):
            p.state = "succeeded" if i % 3 == 0 else "failed"
        commit(store, pipelines=rows)
        want = sorted((p.created_at, p.pipeline_id) for p in rows if p.run_id == "r1" and p.state == "failed")
        got = keys_of(list(iter_rows(store, "pipelines", batch=4, run_id="r1", state="failed")), "pipelines")
        assert got == want
        assert [p.pipeline_id for p in store.page("pipelines", pipeline_id="p007")] == ["p007"]
        assert store.page("pipelines", limit=0) == []

    def test_paging_tasks_and_artifacts(self, store: Store) -> None:
        tasks = [task(f"p{i % 4}", seq, run_id=f"r{i % 2}") for i in range(4) for seq in (2, 0, 1, 10)]
        tasks.append(task("p1", 0, run_id="r1"))  # same id again: an upsert, not a new row
        arts = [artifact(f"p{i}", seq) for i in range(3) for seq in (1, -1, 0, 11)]
        commit(store, tasks=tasks, artifacts=arts)
        expected_tasks = sorted({(t.pipeline_id, t.seq) for t in tasks})
        for size in (1, 3, 100):
            assert keys_of(list(iter_rows(store, "tasks", batch=size)), "tasks") == expected_tasks
            assert keys_of(list(iter_rows(store, "artifacts", batch=size)), "artifacts") == sorted(
                (a.pipeline_id, a.seq) for a in arts
            )
        assert [t.seq for t in store.page("tasks", pipeline_id="p1")] == [0, 1, 2, 10]
        assert [a.seq for a in store.page("artifacts", pipeline_id="p2", after=("p2", 0))] == [1, 11]
        assert {t.run_id for t in store.page("tasks", run_id="r0")} == {"r0"}
        got = store.page("artifacts", pipeline_id="p0")
        assert all(a.payload == b"data" for a in got)

    def test_paging_attempts_and_events(self, store: Store) -> None:
        attempts = [attempt(f"p{i % 3}", run_id=f"r{i % 2}", n=i) for i in range(20)]
        events = [event(run_id=f"r{i % 2}", pid=f"p{i % 3}") for i in range(20)]
        commit(store, attempts=attempts[:10], events=events[:10])
        commit(store, attempts=attempts[10:], events=events[10:])
        for kind in ("attempts", "events"):
            walked = list(iter_rows(store, kind, batch=3))
            ids = [r.attempt_id if kind == "attempts" else r.event_id for r in walked]
            assert ids == list(range(1, 21))
            by_pipe = list(iter_rows(store, kind, batch=2, pipeline_id="p1"))
            assert [r.pipeline_id for r in by_pipe] == ["p1"] * 7
            by_run = store.page(kind, run_id="r1", after=(4,), limit=3)
            assert [keys_of([r], kind)[0][0] for r in by_run] == [6, 8, 10]

    def test_page_rejects_unknown_kind(self, store: Store) -> None:
        with pytest.raises(ValueError):
            store.page("nope")

    def test_metrics_upsert_and_scopes(self, store: Store) -> None:
        commit(store, metrics=[metric("acc", 0.1), metric("acc", 0.2, pid="p1"), metric("n", 3, run_id="r2")])
        commit(store, metrics=[metric("acc", 0.9, updated_at=2.0)])
        rows = store.metrics()
        assert [(m.run_id, m.pipeline_id, m.name, m.value) for m in rows] == [
            ("r1", "", "acc", 0.9),
            ("r1", "p1", "acc", 0.2),
            ("r2", "", "n", 3),
        ]
        assert [m.value for m in store.metrics(run_id="r1", pipeline_id="")] == [0.9]
        assert [m.value for m in store.metrics(pipeline_id="p1")] == [0.2]

    def test_metric_points_idempotent_by_op_id(self, store: Store) -> None:
        commit(store, metric_points=[point("a", 0, 1.0), point("b", 1, 2.0), point("a", 5, 9.0)])
        commit(store, metric_points=[point("b", 1, 7.0), point("c", 2, 3.0, key="acc")])
        pts = store.metric_points("r1", "p1")
        assert [(p.op_id, p.value) for p in pts] == [("a", 1.0), ("b", 2.0), ("c", 3.0)]
        assert [p.op_id for p in store.metric_points("r1", "p1", key="loss")] == ["a", "b"]
        assert [p.op_id for p in store.metric_points("r1", "p1", after_step=0)] == ["b", "c"]
        assert [p.op_id for p in store.metric_points("r1", "p1", limit=1)] == ["a"]
        assert store.metric_points("r1", "other") == []

    def test_resources_filter(self, store: Store) -> None:
        commit(store, resources=[resource("b", "1"), resource("a", "2"), resource("a", "1", run_id="r2")])
        assert [(r.pool, r.resource_id) for r in store.resources()] == [("a", "1"), ("a", "2"), ("b", "1")]
        assert [(r.pool, r.resource_id) for r in store.resources(run_id="r1")] == [("a", "2"), ("b", "1")]

    def test_interrupt_running(self, store: Store) -> None:
        commit(
            store,
            runs=[
                run("old"),
                run("old2", ended_at=4.0),
                run("new"),
                run("done", status="completed", ended_at=3.0),
            ],
            pipelines=[
                pipeline("p1", run_id="old", state="running"),
                pipeline("p2", run_id="old", state="succeeded"),
                pipeline("p3", run_id="new", state="running"),
                pipeline("p4", run_id="old2", state="running"),
            ],
            tasks=[
                task("p1", 0, run_id="old"),
                task("p3", 0, run_id="new"),
                task("p2", 0, run_id="old", state="failed"),
            ],
        )
        assert store.interrupt_running("new", 100.0) == 2
        found = store.lookup_pipelines(["p1", "p2", "p3", "p4"])
        assert {k: v.state for k, v in found.items()} == {
            "p1": "interrupted",
            "p2": "succeeded",
            "p3": "running",
            "p4": "interrupted",
        }
        assert {t.task_run_id: t.state for t in store.page("tasks")} == {
            "p1:0": "interrupted",
            "p2:0": "failed",
            "p3:0": "running",
        }
        runs = {r.run_id: r for r in store.runs()}
        assert (runs["old"].status, runs["old"].ended_at) == ("interrupted", 100.0)
        assert (runs["old2"].status, runs["old2"].ended_at) == ("interrupted", 4.0)
        assert runs["new"].status == "running" and runs["done"].status == "completed"
        assert store.interrupt_running("new", 200.0) == 0

    # -- stats -------------------------------------------------------------------------------------
    @pytest.mark.parametrize("run_id", [None, "r1", "r2", "missing"])
    def test_stats_shape_and_agreement(self, store: Store, run_id: str | None) -> None:
        _stats_rows(store)
        generic = compute_stats(store, run_id)
        assert store.stats(run_id) == generic
        assert set(generic) == {"pipelines", "tasks", "attempts_total", "events_total", "handoffs_total"}
        assert set(generic["pipelines"]) == {"total", "by_state", "duration_ms"}
        assert set(generic["pipelines"]["duration_ms"]) == {"p50", "p95", "max"}
        if run_id is None:
            assert generic["pipelines"]["total"] == 11
            assert generic["pipelines"]["by_state"] == {"failed": 4, "running": 3, "succeeded": 4}
            durations = sorted(round(i * 0.0123 * 1000, 3) for i in range(11) if i % 3 != 2)
            assert generic["pipelines"]["duration_ms"]["max"] == pytest.approx(durations[-1])
            assert generic["pipelines"]["duration_ms"]["p50"] == pytest.approx(durations[int(0.5 * 7)])
            assert generic["tasks"]["by_name"] == {"t0": {"succeeded": 11}, "t1": {"succeeded": 11}}
            assert (generic["attempts_total"], generic["events_total"]) == (9, 4)
        if run_id == "missing":
            assert generic["pipelines"]["total"] == 0
            assert generic["pipelines"]["duration_ms"] == {"p50": None, "p95": None, "max": None}

    # -- persistence -------------------------------------------------------------------------------
    def test_reopen_keeps_everything(self, store_factory: StoreFactory) -> None:
        if not self.persistent:
            pytest.skip("this store keeps nothing across opens")
        store = store_factory.open()
        commit(
            store,
            runs=[run("r1")],
            pipelines=[pipeline("p1", created_at=3.0, state="running")],
            tasks=[task("p1", 0)],
            artifacts=[artifact("p1", 0, b"payload")],
            attempts=[attempt("p1")],
            events=[event()],
            metrics=[metric("m", {"nested": [1]})],
            metric_points=[point("op", 0)],
            resources=[resource("pool", "a")],
        )
        store = store_factory.reopen(store)
        assert store.lookup_pipelines(["p1"])["p1"].created_at == 3.0
        assert store.get_artifact("p1", 0).payload == b"payload"  # type: ignore[union-attr]
        assert [m.value for m in store.metrics()] == [{"nested": [1]}]
        # ids continue after reopen; op ids stay idempotent; created_at is still kept
        b = commit(
            store, attempts=[attempt("p1")], events=[event()], metric_points=[point("op", 1)],
            pipelines=[pipeline("p1", created_at=50.0, state="succeeded")],
        )  # fmt: skip
        assert b.attempts[0].attempt_id == 2 and b.events[0].event_id == 2
        store = store_factory.reopen(store)
        assert len(store.metric_points("r1", "p1")) == 1
        p = store.lookup_pipelines(["p1"])["p1"]
        assert (p.created_at, p.state) == (3.0, "succeeded")
        assert [a.attempt_id for a in store.page("attempts")] == [1, 2]

    def test_read_only_reader_sees_commits_and_cannot_write(self, store_factory: StoreFactory) -> None:
        if not self.persistent:
            pytest.skip("this store is private to its process")
        writer = store_factory.open()
        commit(writer, pipelines=[pipeline("p1")])
        reader = store_factory.open(read_only=True)
        assert reader.read_only
        assert set(reader.lookup_pipelines(["p1"])) == {"p1"}
        commit(writer, pipelines=[pipeline("p2")], attempts=[attempt("p2")])
        assert set(reader.lookup_pipelines(["p1", "p2"])) == {"p1", "p2"}
        assert [a.attempt_id for a in reader.page("attempts")] == [1]
        with pytest.raises(StoreUnavailable):
            reader.commit(batch_of(pipelines=[pipeline("p3")]))
        with pytest.raises(StoreUnavailable):
            reader.interrupt_running("r", 1.0)

    def test_second_writer_refused(self, store_factory: StoreFactory) -> None:
        if not (self.persistent and self.exclusive_writer):
            pytest.skip("this store has no shared location, or no writer lock")
        first = store_factory.open()
        with pytest.raises(StoreUnavailable, match=self.second_writer_message):
            store_factory.open()
        first.close()
        store_factory.open().close()

    def test_closed_store_refuses_commit(self, store: Store) -> None:
        store.close()
        with pytest.raises((StoreUnavailable, RuntimeError)):
            store.commit(batch_of(pipelines=[pipeline("p1")]))

    def test_progress_advances_the_cursor_without_rewriting_the_row(self, store: Store) -> None:
        from pyattacker.model import PipelineProgress

        commit(store, pipelines=[pipeline("p1", created_at=5.0, state="running", cursor=1)])
        b = batch_of()
        b.progress.append(PipelineProgress(pipeline_id="p1", cursor=2, attempts_total=7))
        b.progress.append(PipelineProgress(pipeline_id="unknown", cursor=9, attempts_total=9))
        store.commit(b)
        rows = store.lookup_pipelines(["p1", "unknown"])
        assert set(rows) == {"p1"}
        p = rows["p1"]
        assert (p.cursor, p.attempts_total, p.state, p.created_at) == (2, 7, "running", 5.0)
        # in one batch, progress applies after the pipeline upserts
        b2 = batch_of(pipelines=[pipeline("p2", cursor=1)])
        b2.progress.append(PipelineProgress(pipeline_id="p2", cursor=3, attempts_total=3))
        store.commit(b2)
        assert store.lookup_pipelines(["p2"])["p2"].cursor == 3

    # -- optional reads ------------------------------------------------------------------------------
    def test_optional_reads_agree_with_the_defaults(self, store: Store) -> None:
        """Every optional read the store answers itself (``StoreBase``'s are the reference,
        built on ``page``) returns what the default returns, over the same rows."""
        _stats_rows(store)
        findable_rows(store)
        commit(
            store,
            artifacts=[artifact("p1", 0, b"a", is_final=True), artifact("p1", 1, b"b"), artifact("p2", 0)],
            attempts=[attempt("p1", 0, leases=[{"pool": "a", "resource": "x"}]), attempt("p1", 0, n=2)],
            events=[event(pid="p1"), event(pid="p2", kind="task.failed")],
            metrics=[metric("acc", 0.5, pid="p1"), metric("acc", 0.7)],
            metric_points=[point("op1", 0, pid="p1"), point("op2", 0, pid="")],
            runs=[run("r1", notes="from the config"), run("r2", started_at=2.0)],
            tasks=[task("p1", 2, duration_ms=5.0), task("p2", 2, duration_ms=3.0), task("p9", 2, "r2")],
        )
        ids = ["p1", "p2", "p9", "p10", "nope"]
        calls: dict[str, tuple[tuple[Any, ...], ...]] = {
            "lookup_pipelines": ((ids,),),
            "get_artifact": (("p1", 0), ("p1", 7), ("nope", 0)),
            "get_run": (("r1",), ("nope",)),
            "handoffs": (("p1",),),
            "count_handoffs": ((None,), ("r1",)),
            "handoffs_by_operation": ((None,), ("r1",)),
            "pipeline_summaries": ((None,), ("r1",), ("r2",), ("nope",)),
            "pipeline_totals": ((None,), ("r1",), ("nope",)),
            "pipeline_counts": ((None,), ("r1",), ("r2",), ("nope",)),
            "task_counts": ((None,), ("r1",), ("r2",)),
            "count_rows": tuple((kind, run_id) for kind in PAGE_KINDS for run_id in (None, "r1", "nope")),
            "stats": ((None,), ("r2",)),
            "lookup_states": ((ids,),),
            "attempt_summaries": (("r1", None, 100), ("r1", 1, 1), (None, None, 100)),
            "event_summaries": (("r1", None, 100), ("r1", 1, 1), (None, None, 100)),
            "rows_by_pipeline": tuple((kind, ids) for kind in ("tasks", "artifacts", "handoffs")),
            "metrics_by_pipeline": (("r1", ids),),
            "final_artifacts": ((ids,),),
            "task_leases": ((ids,),),
            "point_pipelines": (("r1",), ("nope",)),
            "run_note": (("r1",), ("r2",), ("nope",)),
            "run_notes": ((),),
            "run_state_counts": ((),),
            "spec_digests": (("r1",), ("nope",)),
            "task_durations": (("r1",), ("r2",), ("nope",)),
            "metric_summary": (("r1",), ("nope",)),
            "find_pipelines": (*((q, None, 100) for q in QUERIES), (PipelineQuery(), (10.0, "f3"), 2)),
            "attempt_timeline": (("r1", 0.0, 1.0), (None, 1.5, 0.25), ("nope", 0.0, 1.0)),
            "scan_pipelines": tuple((q, None, 100, 1000) for q in QUERIES),
            "failure_counts": ((None,), ("r1",), ("nope",)),
        }
        assert set(calls) == set(OPTIONAL_READS) - {"close", "write_note"}
        for name, arglists in calls.items():
            for args in arglists:
                default, own = (
                    _plain(getattr(StoreBase, name)(store, *args)),
                    _plain(getattr(store, name)(*args)),
                )
                if name == "pipeline_summaries":  # in any order
                    default, own = sorted(default), sorted(own)
                assert own == default, f"{name}{args!r} differs from StoreBase.{name}"


def _plain(value: Any) -> Any:
    """A read's result compared by value: iterators listed, durations as a list."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)) or hasattr(value, "__next__") or type(value).__name__ == "array":
        return [_plain(v) for v in value]
    return value
