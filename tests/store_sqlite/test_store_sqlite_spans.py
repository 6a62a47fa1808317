"""Schema 5: a run's attempts and events are read through the span of ids it wrote
(``run_spans``), not an index on ``run_id``. Whatever order runs write in, a read by run returns
exactly the rows of that run; files of schema 4 are read as they are and migrated by a writer."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from pyattacker.errors import StoreUnavailable
from pyattacker.model import Batch
from pyattacker_plugins.store_sqlite import SqliteStoreOpener, read_sql
from tests.support.sqlite_downgrades import downgrade_to_v4
from tests.support.store_contract import attempt, commit, event, pipeline, task

OPENER = SqliteStoreOpener()
RUNS = ("r1", "r2", "r3")


def _interleaved(store: Any) -> None:
    """Runs r1 and r2 writing in turn, a batch holding both, and events of no run."""
    commit(store, pipelines=[pipeline("p1")], attempts=[attempt("p1", 0), attempt("p1", 1)])
    commit(store, events=[event("run.started", run_id="r1"), event("pipeline.started", pid="p1")])
    commit(
        store,
        pipelines=[pipeline("p2", run_id="r2")],
        attempts=[attempt("p2", 0, run_id="r2")],
        events=[event("run.started", run_id="r2"), event("resource.up", run_id=None)],
    )
    commit(store, attempts=[attempt("p1", 2)], events=[event("pipeline.started", pid="p1")])
    commit(
        store,
        attempts=[attempt("p2", 1, run_id="r2"), attempt("p1", 3), attempt("p2", 2, run_id="r2")],
        events=[event("x", run_id="r2", pid="p2"), event("y", pid="p1"), event("z", run_id=None)],
    )


def _ids(rows: list[Any], kind: str) -> list[int]:
    return [r.attempt_id if kind == "attempts" else r.event_id for r in rows]


def _assert_reads_by_run(store: Any) -> None:
    """Every read that takes a run returns the rows of that run among all rows, in id order."""
    for kind in ("attempts", "events"):
        every = store.page(kind, limit=10_000)
        for run_id in RUNS:
            mine = [r for r in every if r.run_id == run_id]
            assert store.page(kind, run_id=run_id, limit=10_000) == mine, (kind, run_id)
            assert store.count_rows(kind, run_id) == len(mine)
            assert store.stats(run_id)[f"{kind}_total"] == len(mine)
            paged: list[Any] = []
            while True:  # two at a time, from the last id seen (the viewer's keyset paging)
                after = (_ids(paged, kind)[-1],) if paged else None
                got = store.page(kind, run_id=run_id, after=after, limit=2)
                if not got:
                    break
                paged += got
            assert paged == mine
            summaries = getattr(store, "attempt_summaries" if kind == "attempts" else "event_summaries")
            assert [s[0] for s in summaries(run_id, None, 100)] == _ids(mine, kind)
            for pid in ("p1", "p2"):
                wanted = [r for r in mine if r.pipeline_id == pid]
                assert store.page(kind, run_id=run_id, pipeline_id=pid, limit=100) == wanted
        assert store.count_rows(kind) == len(every)


def _spans(path: Path) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT run_id, kind, lo, hi FROM run_spans ORDER BY kind, run_id").fetchall()
    finally:
        conn.close()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_reads_by_run_are_exact_when_runs_interleave(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = OPENER.open(str(path))
    try:
        _interleaved(store)
        _assert_reads_by_run(store)
        assert len(store.page("attempts", run_id="r1")) == 4 and len(store.page("events", run_id="r2")) == 2
    finally:
        store.close()
    # the lowest and highest id each run wrote per table; r1's span covers r2's rows between
    assert _spans(path) == [
        ("r1", "attempts", 1, 6),
        ("r2", "attempts", 3, 7),
        ("r1", "events", 1, 7),
        ("r2", "events", 3, 6),
    ]
    reader = OPENER.open(str(path), read_only=True)
    try:
        _assert_reads_by_run(reader)
    finally:
        reader.close()


def test_a_rolled_back_batch_leaves_no_span(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = OPENER.open(str(path))
    try:
        commit(store, pipelines=[pipeline("p1")], attempts=[attempt("p1")])
        bad = Batch()
        bad.tasks.append(task("p1", 0, attempts_used=object()))  # sqlite3 cannot bind it
        bad.attempts.append(attempt("p1", 1, run_id="r2"))
        bad.events.append(event("x", run_id="r2"))
        with pytest.raises(StoreUnavailable):
            store.commit(bad)
        assert _spans(path) == [("r1", "attempts", 1, 1)]
        commit(store, attempts=[attempt("p1", 1, run_id="r3")])  # gets the id handed back
        assert _spans(path) == [("r1", "attempts", 1, 1), ("r3", "attempts", 2, 2)]
        assert [a.attempt_id for a in store.page("attempts", run_id="r3")] == [2]
        assert store.page("attempts", run_id="r2") == [] and store.count_rows("events", "r2") == 0
    finally:
        store.close()


def test_a_read_by_run_scans_its_span_of_the_table(tmp_path: Path) -> None:
    """The statements a read by run uses seek the run's span, then a range of the rowid: a
    run's rows cost what they are, not what the table holds."""
    path = tmp_path / "s.db"
    store = OPENER.open(str(path))
    _interleaved(store)
    # a table of a few rows is planned with either bound alone (the costs tie); a hundred do
    # not tie, and closing the store analyses them (PRAGMA optimize), as it does a real run's
    filler = [attempt("p1", k, run_id="r3") for k in range(100)]
    commit(store, attempts=filler, events=[event("x", run_id="r3") for _ in range(100)])
    store.close()
    conn = sqlite3.connect(path)
    try:
        for kind in ("attempts", "events"):
            statements = [
                read_sql.page_sql(kind, ("run_id",), keyset, select, True)
                for keyset in (False, True)
                for select in (None, 't."pk"')
            ]
            statements.append(read_sql.count_sql(kind, True, True))
            for sql in statements:
                plan = [str(r[-1]) for r in conn.execute("EXPLAIN QUERY PLAN " + sql, [1] * sql.count("?"))]
                assert plan[0].startswith("SEARCH s USING PRIMARY KEY"), (sql, plan)
                assert "SEARCH t USING INTEGER PRIMARY KEY (rowid>? AND rowid<?)" in plan, (sql, plan)
                assert not any(step.startswith("SCAN") for step in plan), (sql, plan)
                assert not any("TEMP B-TREE" in step for step in plan), (sql, plan)
    finally:
        conn.close()


def test_version_4_file_read_as_it_is_and_migrated_by_the_writer(tmp_path: Path) -> None:
    path = tmp_path / "v4.db"
    store = OPENER.open(str(path))
    _interleaved(store)
    expected_spans = _spans(path)
    store.close()
    downgrade_to_v4(path)
    before = _digest(path)
    reader = OPENER.open(str(path), read_only=True)  # `watch` kept open across the migration
    try:
        assert not reader.has_spans
        _assert_reads_by_run(reader)  # through the run indexes of schema 4
        assert _digest(path) == before
        writer = OPENER.open(str(path))
        try:
            assert _spans(path) == expected_spans  # worked out from the rows
            conn = sqlite3.connect(path)
            indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
            conn.close()
            assert not {"attempts_by_run", "events_by_run"} & indexes
            _assert_reads_by_run(writer)
            commit(writer, attempts=[attempt("p1", 4, run_id="r3")], events=[event("x", run_id="r3")])
            _assert_reads_by_run(writer)
        finally:
            writer.close()
        assert reader.has_spans  # found once the writer added the table
        _assert_reads_by_run(reader)
    finally:
        reader.close()
