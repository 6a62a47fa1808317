"""The task-log part of the store contract (``StoreContract`` includes it).

A store with ``keeps_logs`` stores ``Batch.logs`` atomically with the rest of the batch and
reads them back in ``log_id`` order, filtered and after an offset; a store without it answers
``logs()`` with nothing and still commits batches that carry logs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import pytest

from pyattacker.errors import StoreUnavailable
from pyattacker.model import Batch
from pyattacker.plugins.api import StoreBase
from pyattacker.testing.rows import attempt, batch_of, commit, log_row, pipeline, task

if TYPE_CHECKING:
    from pyattacker.testing.store_contract import StoreFactory

__all__ = ["LogContract"]


def _keeps(store: StoreBase) -> None:
    if not store.keeps_logs:
        assert store.logs() == []
        pytest.skip("this store keeps no task logs")


class LogContract:
    """Tests of ``StoreBase.logs`` (mixed into ``StoreContract``, which sets these two)."""

    persistent: ClassVar[bool]

    def break_mid_batch(self, monkeypatch: pytest.MonkeyPatch, batch: Batch) -> None:
        raise NotImplementedError

    def test_logs_round_trip_in_commit_order(self, store: StoreBase) -> None:
        commit(store, logs=[log_row("p1", lines=[(2.0, "log", "first")], dropped_lines=3, dropped_bytes=90)])
        if not store.keeps_logs:
            _keeps(store)
        commit(store, logs=[log_row("p2", 1, task_name="score"), log_row("p1", 0, n=2, run_id="r2")])
        rows = store.logs()
        ids = [r.log_id or 0 for r in rows]
        assert ids == sorted(ids) and len(set(ids)) == 3 and all(i > 0 for i in ids)
        first = rows[0]
        assert (first.pipeline_id, first.lines, first.dropped_lines, first.dropped_bytes) == (
            "p1", [(2.0, "log", "first")], 3, 90,
        )  # fmt: skip
        assert rows[1].lines == [(1.0, "log", "hello"), (1.5, "stderr", "<b>é</b>")]
        assert [r.pipeline_id for r in store.logs(pipeline_id="p1")] == ["p1", "p1"]
        assert [r.attempt for r in store.logs(run_id="r2")] == [2]
        assert [r.task_name for r in store.logs(task="score")] == ["score"]
        assert [r.log_id for r in store.logs(after=ids[0])] == ids[1:]
        assert [r.log_id for r in store.logs(after=ids[0], limit=1)] == ids[1:2]
        assert store.logs(after=ids[-1]) == [] and store.logs(limit=0) == []
        rows[0].lines.append((9.0, "log", "changed"))  # rows are copies
        assert len(store.logs(limit=1)[0].lines) == 1

    def test_logs_of_a_failed_commit_are_not_kept(
        self, store: StoreBase, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        _keeps(store)
        bad = batch_of(
            pipelines=[pipeline("p1")], tasks=[task("p1", 0)], attempts=[attempt("p1")], logs=[log_row("p1")]
        )
        self.break_mid_batch(monkeypatch, bad)
        with pytest.raises(Exception):  # noqa: B017 - any failure; the store's own type is tested elsewhere
            store.commit(bad)
        monkeypatch.undo()
        assert store.logs() == []
        commit(store, attempts=[attempt("p1")], logs=[log_row("p1")])
        assert [r.pipeline_id for r in store.logs()] == ["p1"]

    def test_logs_survive_reopen_and_a_reader_follows(self, store_factory: StoreFactory) -> None:
        if not self.persistent:
            pytest.skip("this store keeps nothing across opens")
        writer = store_factory.open()
        _keeps(writer)
        commit(writer, logs=[log_row("p1")])
        reader = store_factory.open(read_only=True)
        seen = reader.logs()
        assert [r.pipeline_id for r in seen] == ["p1"]
        commit(writer, logs=[log_row("p2")])
        assert [r.pipeline_id for r in reader.logs(after=seen[-1].log_id)] == ["p2"]
        with pytest.raises(StoreUnavailable):
            reader.commit(batch_of(logs=[log_row("p3")]))
        writer = store_factory.reopen(writer)
        commit(writer, logs=[log_row("p4")])
        rows = writer.logs()
        assert [r.pipeline_id for r in rows] == ["p1", "p2", "p4"]
        assert [r.log_id for r in rows] == sorted({r.log_id or 0 for r in rows})
