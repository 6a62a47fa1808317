"""Gaps between the CLI reference and the commands, found by auditing one against the other;
each test runs the real console entry point (``python -m pyattacker``) in a subprocess on real
SQLite files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import cli, cli_env

# Imported by the config's `use:`, it breaks the runner outside task code the way a framework
# bug would: a BaseException escaping the checkpoint write kills the worker (WorkerCrashed).
CRASH = """
from pyattacker import task
from pyattacker.engine.checkpoint import Checkpointer


class Boom(BaseException):
    pass


def _crash(self, *args, **kwargs):
    raise Boom("escaped")


Checkpointer.stage = _crash


@task(name="ok")
def ok(value):
    return value
"""


@pytest.fixture
def env(tmp_path: Path, _isolated_home: Path) -> dict[str, str]:
    (tmp_path / "crash_tasks.py").write_text(CRASH)
    return cli_env(_isolated_home, tmp_path)


def _config(tmp_path: Path, body: str, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(body)
    return path


PLAIN = "pipeline: {name: p, tasks: [{use: echo}]}\nsource: {kind: range, n: 6}\n"


def test_a_worker_crash_prints_its_type_exits_2_and_the_run_stays_reportable(
    env: dict[str, str], tmp_path: Path
) -> None:
    """The reference: `WorkerCrashed: worker for pipeline ... died with ...`, exit 2, and
    `pyattacker report <store>` still shows what happened. The type name used to be left out,
    so the line read like a config error."""
    body = "pipeline: {name: p, tasks: [{use: 'crash_tasks:ok'}]}\nsource: {kind: range, n: 3}\n"
    cfg = _config(tmp_path, body)
    store = tmp_path / "crash.db"
    result = cli(["run", "-c", str(cfg), "--store", str(store)], env)
    assert result.returncode == 2, result.stderr
    assert "Error: WorkerCrashed: worker for pipeline " in result.stderr
    assert "died with Boom: escaped" in result.stderr
    assert "Traceback" not in result.stderr
    report = cli(["report", str(store), "--json"], env)
    assert report.returncode == 0, report.stderr
    doc = json.loads(report.stdout)
    assert doc["sources"][0]["run_status"] == "interrupted"
    assert doc["sources"][0]["stop_reason"] == "worker_crashed"
    assert doc["pipelines"]["by_state"].get("failed", 0) >= 1  # the held pipeline is recorded


def test_the_json_summary_names_the_shard_and_repair_failures(env: dict[str, str], tmp_path: Path) -> None:
    """`--summary-format json` carries `store`, `shard` ("I/N" of `--shard`, else null) and
    `repair_failures` at the top level, where the reference names it."""
    cfg = _config(tmp_path, PLAIN)
    shard_store = str(tmp_path / "s1.db")
    flags = ["--shard", "1/2", "--store", shard_store, "--summary-format", "json"]
    one = cli(["run", "-c", str(cfg), *flags], env)
    assert one.returncode == 0, one.stderr
    data = json.loads(one.stdout)
    assert data["shard"] == "1/2" and data["store"] == shard_store
    assert data["repair_failures"] == data["counters"]["repair_failures"] == 0
    plain = cli(["run", "-c", str(cfg), "--store", str(tmp_path / "p.db"), "--summary-format", "json"], env)
    assert plain.returncode == 0, plain.stderr
    data = json.loads(plain.stdout)
    assert data["shard"] is None and data["repair_failures"] == 0
    assert data["counters"]["pipelines_succeeded"] == 6


def test_report_takes_artifact_backend_and_checks_it(env: dict[str, str], tmp_path: Path) -> None:
    """`report STORE [--artifact-backend SPEC]` is in the reference's synopsis; it was "No such
    option" (exit 2). A usable spec changes nothing (a report reads no payloads), a bad one is
    exit 2 naming the flag, as for `run` and `export`."""
    cfg = _config(tmp_path, PLAIN)
    store = tmp_path / "r.db"
    assert cli(["run", "-c", str(cfg), "--store", str(store)], env).returncode == 0
    plain = cli(["report", str(store)], env)
    assert plain.returncode == 0, plain.stderr
    blobs = tmp_path / "blobs"
    with_backend = cli(["report", str(store), "--artifact-backend", f"file://{blobs}"], env)
    assert with_backend.returncode == 0, with_backend.stderr
    assert with_backend.stdout == plain.stdout
    assert not blobs.exists()  # checked, never built
    bad = cli(["report", str(store), "--artifact-backend", "{bad"], env)
    assert bad.returncode == 2
    assert "--artifact-backend" in bad.stderr and "Traceback" not in bad.stderr
    as_json = cli(["report", str(store), "--json", "--artifact-backend", "inline"], env)
    assert as_json.returncode == 0 and json.loads(as_json.stdout)["pipelines"]["total"] == 6


def test_the_effective_run_block_of_validate_is_a_valid_run_block(
    env: dict[str, str], tmp_path: Path
) -> None:
    """`validate` prints the effective config; its `run` part used to carry `store_is_default`,
    which no `run:` block accepts, so copying it back into a config was an "unknown field"."""
    cfg = _config(tmp_path, PLAIN)
    result = cli(["validate", "-c", str(cfg), "--format", "json"], env)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["store_is_default"] is True and "store_is_default" not in data["run"]
    copied = {
        "run": data["run"],
        "pipeline": {"name": "p", "tasks": [{"use": "echo"}]},
        "source": {"kind": "range", "n": 2},
    }
    again = _config(tmp_path, json.dumps(copied), "copied.json")
    check = cli(["validate", "-c", str(again), "--format", "json"], env)
    assert check.returncode == 0, check.stderr
    assert json.loads(check.stdout)["store_is_default"] is False  # the store is now given
    text = cli(["validate", "-c", str(cfg)], env)
    assert text.returncode == 0 and "store_is_default" not in text.stdout
    assert "# the embedded default" in text.stdout


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["run", "-c", "{cfg}", "--experiment", "a"], "--experiment"),
        (["resume", "--experiment", "a", "--experiment", "b", "-c", "{cfg}"], "--experiment"),
        (["run", "-c", "{cfg}", "--output-root", "out"], "--output-root"),
        (["resume", "-c", "{cfg}", "--output-root", "out"], "--output-root"),
        (["report", "{store}", "--experiment", "a"], "--experiment"),
        (["watch", "{store}", "--experiment", "a", "--iterations", "1"], "--experiment"),
        (["export", "{store}", "-", "--experiment", "a"], "--experiment"),
        (["export", "{store}", "{out}", "--by-experiment"], "--by-experiment"),
        (["serve", "{store}", "--port", "0", "--experiment", "a"], "--experiment"),
    ],
)
def test_suite_flags_are_refused_by_name_with_one_line(
    env: dict[str, str], tmp_path: Path, args: list[str], flag: str
) -> None:
    """The suite flags with a plain config or a plain store (not a suite): one line naming the
    flag and saying it needs a suite, exit 2, nothing run, written or served."""
    cfg = _config(tmp_path, PLAIN)
    store = tmp_path / "v.db"
    assert cli(["run", "-c", str(cfg), "--store", str(store)], env).returncode == 0
    before = sorted(p.name for p in tmp_path.iterdir())
    subs = {"{cfg}": str(cfg), "{store}": str(store), "{out}": str(tmp_path / "out")}
    result = cli([subs.get(a, a) for a in args], env, cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"Config error: {flag}: only with a suite"), lines
    assert "Usage" not in result.stderr and result.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no store, folder or output


def test_suite_flags_are_in_help(env: dict[str, str]) -> None:
    for command in ("run", "resume", "report", "watch", "export", "serve"):
        result = cli([command, "--help"], env)
        assert result.returncode == 0, result.stderr
        assert "--experiment" in result.stdout
        assert ("--output-root" in result.stdout) == (command in ("run", "resume"))
