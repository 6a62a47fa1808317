"""``pipeline_counts``: pipelines by state, without reading a row (SQLite counts its
``(run_id, state)`` index). What must hold is that the counts equal a recount of the rows: after
runs that fail and then succeed on resume, and after a writer killed mid-run."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from pyattacker import Runner, pipeline, task
from pyattacker.plugins.store_base import StoreBase
from pyattacker.views.standing import dataset_standing
from pyattacker_plugins.store_memory import MemoryStore
from pyattacker_plugins.store_sqlite import SqliteStoreOpener
from tests.support.sqlite_downgrades import raw

OPENER = SqliteStoreOpener()


def _recount(store: StoreBase, run_id: str | None = None) -> dict[str, int]:
    """The reference: every pipeline row read and counted (``StoreBase``'s default)."""
    return StoreBase.pipeline_counts(store, run_id)


def _counted(path: Path) -> tuple[dict[str, int], dict[str, int]]:
    """``pipeline_counts(None)`` of the file, and the reference recount, by a reader."""
    store = OPENER.open(str(path), read_only=True)
    try:
        return store.pipeline_counts(None), _recount(store, None)
    finally:
        store.close()


def _chain(fail_odd: bool) -> Any:
    @task
    def step(x: Any) -> Any:
        if fail_odd and x % 2:
            raise ValueError("odd")
        return x

    return pipeline("counted", step)


@pytest.mark.parametrize("kind", ["sqlite", "jsonl", "memory"])
def test_counts_follow_a_failing_run_and_its_resume(tmp_path: Path, kind: str) -> None:
    """Run 1 fails the odd seeds; run 2 resumes them to success: each run's counts and the
    whole store's match a recount, and the failed rows moved from run 1 to run 2."""
    location = {"sqlite": f"sqlite:{tmp_path / 's.db'}", "jsonl": f"jsonl:{tmp_path / 'j'}"}.get(kind)
    with Runner(store=location if location is not None else MemoryStore(), concurrency=8) as runner:
        held = runner.store
        for fail_odd in (True, False):
            report = runner.run(_chain(fail_odd).map(range(40)), resume=not fail_odd)
            counts = held.pipeline_counts(report.run_id)
            assert counts == _recount(held, report.run_id)
            assert held.pipeline_counts(None) == _recount(held, None)
            if fail_odd:
                assert counts == {"failed": 20, "succeeded": 20}
            else:
                assert counts == {"succeeded": 20}  # the resumed ones, now of this run
                assert held.pipeline_counts(None) == {"succeeded": 40}
                assert dataset_standing(held) == {"total": 40, "by_state": {"succeeded": 40}}


def test_standing_reads_counts_not_every_duration(tmp_path: Path) -> None:
    """``dataset_standing`` asks for counts only (it used to sort every pipeline's duration)."""

    class NoTotals(MemoryStore):
        def pipeline_totals(self, run_id: str | None = None) -> Any:
            raise AssertionError("pipeline_totals read")

    store = NoTotals()
    with Runner(store=store, concurrency=4) as runner:
        runner.run(_chain(False).map(range(5)))
    assert dataset_standing(store) == {"total": 5, "by_state": {"succeeded": 5}}


def test_sqlite_counts_from_the_index_alone(tmp_path: Path) -> None:
    """The counts never read a pipeline row nor sort groups in a temporary tree (the plan of
    each statement ``pipeline_counts`` runs)."""
    path = tmp_path / "idx.db"
    with Runner(store=f"sqlite:{path}", concurrency=4) as runner:
        report = runner.run(_chain(True).map(range(10)))
        store = runner.store
        conn = store._db()  # type: ignore[attr-defined]
        statements: list[str] = []
        conn.set_trace_callback(statements.append)
        try:
            assert store.pipeline_counts(None) == {"failed": 5, "succeeded": 5}
            assert store.pipeline_counts(report.run_id) == {"failed": 5, "succeeded": 5}
        finally:
            conn.set_trace_callback(None)
        assert len(statements) == 2
        for sql in statements:
            plan = " | ".join(str(r[-1]) for r in conn.execute("EXPLAIN QUERY PLAN " + sql))
            assert "COVERING INDEX pipelines_by_run_state" in plan and "TEMP B-TREE" not in plan, plan


_CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from pyattacker import Runner, pipeline, task

    @task
    async def slow(x):
        await asyncio.sleep(0.002)
        return x

    @task
    def second(x):
        if x % 7 == 0:
            raise ValueError("seven")
        return x

    with Runner(store="sqlite:" + sys.argv[1], concurrency=64) as runner:
        runner.run(pipeline("killed", slow, second).map(range(int(sys.argv[2]))), resume=True)
    """
)


def test_counts_equal_a_recount_after_a_sigkill_mid_run(tmp_path: Path) -> None:
    """After a writer killed with SIGKILL mid-run, and after a resume to the end, the counts
    equal a recount."""
    path = tmp_path / "killed.db"
    script = tmp_path / "child.py"
    script.write_text(_CHILD)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, str(script), str(path), "100000"], env=env)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                done = raw(path, "SELECT COUNT(*) FROM pipelines WHERE state != 'running'")[0][0]
            except sqlite3.Error:
                done = 0
            if done >= 500 or proc.poll() is not None:
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the run ended before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
    counts, recount = _counted(path)
    assert counts == recount and counts.get("running", 0) > 0  # killed mid-run indeed
    finished = subprocess.run([sys.executable, str(script), str(path), "3000"], env=env, timeout=300)
    assert finished.returncode == 0
    counts, recount = _counted(path)
    assert counts == recount and "running" not in counts
