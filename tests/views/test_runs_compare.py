"""``pyattacker runs`` and ``compare``: the runs of stores, and two runs side by side."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pyattacker import ConfigError
from pyattacker.views.compare import compare_runs
from tests.support.runs import run_into, two_run_store
from tests.support.views import XSS


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-m", "pyattacker", *args],
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, **env},
    )


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str, str]:
    """A store with two runs (the second labelled, with notes and markup in them); their ids."""
    path = two_run_store(tmp_path_factory.mktemp("runs") / "a.db")
    runs = json.loads(_cli("runs", path, "--json").stdout)["stores"][0]["runs"]
    return path, runs[0]["run_id"], runs[1]["run_id"]


def test_runs_lists_each_run_with_counts_duration_and_notes(two_runs: tuple[str, str, str]) -> None:
    store, first, second = two_runs
    proc = _cli("runs", store, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema_version"] == 1 and doc["stores"][0]["store"] == store
    a, b = doc["stores"][0]["runs"]
    assert (a["run_id"], b["run_id"]) == (first, second)
    assert a["status"] == b["status"] == "completed"
    assert a["pipelines"]["total"] == 10 and b["pipelines"]["total"] == 14
    assert b["pipelines"]["by_state"] == {"failed": 2, "succeeded": 12}  # k13 and k20 fail
    assert a["duration_s"] >= 0 and b["started_at"] >= a["started_at"]
    assert (a["notes"], a["notes_revision"]) == ("", 0)
    assert (b["label"], b["notes"], b["notes_revision"]) == (XSS, "tried concurrency 2", 1)
    text = _cli("runs", store)
    assert text.returncode == 0
    assert f"{second} [{XSS}]  completed" in text.stdout  # stored text printed as it is
    assert "pipelines 14 (failed=2 succeeded=12)" in text.stdout
    assert "notes (rev 1): tried concurrency 2" in text.stdout


def test_runs_of_several_stores_and_of_a_sharded_run(two_runs: tuple[str, str, str], tmp_path: Path) -> None:
    store = two_runs[0]
    for i in range(2):
        shutil.copy(store, tmp_path / f"x.shard{i}of2.db")
    proc = _cli("runs", store, str(tmp_path / "x.db"), "--json")
    assert proc.returncode == 0, proc.stderr
    stores = [entry["store"] for entry in json.loads(proc.stdout)["stores"]]
    assert stores == [store, str(tmp_path / "x.shard0of2.db"), str(tmp_path / "x.shard1of2.db")]


def test_runs_of_bad_stores_exit_2_naming_them(tmp_path: Path) -> None:
    missing = _cli("runs", str(tmp_path / "missing.db"))
    assert missing.returncode == 2 and "missing.db does not exist" in missing.stderr
    foreign = tmp_path / "foreign.db"
    conn = sqlite3.connect(foreign)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    proc = _cli("runs", str(foreign))
    assert proc.returncode == 2 and "is not a pyattacker store" in proc.stderr
    assert _cli("runs", ":memory:").returncode == 2
    assert _cli("runs", str(tmp_path / "none-*.db")).returncode == 2


def test_an_unknown_run_points_at_the_runs_command(two_runs: tuple[str, str, str]) -> None:
    proc = _cli("report", two_runs[0], "--run-id", "nope")
    assert proc.returncode == 2 and f"`pyattacker runs {two_runs[0]}` lists them" in proc.stderr


def _rows(doc: dict[str, Any]) -> dict[str, tuple[Any, Any, Any]]:
    return {r["name"]: (r["a"], r["b"], r["delta"]) for r in doc["rows"]}


def test_compare_two_runs_of_one_store(two_runs: tuple[str, str, str]) -> None:
    store, first, second = two_runs
    proc = _cli("compare", store, first, second, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["a"]["run_id"], doc["b"]["run_id"]) == (first, second)
    assert doc["b"]["notes"] == f"tried concurrency 2\n{XSS}" and doc["same_identities"] is True
    assert {"key": "concurrency", "a": 4, "b": 2} in doc["config_changes"]
    rows = _rows(doc)
    assert rows["pipelines.total"] == (10, 14, 4)
    assert rows["pipelines.failed"] == (1, 2, 1)  # judge fails x % 7 == 0: k6 / k13, k20
    assert rows["tasks.fetch.count"] == (10, 14, 4)
    for name in ("tasks.fetch.p50_ms", "tasks.fetch.p95_ms", "tasks.fetch.p99_ms", "tasks.judge.max_ms"):
        a, b, delta = rows[name]
        assert a >= 0 and b >= 0 and delta == pytest.approx(b - a, abs=1e-5)
    assert rows["retries"] == (2, 2, 0)  # judge retries x % 5 == 0 once: k4, k9 / k14, k19
    assert rows["usage.leases"] == (10, 14, 4)
    assert rows["metrics.accuracy.run"] == (0.5, 0.6, pytest.approx(0.1))
    assert rows["metrics.score.count"] == (10, 14, 4)  # ctx.record(score=...) per pipeline
    text = _cli("compare", store, first, second)
    assert text.returncode == 0 and "B - A" in text.stdout
    assert "concurrency: 4 -> 2" in text.stdout and "task identities: the same" in text.stdout


def test_compare_two_stores_takes_the_latest_run_of_each(
    two_runs: tuple[str, str, str], tmp_path: Path
) -> None:
    store, _first, second = two_runs
    other = run_into(tmp_path / "b.db", 5)
    doc = json.loads(_cli("compare", store, other, "--json").stdout)
    assert doc["a"]["run_id"] == second and doc["b"]["store"] == other
    assert _rows(doc)["pipelines.total"] == (14, 5, -9)


def test_compare_refuses_bad_arguments_with_exit_2(two_runs: tuple[str, str, str], tmp_path: Path) -> None:
    store, first, _second = two_runs
    for args, needle in (
        ((store,), "compare takes STORE RUN_A RUN_B, or STORE_A STORE_B"),
        ((store, first, "nope"), "no run 'nope'"),
        ((store, first, "all"), "one run per side"),
        ((store, str(tmp_path / "missing.db")), "does not exist"),
    ):
        proc = _cli("compare", *args)
        assert proc.returncode == 2 and needle in proc.stderr, (args, proc.stderr)


def test_compare_reads_aggregates_not_every_row(
    two_runs: tuple[str, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """On SQLite, nothing is paged row by row: counts, identities, durations come from SQL."""
    from pyattacker_plugins.store_sqlite import SqliteStore

    def no_paging(self: Any, kind: str, **kw: Any) -> list[Any]:
        raise AssertionError(f"compare paged {kind} rows")

    monkeypatch.setattr(SqliteStore, "page", no_paging)
    store, first, second = two_runs
    doc = compare_runs([(store, first), (store, second)])
    assert _rows(doc)["pipelines.total"] == (10, 14, 4)
    with pytest.raises(ConfigError, match="one run per side"):
        compare_runs([(store, "all"), (store, second)])
