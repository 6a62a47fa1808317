"""Output into a pipe at 80 columns (``COLUMNS=80``): nothing a user copies is split or cut.

The run summary never folds the store path (a folded path is broken when copied): one that
does not fit its cell goes on a line of its own. ``plugins`` stacks its rows instead of cutting
names with an ellipsis, and ``bench`` stacks a table wider than the terminal.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import cli, cli_env
from tests.support.plugins import make_fake_dist

LONG_PLUGIN = "narrow-check-plugin-with-a-name-longer-than-its-column"
LONG_DIST = "pyattacker-narrow-check-distribution"
LONG_TASK = "a_task_name_long_enough_to_be_cut_in_a_table"


def test_the_run_summary_never_splits_the_store_path(tmp_path: Path) -> None:
    folder = tmp_path / "results-of-a-rather-long-experiment-name" / "second-level-folder"
    store = folder / "store-with-a-long-file-name.db"
    config = tmp_path / "c.json"
    config.write_text(
        json.dumps(
            {
                "run": {"store": str(store)},
                "source": {"kind": "range", "n": 3},
                "pipeline": {"name": "narrow", "tasks": [{"use": "echo"}]},
            }
        )
    )
    done = cli(["run", "-c", str(config)], cli_env(tmp_path / "home", tmp_path, COLUMNS="80"))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert f"store: {store}" in lines  # whole, on its own line
    assert max(len(line) for line in lines if not line.startswith("store: ")) <= 80


@pytest.fixture
def short_folder() -> Iterator[Path]:
    """A folder with a path short enough for the summary's cell whatever pytest's tmp_path is
    (under pytest-xdist in CI that alone is about 70 characters)."""
    folder = Path(tempfile.mkdtemp(prefix="pa-", dir="/tmp"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_the_run_summary_keeps_a_short_path_in_its_cell(tmp_path: Path, short_folder: Path) -> None:
    config = short_folder / "c.json"
    config.write_text(
        json.dumps(
            {
                "run": {"store": "s.db"},
                "source": {"kind": "range", "n": 1},
                "pipeline": {"name": "narrow", "tasks": [{"use": "echo"}]},
            }
        )
    )
    env = cli_env(tmp_path / "home", tmp_path, COLUMNS="80")
    done = cli(["run", "-c", str(config)], env, cwd=short_folder)
    assert done.returncode == 0, done.stderr
    assert any(
        line.startswith("│ store") and str(short_folder / "s.db") in line for line in done.stdout.splitlines()
    )
    assert "store: " not in done.stdout


def test_plugins_never_cuts_a_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = make_fake_dist(
        tmp_path / "dist",
        monkeypatch,
        dist=LONG_DIST,
        modules={
            "narrow_check_plugin": f"""
                from pyattacker import hookimpl, task

                @task(name="{LONG_TASK}")
                def long_task(value):
                    return value

                @hookimpl
                def pyattacker_tasks(register):
                    register("{LONG_TASK}", long_task)
                """
        },
        entry_points={"pyattacker.plugins": {LONG_PLUGIN: "narrow_check_plugin"}},
    )
    env = cli_env(tmp_path / "home", root, COLUMNS="80")
    env["PYATTACKER_ONLY_PLUGINS"] = LONG_PLUGIN
    done = cli(["plugins"], env)
    assert done.returncode == 0, done.stderr
    assert "…" not in done.stdout
    lines = done.stdout.splitlines()
    assert any(line.startswith(LONG_PLUGIN) for line in lines)
    assert any(LONG_DIST in line for line in lines)
    assert any(f"tasks: {LONG_TASK}" in line for line in lines)
    assert any(line.startswith("task-echo") for line in lines)  # the built-ins are stacked too


def test_bench_fits_80_columns_in_a_pipe_and_keeps_every_figure(tmp_path: Path) -> None:
    env = cli_env(tmp_path / "home", tmp_path, COLUMNS="80")
    env.pop("PYATTACKER_ONLY_PLUGINS")
    args = ["--jobs", "20", "--seeds", "2", "--quiet"]
    proc = subprocess.run(
        [sys.executable, "-m", "pyattacker", "bench", *args, "--json", str(tmp_path / "r.json")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, max(lines, key=len)
    data = json.loads((tmp_path / "r.json").read_text())
    for name in data["algorithms"]:
        assert any(line.split()[:1] == [name] for line in lines), name
    assert "completion (ratio, better: higher" in proc.stdout
