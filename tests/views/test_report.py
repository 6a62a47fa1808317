"""``report``: merge rules, idempotence, run selection, errors, repair failures, JSON, exit codes."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from pyattacker import ConfigError
from pyattacker.cli.main import cli
from pyattacker.model import PipelineRecord
from pyattacker.plugins.api import StoreBase
from pyattacker.views.fold import Folded, MergedReport, state_rank, wins
from pyattacker.views.merge import StoreMerger, merge_stores, report_stores
from pyattacker.views.store_report import StoreReport
from tests.support.views import XSS, add_repair_failure, build_store


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = build_store(tmp_path_factory.mktemp("report") / "a.db", 20)
    add_repair_failure(path, "k6")
    return path


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pyattacker", *args], capture_output=True, text=True, timeout=60
    )


def test_state_rank_and_ties() -> None:
    assert [
        state_rank(s) for s in ("succeeded", "failed", "interrupted", "pending", "canceled", "running")
    ] == [
        4,
        3,
        2,
        1,
        0,
        -1,
    ]
    a = PipelineRecord(pipeline_id="x", run_id="r", name="p", key="x", state="failed", finished_at=2.0)
    b = PipelineRecord(pipeline_id="x", run_id="r", name="p", key="x", state="failed", finished_at=2.0)
    assert not wins(b, a)  # a tie keeps the first row
    b.finished_at = 3.0
    assert wins(b, a)
    c = PipelineRecord(pipeline_id="x", run_id="r", name="p", key="x", state="succeeded")
    assert wins(c, b) and not wins(b, c)


def test_fold_keeps_whole_rows_of_failed_winners_only() -> None:
    from pyattacker.views.fold import MergedReport

    rep = MergedReport()

    def row(pid: str, state: str, finished: float) -> PipelineRecord:
        return PipelineRecord(
            pipeline_id=pid, run_id="r", name="p", key=pid, state=state, started_at=1.0,
            finished_at=finished, traceback="Traceback ...",
        )  # fmt: skip

    rep.add(row("a", "failed", 2.0), 0)
    rep.add(row("b", "failed", 2.0), 0)
    rep.add(row("c", "succeeded", 2.0), 0)
    assert set(rep.details) == {"a", "b"} and rep.details["a"].traceback is None  # slimmed
    rep.add(row("a", "succeeded", 3.0), 1)  # a better row from another store wins
    rep.add_summary("b", "failed", 1.0, 5.0, 1, 1)  # a later failure, known by its summary only
    assert rep.failed_winners() == ["b"] and rep.origin("b") == 1
    assert set(rep.details) == set()  # b's whole row must now come from store 1
    assert rep.rows["a"] == Folded("succeeded", 1.0, 3.0, 0, 1)
    assert rep.stats()["pipelines"]["by_state"] == {"failed": 1, "succeeded": 2}
    assert rep.duplicates == 2


def test_same_store_twice_is_idempotent(store: str) -> None:
    one = merge_stores([store])
    two = merge_stores([store, store])
    s1, s2 = one.stats(), two.stats()
    assert s2["pipelines"] == s1["pipelines"]
    assert s2["tasks"] == s1["tasks"]
    assert s2["attempts_total"] == s1["attempts_total"]
    assert two.duplicates == 20 and one.duplicates == 0
    assert s2["source_events_total"] == 2 * s1["source_events_total"]  # raw on purpose


def test_store_merger_result_does_not_depend_on_the_order_of_adding(store: str, tmp_path: Path) -> None:
    """Every row of a store and its copy ties: the store with the lower key wins each tie, the
    sources are listed by key, and keys with gaps (a shard that wrote no store) are renumbered."""
    import shutil

    copy = str(tmp_path / "copy.db")
    shutil.copyfile(store, copy)
    expected = merge_stores([store, copy]).to_dict(100)
    merger = StoreMerger()
    merger.add(7, copy)
    merger.add(3, store)
    with pytest.raises(ValueError, match="key 3"):
        merger.add(3, store)
    rep = merger.result()
    assert rep.to_dict(100) == expected
    assert [s.store for s in rep.sources] == [store, copy]
    assert {entry.source for entry in rep.rows.values()} == {0}  # the lower key won every tie
    assert rep.duplicates == 20 and len(rep.failed_winners(0)) == 2


def test_shards_merge_with_best_state(tmp_path: Path) -> None:
    a = build_store(tmp_path / "s0.db", 10)
    b = build_store(tmp_path / "s1.db", 10, start=5)  # k5..k9 in both stores
    rep = merge_stores([a, b])
    assert rep.stats()["pipelines"]["total"] == 15
    assert rep.duplicates == 5


def test_json_is_one_document_with_run_and_metrics(store: str) -> None:
    proc = _run("report", store, "--json", "--errors", "5")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)  # exactly one document, nothing else on stdout
    src = doc["sources"][0]
    assert src["run_selected"] == "latest" and src["run_id"] == doc["run_ids"][0]
    assert doc["pipelines"]["total"] == 20
    assert doc["failed_total"] == 2
    err = doc["errors"][0]
    assert err["error_message"] == XSS and err["error_type"] == "ValueError"
    assert err["key"] in ("k6", "k13") and err["seed_key"] == err["key"]
    assert doc["repair_failures"]["count"] == 1
    assert doc["repair_failures"]["pipelines"][0]["phase"] == "mark_final"
    run_id = src["run_id"]
    assert doc["metrics"]["run"][run_id]["accuracy"] == 0.75
    assert doc["metrics"]["pipelines"]["k3"]["score"] == 1.5


def test_text_names_the_run_errors_and_repairs(store: str) -> None:
    res = CliRunner().invoke(cli, ["report", store, store, "--errors", "1"])
    assert res.exit_code == 0, res.output
    assert "latest started run" in res.output
    assert "folded 20 duplicate row(s)" in res.output
    assert "Terminal repair failures: 1 pipeline(s)" in res.output
    assert "Errors (newest first, 1 of 2)" in res.output


def test_run_id_all_and_unknown(store: str, tmp_path: Path) -> None:
    assert merge_stores([store], "all").sources[0].run_selected == "all"
    assert merge_stores([store], "all").metrics() == {"run": {}, "pipelines": {}}
    assert _run("report", store, "--run-id", "nope").returncode == 2


def test_glob_argument(store: str) -> None:
    pattern = str(Path(store).parent / "*.db")
    proc = _run("report", pattern, "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["sources"][0]["store"] == store


def test_a_scheme_location_globs_its_path_only(store: str) -> None:
    """``sqlite:x.db?synchronous=normal``: the ``?`` of the options is not a glob character (it was read
    as a pattern that matched nothing); a pattern in the path still expands, scheme and options
    kept on each match."""
    from pyattacker.views.common import expand_locations

    folder = Path(store).parent
    assert expand_locations([f"sqlite:{store}?synchronous=normal"]) == [f"sqlite:{store}?synchronous=normal"]
    assert expand_locations([f"sqlite:{folder}/*.db?synchronous=normal"]) == [
        f"sqlite:{store}?synchronous=normal"
    ]
    assert expand_locations(["s3://bucket/x?"]) == ["s3://bucket/x?"]  # not a local file: as is
    with pytest.raises(ConfigError, match="matches no file"):
        expand_locations([f"sqlite:{folder}/*.nope"])
    proc = _run("report", f"sqlite:{store}?synchronous=normal", "--json")
    assert proc.returncode == 0, proc.stderr


def test_missing_and_foreign_stores_exit_2(tmp_path: Path) -> None:
    missing = _run("report", str(tmp_path / "missing.db"))
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    foreign = tmp_path / "foreign.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    proc = _run("report", str(foreign))
    assert proc.returncode == 2
    assert not (tmp_path / "foreign.db-wal").exists()
    assert _run("report", str(tmp_path / "nothing-*.db")).returncode == 2


def test_merged_report_from_store_summaries_equals_reading_every_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SQLite store lets the merged report fold five columns per pipeline (``pipeline_summaries``)
    and count task states and events in SQL (``task_counts``, ``count_rows``). The report must be
    the same as the one built from whole rows: for each run selection, with failed pipelines
    (their errors need whole rows), pipelines whose row moved to a later run (a resume) while
    older task rows did not, and pipelines present in two stores."""
    import asyncio
    from typing import Any

    from pyattacker import Runner, pipeline, task
    from pyattacker_plugins.store_sqlite import SqliteStore

    failing = {"on": True}

    @task(retry={"max_attempts": 1})
    async def first(x: Any, ctx: Any) -> Any:
        ctx.record(seen=x, run=failing["on"])  # a resumed pipeline's metrics stay with their run
        await asyncio.sleep(0)
        return x

    @task(retry={"max_attempts": 1})
    async def second(x: Any) -> Any:
        if x % 5 == 0 or (failing["on"] and x % 3 == 0):
            raise ValueError(f"no {x}")
        return x

    db = str(tmp_path / "c.db")
    template = pipeline("p", first, second)
    with Runner(store=db, handle_signals=False) as r:
        r.run(template.map(range(12)))
        first_run = r.run_id
    failing["on"] = False
    with Runner(store=db, handle_signals=False) as r:
        r.run(template.map(range(12)))  # the failures of x % 3 are retried in a second run
    other = str(tmp_path / "d.db")
    with Runner(store=other, handle_signals=False) as r:
        r.run(template.map(range(6, 18)))  # overlaps the first store: some of its rows lose

    summarized: list[str | None] = []
    original = SqliteStore.pipeline_summaries

    def spy(self: SqliteStore, run_id: str | None = None, page: int = 5000) -> Any:
        summarized.append(run_id)
        return original(self, run_id, page)

    shown_errors = 0
    for stores in ([db], [db, other]):
        for selection in (None, "all", first_run):
            if selection == first_run and len(stores) > 1:
                continue  # a named run must exist in every store
            summarized.clear()
            with monkeypatch.context() as m:  # count the stores folded from their summaries
                m.setattr(SqliteStore, "pipeline_summaries", spy)
                fast = merge_stores(stores, selection)
            assert len(summarized) == len(stores)
            with monkeypatch.context() as m:
                m.setattr(SqliteStore, "task_counts", StoreBase.task_counts)
                m.setattr(SqliteStore, "pipeline_summaries", StoreBase.pipeline_summaries)
                m.setattr(SqliteStore, "pipeline_totals", StoreBase.pipeline_totals)
                m.setattr(SqliteStore, "count_rows", StoreBase.count_rows)
                slow = merge_stores(stores, selection)
            assert fast.to_dict(100) == slow.to_dict(100), (stores, selection)
            assert fast.task_counts
            # stores added last-first fold to the same report
            merger = StoreMerger(selection)
            for key in reversed(range(len(stores))):
                merger.add(key, stores[key])
            assert merger.result().to_dict(100) == slow.to_dict(100), (stores, selection)
            # ``report``: one SQLite store is aggregated in SQL, not folded row by row
            shown = report_stores(stores, selection)
            assert type(shown) is (StoreReport if len(stores) == 1 else MergedReport)
            assert shown.to_dict(100) == slow.to_dict(100), (stores, selection)
            assert (shown.rows == {}) == (len(stores) == 1)
            if selection == first_run:
                assert shown.metrics()["pipelines"] and shown.metrics() == slow.metrics()
            for rep in (fast, slow):  # whole rows are kept for the failed winners only
                assert set(rep.details) == set(rep.failed_winners())
                assert all(type(entry) is Folded for entry in rep.rows.values())
            shown_errors += len(fast.to_dict(100)["errors"])
    assert shown_errors  # failed pipelines were listed, from whole rows


def _hand_edited(tmp_path: Path, statement: str) -> str:
    path = build_store(tmp_path / "hand.db", 6)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(statement)
    conn.close()
    return path


@pytest.mark.parametrize(
    ("statement", "needle"),
    [
        ("UPDATE runs SET config_json = 'not json'", "table runs"),
        ("UPDATE pipelines SET state = NULL WHERE pk = 1", "column state is NULL"),
        ("UPDATE tasks SET name = NULL", "table tasks"),
        ("UPDATE pipelines SET started_at = 'yesterday' WHERE pk = 1", "column started_at"),
    ],
)
def test_a_row_damaged_by_hand_exits_2_naming_it(tmp_path: Path, statement: str, needle: str) -> None:
    """A hand edit (bad JSON, a NULL state, text in a time column) is exit 2 with one line naming
    store, table, row and column, for one store and merged with another; never a traceback."""
    path = _hand_edited(tmp_path, statement)
    other = build_store(tmp_path / "other.db", 2)
    before = Path(path).read_bytes()
    for args in ((path,), ("--json", path), (path, other)):
        proc = _run("report", *args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert "Traceback" not in proc.stderr and needle in proc.stderr and path in proc.stderr
    assert Path(path).read_bytes() == before


def test_a_latest_run_that_owns_no_rows_says_why_and_where_the_rows_are(tmp_path: Path) -> None:
    """A resume that found everything finished, or one refused by a damaged row, is still the
    latest run; its report alone looked like lost results. It now says why it owns no rows and
    points at --run-id all. A run that owns rows gets no note."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text("run: {store: r.db}\npipeline: {tasks: [{use: echo}]}\nsource: {kind: range, n: 4}\n")
    db = str(tmp_path / "r.db")
    assert _run("run", "-c", str(cfg)).returncode == 0
    first = _run("report", db)
    assert first.returncode == 0 and "4 pipeline row(s)" in first.stdout and "note:" not in first.stdout
    assert _run("resume", "-c", str(cfg)).returncode == 0  # everything skipped
    skipped = _run("report", db)
    assert "0 pipeline row(s)" in skipped.stdout
    assert "note: this run owns no pipeline rows (its pipelines were all finished already" in skipped.stdout
    assert "--run-id all" in skipped.stdout
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("UPDATE pipelines SET state = 'interrupted', tags_json = '{bad' WHERE pk = 2")
    conn.close()
    assert _run("resume", "-c", str(cfg)).returncode == 2  # refused: the damaged row is named
    refused = _run("report", db)
    assert "note: this run owns no pipeline rows (it stopped: store_unavailable)" in refused.stdout
    every = _run("report", db, "--run-id", "all")
    assert "note:" not in every.stdout
