"""The viewer's pipeline-level reads at scale, checked for what they answer on small real SQLite
stores: bounded filtered pages (``scan_pipelines``) that page on to the same rows as an exact
read, literal text search, failure groups counted by the store, the estimated timeline of a
large run, page orders read from an index, and ``export`` CSV identical to the cell-by-cell
writer it replaced."""

from __future__ import annotations

import csv
import io
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from pyattacker.model import AttemptRecord
from pyattacker.plugins.store_base import StoreBase, iter_rows
from pyattacker.plugins.store_queries import PipelineQuery, count_failures
from pyattacker.testing.rows import commit, pipeline, run
from pyattacker.views import export as export_module
from pyattacker.views.common import open_view
from pyattacker.views.export import ROW_KINDS, export_stores, guard_cell
from pyattacker.views.failures import group_failures
from pyattacker_plugins.serve import api as api_module
from pyattacker_plugins.serve.api import Api
from pyattacker_plugins.store_sqlite import SqliteStoreOpener, dashboard_reads
from pyattacker_plugins.store_sqlite.read_sql import page_sql

ERRORS = [("ValueError", "fatal"), ("KeyError", "fatal"), ("TimeoutError", "retryable"), (None, None)]


def _store(tmp_path: Path, n: int = 60) -> str:
    """``n`` pipelines of run r1 (and a few of r2): every fifth failed at ``judge`` or ``fetch``
    with one of ``ERRORS``; p17 mentions ``50%_off``, p41 ``RARE`` in its message."""
    path = str(tmp_path / "scale.db")
    store = SqliteStoreOpener().open(path)
    rows = []
    for i in range(n):
        kw: dict[str, Any] = {"created_at": 100.0 + i // 2, "state": "succeeded", "attempts_total": i % 4}
        if i % 5 == 0:
            etype, eclass = ERRORS[(i // 5) % len(ERRORS)]
            kw.update(state="failed", failed_task="judge" if i % 2 else "fetch")
            kw.update(error_type=etype, error_class=eclass, error_message=f"boom {i}")
        if i == 17:
            kw["error_message"] = "price 50%_off"
        if i == 41:
            kw["error_message"] = "a RARE one"
        rows.append(pipeline(f"p{i:02d}", **kw))
    rows += [
        pipeline(f"q{i}", run_id="r2", created_at=100.5 + i, state="failed", error_type="X") for i in range(3)
    ]
    commit(store, runs=[run("r1"), run("r2", started_at=2.0)], pipelines=rows)
    store.close()
    return path


QUERIES = [
    PipelineQuery(run_id="r1", text="rare"),
    PipelineQuery(run_id="r1", text="boom"),
    PipelineQuery(run_id="r1", task="judge"),
    PipelineQuery(run_id="r1", error_class="fatal"),
    PipelineQuery(run_id="r1", error_class="KeyError", descending=True),
    PipelineQuery(run_id="r1", state="failed", text="BOOM 1"),
    PipelineQuery(text="o", descending=True),
]


def _scanned(store: StoreBase, query: PipelineQuery, limit: int, scan: int) -> tuple[list[str], int]:
    """The ids page after page of ``scan_pipelines`` (each from the previous page's end), and
    how many pages stopped short at the window's end."""
    ids, short, after = [], 0, None
    while True:
        rows, stopped = store.scan_pipelines(query, after, limit, scan)
        ids += [p.pipeline_id for p in rows]
        if stopped is not None:
            short += 1
            after = stopped
        elif len(rows) == limit:
            last = rows[-1]
            after = (last.created_at, last.pipeline_id)
        else:
            return ids, short


@pytest.mark.parametrize("query", QUERIES, ids=lambda q: f"{q.text}-{q.task}-{q.error_class}-{q.state}")
def test_a_bounded_scan_pages_on_to_exactly_what_the_exact_read_finds(
    tmp_path: Path, query: PipelineQuery
) -> None:
    """Looking at 7 pipelines at a time, the pages (short ones included) together hold the
    matches of the exact read, in its order; each short page says where it stopped."""
    store = open_view(_store(tmp_path))
    try:
        exact = [p.pipeline_id for p in store.find_pipelines(query, None, 1000)]
        assert exact  # (every query matches something)
        ids, short = _scanned(store, query, 3, 7)
        assert ids == exact
        assert short > 0
        assert StoreBase.scan_pipelines(store, query, None, 1000, 7) == (
            store.find_pipelines(query, None, 1000),
            None,
        )
    finally:
        store.close()


def test_a_filtered_page_says_how_far_it_searched_and_pages_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``/pipelines?q=`` with a match past the window: an empty page with ``searched`` and a
    ``next`` cursor, and following ``next`` reaches the match; an unbounded filter does not say it."""
    monkeypatch.setattr(api_module, "SCAN_LIMIT", 10)
    api = Api(_store(tmp_path), "r1", answer_ttl_s=0)
    first = api.call("/pipelines", {"q": "RARE"})
    assert first["rows"] == [] and first["searched"] == 10 and first["next"]
    found, body = [], first
    while body["next"]:
        body = api.call("/pipelines", {"q": "RARE", "after": body["next"]})
        found += [r["pipeline_id"] for r in body["rows"]]
    assert found == ["p41"]
    assert "searched" not in body  # the last window reached the end
    assert "searched" not in api.call("/pipelines", {"state": "failed"})
    full = api.call("/pipelines", {"q": "boom", "limit": "1"})  # p00, and p05 says there is more
    assert len(full["rows"]) == 1 and full["next"] and "searched" not in full


def test_a_runs_pages_hold_its_pipelines_only_whatever_runs_lie_around_it(tmp_path: Path) -> None:
    """r2's pipelines sit among r1's in creation order; each run's pages (and a run with no
    pipeline) hold exactly its own, in order."""
    store = open_view(_store(tmp_path))
    try:
        for run_id in ("r1", "r2", "nope"):
            every = [p.pipeline_id for p in iter_rows(store, "pipelines")]
            owner = {pid: p.run_id for pid, p in store.lookup_pipelines(every).items()}
            mine = [pid for pid in every if owner[pid] == run_id]
            assert [p.pipeline_id for p in iter_rows(store, "pipelines", run_id=run_id, batch=4)] == mine
            query = PipelineQuery(run_id=run_id, descending=True)
            assert [p.pipeline_id for p in store.find_pipelines(query, None, 1000)] == mine[::-1]
    finally:
        store.close()


def test_text_search_takes_percent_and_underscore_literally_and_ignores_ascii_case(tmp_path: Path) -> None:
    store = open_view(_store(tmp_path))
    try:

        def ids(text: str) -> list[str]:
            return [p.pipeline_id for p in store.find_pipelines(PipelineQuery(text=text), None, 1000)]

        assert ids("50%_OFF") == ["p17"]
        assert ids("%") == ids("_") == ["p17"]
        assert ids("rArE") == ["p41"]
        assert ids("0\\") == []
    finally:
        store.close()


def _old_groups(store: StoreBase, run_id: str | None) -> list[dict[str, Any]]:
    """The failure groups as the viewer folded them before the store counted them (every
    failed row read, in page order)."""
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for p in iter_rows(store, "pipelines", run_id=run_id, state="failed"):
        name = (p.error_type or "unknown", p.error_class or "unknown")
        group = groups.setdefault(
            name,
            {
                "error_type": name[0],
                "error_class": name[1],
                "count": 0,
                "tasks": {},
                "example": p.pipeline_id,
            },
        )
        group["count"] += 1
        task = p.failed_task or "?"
        group["tasks"][task] = group["tasks"].get(task, 0) + 1
    return sorted(groups.values(), key=lambda g: (-g["count"], g["error_type"], g["error_class"]))


@pytest.mark.parametrize("run_id", ["r1", "r2", None, "nope"])
def test_failure_groups_counted_by_the_store_are_the_fold_of_every_failed_row(
    tmp_path: Path, run_id: str | None
) -> None:
    store = open_view(_store(tmp_path))
    try:
        got = group_failures(store, run_id)
        for g in got:
            g["example"] = g["example"]["pipeline_id"]
        assert got == _old_groups(store, run_id)
        assert store.failure_counts(run_id) == count_failures(
            iter_rows(store, "pipelines", run_id=run_id, state="failed")
        )
    finally:
        store.close()


def test_a_large_runs_timeline_is_estimated_from_an_even_sample(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``TIMELINE_EXACT`` attempts the buckets come from one attempt in ``step`` (read by
    id) and say so; below it every attempt is counted (the same answer as the default)."""
    path = str(tmp_path / "t.db")
    store = SqliteStoreOpener().open(path)
    rows = [
        AttemptRecord(
            run_id="r1",
            pipeline_id=f"p{i}",
            task_run_id=f"p{i}:0",
            task_name="t0",
            seq=0,
            attempt=1,
            started_at=10.0,
            ended_at=10.0 + i // 10,
            duration_ms=float(i),
            outcome="failed" if i % 4 == 0 else "succeeded",
        )
        for i in range(400)
    ]
    commit(store, runs=[run("r1", started_at=10.0, status="completed", ended_at=50.0)], attempts=rows)
    store.close()
    view = open_view(path)
    try:
        exact = view.attempt_timeline("r1", 10.0, 1.0)
        assert exact == StoreBase.attempt_timeline(view, "r1", 10.0, 1.0)
        assert {b.counted_one_in for b in exact} == {1} and sum(b.attempts for b in exact) == 400
        monkeypatch.setattr(dashboard_reads, "TIMELINE_EXACT", 100)
        monkeypatch.setattr(dashboard_reads, "TIMELINE_SAMPLE", 100)
        sampled = view.attempt_timeline("r1", 10.0, 1.0)
        assert {b.counted_one_in for b in sampled} == {4}
        assert sum(b.attempts for b in sampled) == 400  # 100 sampled ids, each standing for 4
        assert sum(b.failed for b in sampled) == 400  # the ids 1, 5, 9, ...: attempts 0, 4, 8, ...
        assert [b.index for b in sampled] == [b.index for b in exact]
    finally:
        view.close()
    body = Api(path, "r1", answer_ttl_s=0).call("/timeline", {})
    assert body["counts_of_one_in"] == 4 and body["percentiles_of_one_in"] == 4


def _plan(path: str, sql: str) -> str:
    db = sqlite3.connect(path)
    try:
        return " | ".join(r[3] for r in db.execute("EXPLAIN QUERY PLAN " + sql, [None] * sql.count("?")))
    finally:
        db.close()


def test_pages_in_creation_order_walk_an_index_instead_of_sorting_the_run(tmp_path: Path) -> None:
    """A run's pipelines (export, ``report``), a run's failed ones (``/errors``, failure groups)
    and ``/pipelines``' default page are read in page order from an index (schema 9's
    ``(run_id, state, created_at)``), not sorted whole for every page."""
    path = _store(tmp_path)
    with sqlite3.connect(path) as db:
        cols = [r[2] for r in db.execute("PRAGMA index_info(pipelines_by_run_state)")]
        assert cols == ["run_id", "state", "created_at"]
    for filters in (("run_id",), ("run_id", "state")):
        for keyset in (False, True):
            assert "TEMP B-TREE FOR ORDER BY" not in _plan(path, page_sql("pipelines", filters, keyset))
    # a run's walk starts at its first pipeline, not at the store's (runs before it are skipped)
    assert "created_at>? AND created_at<?" in _plan(path, page_sql("pipelines", ("run_id",), False))
    for filters in (("run_id",), ("run_id", "state"), ("run_id", "failed_task")):
        assert "TEMP B-TREE FOR ORDER BY" not in _plan(
            path, dashboard_reads._find_sql(filters, False, "created", False, True)
        )
        matches, last = dashboard_reads._scan_sql((*filters, "text"), "created", True, True)
        assert "TEMP B-TREE FOR ORDER BY" not in _plan(path, matches) + _plan(path, last)


# -- export: the CSV writer against the cell-by-cell writer it replaced -----------------------
class _CellByCell:
    """The CSV writer before it inlined the common cells (kept here as the reference)."""

    def __init__(self, fh: Any) -> None:
        self.out = csv.writer(fh, lineterminator="\n")
        self.header: list[str] = []

    def start(self, rows: list[dict[str, Any]]) -> None:
        seen: dict[str, None] = {}
        for row in rows:
            for k in row:
                seen.setdefault(k, None)
        seen.pop("extra", None)
        self.header = [*seen, "extra"]
        self.out.writerow(self.header)

    def emit(self, row: dict[str, Any]) -> None:
        known = set(self.header[:-1])
        extra = {k: v for k, v in row.items() if k not in known}
        cells = [export_module._cell(row.get(k)) for k in self.header[:-1]]
        cells.append(export_module._cell(extra) if extra else "")
        self.out.writerow(cells)


TRICKY = [
    {"a": "=1+1", "b": 1.5, "c": None, "d": True, "e": {"x": [1, "=y"]}, "f": -3},
    {"a": "", "b": float("1e308"), "c": "\tx", "d": False, "e": [], "f": 2**70},
    {"a": "+x", "b": 0, "c": "@x", "d": None, "e": "-", "g": "later key", "extra": {"k": "=v"}},
    {"a": "\nline", "b": "-1", "c": "plain", "d": "\r", "e": {"=": "@"}, "f": 1e-9},
]


def test_the_csv_writer_writes_what_the_cell_by_cell_writer_wrote() -> None:
    fast, slow = io.StringIO(), io.StringIO()
    writer = export_module._CsvWriter(fast, "rows")
    reference = _CellByCell(slow)
    rows = TRICKY * 400  # past CSV_BATCH: the header is fixed, later rows stream
    for row in rows:
        writer.write(row)
    writer.close()
    reference.start(rows[: export_module.CSV_BATCH])
    for row in rows:
        reference.emit(row)
    assert fast.getvalue() == slow.getvalue()
    assert guard_cell("=x") == "'=x"


def test_every_row_kind_exports_the_same_csv_as_the_cell_by_cell_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, drill_store: str
) -> None:
    """A real run's store with a payload damaged on disk: each kind's CSV is what the old
    writer made of the same rows (the damaged payload marked as before)."""
    with sqlite3.connect(drill_store) as db:
        db.execute("UPDATE artifacts SET payload = CAST('tampered' AS BLOB) WHERE seq = 0 AND pk = 1")
    for kind in ROW_KINDS:
        out = tmp_path / f"{kind}.csv"
        export_stores([drill_store], str(out), rows=kind)
        rows: list[dict[str, Any]] = []
        monkeypatch.setattr(export_module, "_WRITERS", {**export_module._WRITERS, "jsonl": _Collect(rows)})
        export_stores([drill_store], str(tmp_path / f"{kind}.jsonl"), rows=kind)
        monkeypatch.undo()
        slow = io.StringIO()
        reference = _CellByCell(slow)
        reference.start(rows[: export_module.CSV_BATCH])
        for row in rows:
            reference.emit(row)
        assert out.read_text(encoding="utf-8") == slow.getvalue(), kind
        if kind == "artifacts":
            assert '"damaged"' in slow.getvalue() or ",damaged," in slow.getvalue()


class _Collect:
    """A writer factory that keeps the rows ``export_stores`` writes."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows

    def __call__(self, fh: Any, title: str) -> _Collect:
        return self

    def write(self, row: dict[str, Any]) -> None:
        self.rows.append(row)

    def close(self) -> None:
        pass


@pytest.fixture()
def drill_store(tmp_path: Path) -> str:
    from tests.support.drilldown import build_drilldown_store

    return build_drilldown_store(tmp_path / "drill.db", 6)
