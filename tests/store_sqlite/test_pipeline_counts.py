"""``pipeline_counts``: pipelines by state, kept by the store as it writes (SQLite: triggers in
the commit's own transaction, schema 7). What must hold is that the kept counts always equal a
recount of the rows: after runs that fail and then succeed on resume, after a migration of an
older file, and after a writer killed mid-run."""

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
from pyattacker.store.location import open_store
from pyattacker.views.standing import dataset_standing
from pyattacker_plugins.store_memory import MemoryStore
from pyattacker_plugins.store_sqlite import SqliteStoreOpener
from tests.support.sqlite_downgrades import downgrade_to_v6, raw

OPENER = SqliteStoreOpener()


def _recount(store: StoreBase, run_id: str | None = None) -> dict[str, int]:
    """The reference: every pipeline row read and counted (``StoreBase``'s default)."""
    return StoreBase.pipeline_counts(store, run_id)


def _sql_recount(path: Path) -> dict[tuple[str, str], int]:
    return {(r, s): n for r, s, n in raw(path, "SELECT run_id, state, COUNT(*) FROM pipelines GROUP BY 1, 2")}


def _kept(path: Path) -> dict[tuple[str, str], int]:
    return {(r, s): n for r, s, n in raw(path, "SELECT run_id, state, n FROM pipeline_counts") if n}


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


def test_an_older_file_answers_as_it_is_and_is_counted_once_by_the_writer(tmp_path: Path) -> None:
    path = tmp_path / "v6.db"
    with Runner(store=f"sqlite:{path}", concurrency=4) as runner:
        runner.run(_chain(True).map(range(10)))
    downgrade_to_v6(path)
    assert not raw(path, "SELECT name FROM sqlite_master WHERE name = 'pipeline_counts'")
    reader = OPENER.open(str(path), read_only=True)  # a reader reads schema 6 as it is
    try:
        assert reader.pipeline_counts(None) == {"failed": 5, "succeeded": 5}
    finally:
        reader.close()
    writer = open_store(f"sqlite:{path}")  # the migration counts the rows once
    try:
        assert _kept(path) == _sql_recount(path)
        assert writer.pipeline_counts(None) == {"failed": 5, "succeeded": 5}
    finally:
        writer.close()


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
    """A writer killed with SIGKILL mid-run leaves counts equal to a recount (they are written in
    the same transaction as the rows), and a resume to the end keeps them so."""
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
    assert _kept(path) == _sql_recount(path)
    assert any(state == "running" for _run, state in _kept(path))  # killed mid-run indeed
    finished = subprocess.run([sys.executable, str(script), str(path), "3000"], env=env, timeout=300)
    assert finished.returncode == 0
    assert _kept(path) == _sql_recount(path)
    store = OPENER.open(str(path), read_only=True)
    try:
        assert store.pipeline_counts(None) == _recount(store, None)
    finally:
        store.close()
