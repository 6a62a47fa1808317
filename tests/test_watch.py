"""``watch``: plain snapshots into a pipe, run selection, metrics, per-attempt latency on resume."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from _view_fixtures import build_store, fetch, judge
from pyattacker.pipeline import pipeline
from pyattacker.pool import Pool, Resource
from pyattacker.runner import Runner
from pyattacker.stats import store_stats
from pyattacker.view_common import choose_run, read_only_store
from pyattacker.view_live import LiveDigest, snapshot
from pyattacker.watch import bar, watch


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    return build_store(tmp_path_factory.mktemp("watch") / "a.db", 20)


def _watch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pyattacker", "watch", *args], capture_output=True, text=True, timeout=60
    )


def test_cli_into_a_pipe_prints_plain_text(store: str) -> None:
    proc = _watch(store, "--iterations", "1", "--no-clear", "--interval", "0.1")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "\x1b" not in out  # no clear-screen or colour codes into a pipe
    assert "latest started" in out
    assert "total=20" in out and "failed=2" in out
    assert "pool api" in out and "active=0/2" in out
    assert "accuracy=0.75" in out
    assert "ValueError" in out


def test_cli_all_runs_has_no_app_metrics(store: str) -> None:
    proc = _watch(store, "--iterations", "1", "--run-id", "all")
    assert proc.returncode == 0
    assert "all runs (aggregate)" in proc.stdout
    assert "accuracy" not in proc.stdout
    assert "\x1b" not in proc.stdout


def test_render_to_captured_console(store: str) -> None:
    buf = io.StringIO()
    console = Console(file=buf, width=200, force_terminal=False)
    assert watch(store, iterations=2, clear=False, console=console, sleep=lambda s: None) == 0
    text = buf.getvalue()
    assert text.count("pyattacker watch") == 2
    assert "latency (per attempt, ms)" in text


def test_missing_store_exit_2(tmp_path: Path) -> None:
    assert _watch(str(tmp_path / "none.db"), "--iterations", "1").returncode == 2


def test_bar_clamps() -> None:
    assert bar(5, 10, 10) == "[#####.....]"
    assert bar(20, 10, 4) == "[####]"
    assert bar(1, 0, 4) == "[....]"


def test_latency_of_a_resumed_run_counts_its_own_attempts(tmp_path: Path) -> None:
    path = build_store(tmp_path / "r.db", 14)
    pools = [Pool("api", [Resource("llm", id="r1", capacity=2)])]
    with Runner(store=path, pools=pools, concurrency=2, resume=True) as runner:
        runner.run(
            pipeline("p", fetch, judge).map(({"i": i} for i in range(14)), key_of=lambda s: f"k{s['i']}")
        )
    with read_only_store(path) as s:
        choice = choose_run(s, None)
        second = store_stats(s, choice.run_id)["attempts_total"]
        snap = snapshot(s, choice, LiveDigest(choice.run_id))
        assert snap["latency_ms"]["count"] == second
        assert second < store_stats(s, None)["attempts_total"]
        assert snap["reported_metrics"] is not None
