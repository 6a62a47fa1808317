"""The snapshot store against pyattacker's contract suite, plus real runs through it.

``StoreContract`` (from ``pyattacker.testing``) holds every assertion the built-in stores pass;
subclassing it with a location is all a store package needs. The two tests below it drive a
whole run through the installed plugin, from the SDK and from the command line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pyattacker_example_store.plugin import SnapshotOpener

from pyattacker import Runner, pipeline, task
from pyattacker.errors import ConfigError
from pyattacker.plugins.api import iter_rows
from pyattacker.store.location import open_store
from pyattacker.testing import StoreContract

PLUGIN = "pyattacker-example-store"


@pytest.fixture(autouse=True)
def _only_this_plugin(monkeypatch: pytest.MonkeyPatch, pyattacker_home: Any) -> None:
    """Load this package's plugin and no other third-party one; a private PYATTACKER_HOME."""
    monkeypatch.setenv("PYATTACKER_ONLY_PLUGINS", PLUGIN)


class TestSnapshotStore(StoreContract):
    location = "snapshot:{tmp}/store"  # {tmp}: a new temporary folder per test


@task
def double(value: int) -> int:
    return value * 2


@task
def describe(value: int) -> str:
    return f"got {value}"


def test_a_run_through_the_store_then_a_reader(tmp_path: Path, pyattacker_plugins: Any) -> None:
    location = f"snapshot:{tmp_path}/runs"
    with Runner(store=location, plugins=pyattacker_plugins) as runner:
        report = runner.run(pipeline("two_steps", double, describe).map(range(5)))
    assert report.exit_code == 0

    reader = SnapshotOpener().open(location, read_only=True)  # what `report` opens, beside no writer
    try:
        pipelines = list(iter_rows(reader, "pipelines"))
        assert len(pipelines) == 5
        assert {p.state for p in pipelines} == {"succeeded"}
        assert all(p.cursor == 2 for p in pipelines)
        tasks = list(iter_rows(reader, "tasks"))
        assert [t.name for t in tasks[:2]] == ["double", "describe"]
        finals = reader.final_artifacts([p.pipeline_id for p in pipelines])
        assert len(finals) == 5
        [run] = reader.runs()
        assert run.status == "completed"
    finally:
        reader.close()

    # a second run over the same seeds finds everything done (resume reads the store back)
    with Runner(store=location, plugins=pyattacker_plugins) as runner:
        again = runner.run(pipeline("two_steps", double, describe).map(range(5)), resume=True)
    assert again.exit_code == 0


def test_the_cli_runs_into_the_store(tmp_path: Path) -> None:
    rows = [{"id": f"r{i}", "text": f"row {i}"} for i in range(3)]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (tmp_path / "cfg.yaml").write_text(
        "pipeline:\n"
        "  name: cli_snapshot\n"
        "  tasks:\n"
        "    - { use: pyattacker.tasks:echo }\n"
        "    - { use: pyattacker.tasks:echo }\n"
        "source: { kind: jsonl, path: data.jsonl, key_field: id }\n"
    )
    env = {**os.environ, "PYATTACKER_ONLY_PLUGINS": PLUGIN}

    def pyattacker(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "pyattacker", *args]
        return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)

    done = pyattacker("run", "-c", "cfg.yaml", "--store", "snapshot:runs/x", "--summary-format", "json")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "runs" / "x" / "snapshot.msgpack").is_file()

    report = pyattacker("report", "snapshot:runs/x", "--json")
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["pipelines"]["by_state"] == {"succeeded": 3}
    # without the scheme, the opener's ``recognizes`` claims the folder by its snapshot file
    plain = pyattacker("report", "runs/x", "--json")
    assert plain.returncode == 0, plain.stderr
    assert json.loads(plain.stdout)["pipelines"] == json.loads(report.stdout)["pipelines"]


def test_bad_locations_are_config_errors_naming_the_location(tmp_path: Path) -> None:
    """An option the store does not take, and a reader of a store that is not there."""
    with pytest.raises(ConfigError, match=r"unknown option\(s\) 'sync=full'"):
        open_store(f"snapshot:{tmp_path}/s?sync=full")
    with pytest.raises(ConfigError, match=r"does not exist"):
        open_store(f"snapshot:{tmp_path}/missing", read_only=True)
