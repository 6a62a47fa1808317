"""The run / resume / validate / demo / init commands through the real console entry point
(``python -m pyattacker`` in a subprocess), exit codes included."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support import REPO
from tests.support.cli import cli, cli_env
from tests.support.runner import count_succeeded

AUDIT = """
import asyncio, os
from pyattacker import task

LOG = os.environ["AUDIT_LOG"]

def _note(value, name):
    with open(LOG, "a") as fh:
        fh.write(f"{value['i']} {name}\\n")

@task(name="first")
async def first(value):
    await asyncio.sleep(0.02)
    _note(value, "first")
    return value

@task(name="second")
async def record(value):
    await asyncio.sleep(0.05)
    _note(value, "second")
    return {"i": value["i"], "done": True}

@task(name="boom")
def boom(value):
    raise ValueError(f"bad row {value['i']}")

@task(name="spin")
async def spin(value):
    _note(value, "spin")
    while True:
        await asyncio.sleep(0.05)


@task(name="busy")
def busy(value):
    import os
    if os.environ.get("BUSY_FOREVER"):
        _note(value, "busy")
        while True:
            pass
    return value
"""


def _wait_until_a_task_started(tmp_path: Path, proc: subprocess.Popen[Any]) -> None:
    """Until the audit log has a line (a task body is running), not a fixed sleep: on a loaded
    machine the interpreter alone may take longer than any sleep to start."""
    log = tmp_path / "audit.log"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if log.exists() and log.read_text().strip():
            return
        time.sleep(0.05)
    raise AssertionError(f"no task started (exit code {proc.poll()})")


@pytest.fixture
def env(tmp_path: Path, _isolated_home: Path) -> dict[str, str]:
    (tmp_path / "audit_tasks.py").write_text(AUDIT)
    return cli_env(_isolated_home, tmp_path, AUDIT_LOG=str(tmp_path / "audit.log"))


def _config(tmp_path: Path, body: str, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(body)
    return path


AUDIT_CONFIG = """
run: {store: runs/audit.db, concurrency: 2, grace_s: 5}
pipeline:
  name: audited
  tasks:
    - {use: "audit_tasks:first"}
    - {use: "audit_tasks:record"}
source: {kind: range, n: N}
"""


# -- demo ----------------------------------------------------------------------------------
def test_demo_with_no_arguments(env: dict[str, str], _isolated_home: Path) -> None:
    result = cli(["demo"], env)
    assert result.returncode == 0, result.stderr
    assert "succeeded 50" in result.stdout
    assert str(_isolated_home) in result.stdout.replace("\n", "")  # the summary says where
    assert (_isolated_home / "runs" / "demo.db").is_file()


def test_every_demo_reuses_one_database(env: dict[str, str], _isolated_home: Path) -> None:
    """A demo replaces the previous demo's database instead of leaving a new file each time."""
    for _ in range(2):
        result = cli(["demo", "--pipelines", "5", "--summary-format", "json"], env)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["counters"]["pipelines_succeeded"] == 5
    stores = [p.name for p in (_isolated_home / "runs").iterdir() if p.suffix == ".db"]
    assert stores == ["demo.db"]


def test_demo_large_with_failures_shows_retries(env: dict[str, str], tmp_path: Path) -> None:
    export = tmp_path / "results.jsonl"
    result = cli(
        [
            "demo",
            "--pipelines",
            "2000",
            "--fail-rate",
            "0.3",
            "--summary-format",
            "json",
            "--export",
            str(export),
        ],
        env,
    )
    assert result.returncode in (0, 1), result.stderr
    data = json.loads(result.stdout)
    assert data["counters"]["retries"] > 0
    assert data["counters"]["pipelines_succeeded"] + data["counters"]["pipelines_failed"] == 2000
    assert data["exit_code"] == result.returncode
    lines = export.read_text().splitlines()
    assert len(lines) == 2000 and json.loads(lines[0])["state"] in ("succeeded", "failed")


def test_demo_text_shows_a_degraded_endpoint(env: dict[str, str]) -> None:
    result = cli(["demo", "--pipelines", "300", "--fail-rate", "0.3"], env)
    assert result.returncode in (0, 1)
    assert "retries" in result.stdout and "degraded" in result.stdout


def test_output_piped_to_head_has_no_traceback(env: dict[str, str]) -> None:
    cmd = f"{sys.executable} -m pyattacker demo --pipelines 20 | head -1"
    result = subprocess.run(cmd, shell=True, env=env, capture_output=True, text=True, timeout=60)
    assert result.stdout.count("\n") == 1
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr


# -- run -----------------------------------------------------------------------------------
def test_run_summary_json_and_limit(env: dict[str, str], tmp_path: Path) -> None:
    cfg = _config(tmp_path, AUDIT_CONFIG.replace("N}", "10}"))
    result = cli(["run", "-c", str(cfg), "--limit", "4", "--summary-format", "json", "--progress"], env)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)  # exactly one JSON object on stdout
    assert data["counters"]["pipelines_succeeded"] == 4
    assert data["store"] == str(tmp_path / "runs" / "audit.db")  # relative to the config's folder
    assert len((tmp_path / "audit.log").read_text().splitlines()) == 8


def test_run_default_store_and_text_summary(
    env: dict[str, str], tmp_path: Path, _isolated_home: Path
) -> None:
    cfg = _config(tmp_path, "pipeline: {tasks: [{use: echo}]}\nsource: {kind: range, n: 3}\n")
    result = cli(["run", "-c", str(cfg)], env)
    assert result.returncode == 0, result.stderr
    assert (_isolated_home / "runs" / "default.db").exists()
    # a long path is folded over several lines of the table (never cut): join them to look
    assert "default.db" in re.sub(r"[\s│]", "", result.stdout) and "succeeded 3" in result.stdout
    again = cli(["resume", "-c", str(cfg)], env)
    assert again.returncode == 0 and "skipped 3" in again.stdout


def test_stop_after_failures_exits_1(env: dict[str, str], tmp_path: Path) -> None:
    cfg = _config(
        tmp_path,
        "run: {store: s.db, concurrency: 1}\n"
        'pipeline: {tasks: [{use: "audit_tasks:boom"}]}\nsource: {kind: range, n: 50}\n',
    )
    result = cli(["run", "-c", str(cfg), "--stop-after-failures", "3", "--summary-format", "json"], env)
    assert result.returncode == 1, result.stderr
    data = json.loads(result.stdout)
    assert 3 <= data["counters"]["pipelines_failed"] < 50
    assert data["stop_reason"] == "stop_after_failures"


def test_sigint_then_resume_never_reruns_finished_tasks(env: dict[str, str], tmp_path: Path) -> None:
    n = 40
    cfg = _config(tmp_path, AUDIT_CONFIG.replace("N}", f"{n}}}"))
    store = tmp_path / "runs" / "audit.db"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pyattacker", "run", "-c", str(cfg)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and count_succeeded(store) < 3:
            time.sleep(0.05)
        assert count_succeeded(store) >= 3, "the run made no progress"
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "resumable" in err
    first = (tmp_path / "audit.log").read_text().splitlines()
    assert len(first) < 2 * n
    resumed = cli(["resume", "-c", str(cfg), "--summary-format", "json"], env)
    assert resumed.returncode == 0, resumed.stderr
    lines = (tmp_path / "audit.log").read_text().splitlines()
    assert sorted(lines) == sorted(f"{i} {t}" for i in range(n) for t in ("first", "second"))  # once each


def test_a_looping_task_is_stoppable(env: dict[str, str], tmp_path: Path) -> None:
    cfg = _config(
        tmp_path,
        "run: {store: s.db, grace_s: 0.5}\n"
        'pipeline: {tasks: [{use: "audit_tasks:spin"}]}\nsource: {kind: range, n: 3}\n',
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "pyattacker", "run", "-c", str(cfg)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        _wait_until_a_task_started(tmp_path, proc)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_blocking_sync_task_cannot_make_the_run_ignore_sigint(
    env: dict[str, str], tmp_path: Path, loop: str
) -> None:
    """A sync body that never returns holds the event loop; the second Ctrl-C still stops the run,
    and the next resume finishes everything. Under uvloop the other ready workers must not start
    their own blocking bodies before the interrupt gets out (it runs the ready callbacks first)."""
    if loop == "uvloop":
        pytest.importorskip("uvloop")
    cfg = _config(
        tmp_path,
        f"run: {{store: s.db, event_loop: {loop}}}\n"
        'pipeline: {tasks: [{use: "audit_tasks:busy"}]}\nsource: {kind: range, n: 3}\n',
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "pyattacker", "run", "-c", str(cfg)],
        env={**env, "BUSY_FOREVER": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        _wait_until_a_task_started(tmp_path, proc)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    resumed = cli(["resume", "-c", str(cfg)], env)
    assert resumed.returncode == 0, resumed.stderr


def test_missing_dataset_is_exit_2_before_starting(env: dict[str, str], tmp_path: Path) -> None:
    cfg = _config(
        tmp_path,
        "run: {store: s.db}\npipeline: {tasks: [{use: echo}]}\nsource: {kind: jsonl, path: nope.jsonl}\n",
    )
    assert cli(["validate", "-c", str(cfg)], env).returncode == 0  # validate never opens the data
    result = cli(["run", "-c", str(cfg)], env)
    assert result.returncode == 2
    assert "nope.jsonl" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "s.db").exists()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--concurrency", "0"], "--concurrency"),
        (["--limit", "0"], "--limit"),
        (["--journal", "nope"], "--journal"),
        (["--artifact-backend", '{"kind": "file"}'], "--artifact-backend"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(
    env: dict[str, str], tmp_path: Path, args: list[str], needle: str
) -> None:
    cfg = _config(tmp_path, "pipeline: {tasks: [{use: echo}]}\nsource: {kind: range, n: 1}\n")
    result = cli(["run", "-c", str(cfg), *args], env)
    assert result.returncode == 2
    assert needle in result.stderr


def test_bad_config_is_exit_2_and_runs_nothing(env: dict[str, str], tmp_path: Path) -> None:
    cfg = _config(
        tmp_path,
        "run: {store: s.db}\npipeline: {tasks: [{use: simulate_llm, kwargs: {latncy_ms: 5}}]}\n"
        "source: {kind: range, n: 1}\n",
    )
    for command in ("validate", "run", "resume"):
        result = cli([command, "-c", str(cfg)], env)
        assert result.returncode == 2
        assert "pipeline.tasks[0].kwargs.latncy_ms" in result.stderr and "latency_ms" in result.stderr
    assert not (tmp_path / "s.db").exists()


def test_strict_env(env: dict[str, str], tmp_path: Path) -> None:
    env.pop("PA_UNSET", None)
    cfg = _config(
        tmp_path,
        'run: {label: "${PA_UNSET}"}\npipeline: {tasks: [{use: echo}]}\nsource: {kind: range, n: 1}\n',
    )
    loose = cli(["validate", "-c", str(cfg)], env)
    assert loose.returncode == 0 and "PA_UNSET" in loose.stderr
    strict = cli(["validate", "-c", str(cfg), "--strict-env"], env)
    assert strict.returncode == 2 and "PA_UNSET" in strict.stderr


# -- validate / init -----------------------------------------------------------------------
def test_validate_prints_effective_config_as_json(env: dict[str, str]) -> None:
    ref = REPO / "examples" / "cli_config_reference.yaml"
    result = cli(["validate", "-c", str(ref), "--format", "json"], env)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["run"]["concurrency"] == 8 and data["pipeline"]["tasks"][1]["retry"]["max_attempts"] == 3
    assert "sk-demo" not in result.stdout  # secrets are masked
    text = cli(["validate", "-c", str(ref)], env)
    assert text.returncode == 0 and "config is valid" in text.stdout


def test_init_writes_a_valid_starter_and_never_overwrites(env: dict[str, str], tmp_path: Path) -> None:
    result = cli(["init"], env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    starter = tmp_path / "pyattacker.toml"
    assert starter.read_text().startswith("# pyattacker starter config")
    assert cli(["validate", "-c", str(starter)], env).returncode == 0
    again = cli(["init"], env, cwd=tmp_path)
    assert again.returncode == 2 and "already exists" in again.stderr
    run = cli(["run", "-c", str(starter), "--summary-format", "json"], env)
    assert run.returncode in (0, 1), run.stderr


def test_a_folder_that_cannot_be_created_is_a_config_error_naming_the_setting(
    env: dict[str, str], tmp_path: Path
) -> None:
    """A parent that is a regular file used to end with an OSError traceback (exit 1), for the
    export only after the whole demo had run."""
    blocker = tmp_path / "afile"
    blocker.write_text("not a folder")
    config = _config(tmp_path, "pipeline: {tasks: [{use: echo}]}\nsource: {kind: range, n: 1}\n")
    in_file = _config(
        tmp_path,
        f"run: {{store: '{blocker / 'x.db'}'}}\n"
        "pipeline: {tasks: [{use: echo}]}\nsource: {kind: range, n: 1}\n",
        "in_file.yaml",
    )
    # the setting the user wrote is named: the flag when the flag gave the store
    cases = [
        (["run", "-c", str(config), "--store", str(blocker / "x.db")], "--store"),
        (["run", "-c", str(in_file)], "run.store"),
        (["demo", "--pipelines", "5", "--store", str(blocker / "x.db")], "--store"),
        (
            [
                "demo",
                "--pipelines",
                "5",
                "--store",
                str(tmp_path / "d.db"),
                "--export",
                str(blocker / "r.jsonl"),
            ],
            "--export",
        ),
        (["init", str(blocker / "new.toml")], "PATH"),
    ]
    for args, name in cases:
        result = cli(args, env)
        assert result.returncode == 2, (args, result.stderr)
        assert f"{name}: cannot create the folder {blocker}" in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
    assert not (tmp_path / "d.db").exists()  # refused before the demo ran


def test_resume_of_a_store_that_does_not_exist_warns(env: dict[str, str], tmp_path: Path) -> None:
    """A typo in ``--store`` used to start a fresh run silently."""
    config = _config(tmp_path, "pipeline: {tasks: [{use: echo}]}\nsource: {kind: range, n: 2}\n")
    missing = tmp_path / "typo.db"
    result = cli(["resume", "-c", str(config), "--store", str(missing)], env)
    assert result.returncode == 0, result.stderr
    assert f"resume: store {missing} does not exist; nothing to resume" in result.stderr
    again = cli(["resume", "-c", str(config), "--store", str(missing)], env)
    assert again.returncode == 0 and "does not exist" not in again.stderr


def test_init_refuses_a_name_that_is_not_toml(env: dict[str, str], tmp_path: Path) -> None:
    """``init new.json`` wrote TOML into a .json file, which ``validate`` then rejected."""
    for name in ("new.json", "new.yaml"):
        result = cli(["init", str(tmp_path / name)], env)
        assert result.returncode == 2 and "init writes a TOML config; name it *.toml" in result.stderr
        assert not (tmp_path / name).exists()


# -- store locations -------------------------------------------------------------------------
def _listing(*folders: Path) -> list[str]:
    """Every path under ``folders`` (what a command left on disk), but the kept plugin scan
    (``<home>/cache``): any process that discovers plugins may write it, as Python writes
    ``__pycache__``; it holds nothing of a run."""
    return sorted(
        str(p)
        for folder in folders
        if folder.exists()
        for p in folder.rglob("*")
        if "cache" not in p.relative_to(folder).parts[:1]
    )


@pytest.mark.parametrize("command", ["validate", "run", "resume"])
def test_a_store_scheme_no_plugin_handles_is_a_config_error_at_run_store(
    env: dict[str, str], tmp_path: Path, _isolated_home: Path, command: str
) -> None:
    """``run.store: s3://...`` without an S3 store plugin passed ``validate`` and failed only once
    ``run`` had started; every command now refuses it at its field, listing the installed schemes."""
    work = tmp_path / "work"
    work.mkdir()
    cfg = _config(
        tmp_path,
        'run: {store: "s3://bucket/x"}\npipeline: {tasks: [{use: echo}]}\nsource: {kind: range, n: 1}\n',
    )
    before = _listing(tmp_path, _isolated_home)
    result = cli([command, "-c", str(cfg)], env, cwd=work)
    assert result.returncode == 2, result.stderr
    assert "run.store: no store plugin handles the scheme 's3'" in result.stderr, result.stderr
    assert "installed schemes: file, jsonl, memory, sqlite" in result.stderr
    assert "Traceback" not in result.stderr
    assert _listing(tmp_path, _isolated_home) == before


@pytest.mark.parametrize(
    ("location", "needle"),
    [
        ("foo://x", "no store plugin handles the scheme 'foo' in 'foo://x' (installed schemes: file, jsonl,"),
        ("jsonl://", "'jsonl://' names no store: nothing follows jsonl:"),
    ],
)
@pytest.mark.parametrize("command", ["run", "resume", "demo"])
def test_store_flag_with_an_unknown_scheme_is_refused_and_creates_nothing(
    env: dict[str, str], tmp_path: Path, _isolated_home: Path, command: str, location: str, needle: str
) -> None:
    """``demo --store foo://x`` used to write a local ``./foo:/x`` (and ``jsonl://`` a store in the
    current folder); run and resume failed only after starting. The flag is now refused first,
    like any bad flag value (exit 2, naming it)."""
    work = tmp_path / "work"
    work.mkdir()
    cfg = _config(tmp_path, "pipeline: {tasks: [{use: echo}]}\nsource: {kind: range, n: 1}\n")
    args = ["demo", "--pipelines", "2"] if command == "demo" else [command, "-c", str(cfg)]
    before = _listing(tmp_path, _isolated_home)
    result = cli([*args, "--store", location], env, cwd=work)
    assert result.returncode == 2, result.stderr
    assert "Invalid value for '--store'" in result.stderr and needle in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert _listing(tmp_path, _isolated_home) == before  # no ./foo:/x, no default store folder


def test_a_file_url_store_is_the_local_path_it_names(env: dict[str, str], tmp_path: Path) -> None:
    """``file:///abs/x.db`` (flag or ``run.store``) used to become ``<cwd>/file:/abs/x.db``."""
    work = tmp_path / "work"
    work.mkdir()
    cfg = _config(
        tmp_path,
        f'run: {{store: "file://{tmp_path}/a.db"}}\npipeline: {{tasks: [{{use: echo}}]}}\n'
        "source: {kind: range, n: 1}\n",
    )
    for args, name in (
        (["run", "-c", str(cfg)], "a.db"),
        (["run", "-c", str(cfg), "--store", f"file://{tmp_path}/b.db"], "b.db"),
        (["demo", "--pipelines", "2", "--store", f"file://{tmp_path}/c.db"], "c.db"),
    ):
        result = cli([*args, "--summary-format", "json"], env, cwd=work)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["store"] == str(tmp_path / name)
        assert (tmp_path / name).is_file()
    assert not (work / "file:").exists() and not (tmp_path / "file:").exists()


def test_a_scheme_spelled_store_flag_is_relative_to_the_cwd_and_gets_its_folder(
    env: dict[str, str], tmp_path: Path
) -> None:
    """``--store sqlite:sub/x.db`` (run, demo) is ``<cwd>/sub/x.db``, its folder created like a
    plain path's, the scheme kept; it used to fail on the missing folder."""
    work = tmp_path / "work"
    work.mkdir()
    cfg = _config(tmp_path, "pipeline: {tasks: [{use: echo}]}\nsource: {kind: range, n: 1}\n")
    for args, rel in (
        (["run", "-c", str(cfg), "--store", "sqlite:deep/a/x.db"], "deep/a/x.db"),
        (["demo", "--pipelines", "2", "--store", "sqlite:deep/b/y.db"], "deep/b/y.db"),
    ):
        result = cli([*args, "--summary-format", "json"], env, cwd=work)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["store"] == f"sqlite:{work / rel}"
        assert (work / rel).is_file()


# -- artifact backends -----------------------------------------------------------------------
@pytest.mark.parametrize("where", ["root is a file", "root under a file"])
def test_a_file_backend_root_that_cannot_hold_blobs_exits_2_before_any_task(
    env: dict[str, str], tmp_path: Path, where: str
) -> None:
    """A root that is a file (or lies under one) used to fail every pipeline after its first
    task had run (exit 1, an internal error per pipeline, no attempt row): each paid request
    was sent, then lost. It is refused when the run starts, naming the field."""
    (tmp_path / "blobs").write_text("not a folder")
    root = "blobs" if where == "root is a file" else "blobs/sub"
    body = AUDIT_CONFIG.replace("N}", "3}").replace(
        "grace_s: 5}", f"grace_s: 5, artifact_backend: {{kind: file, root: {root}, min_bytes: 0}}}}"
    )
    result = cli(["run", "-c", str(_config(tmp_path, body))], env)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "run.artifact_backend.root:" in result.stderr and "is not a directory" in result.stderr
    assert not (tmp_path / "audit.log").exists()  # no task ran
    assert (tmp_path / "blobs").read_text() == "not a folder"


def test_a_blob_write_that_fails_mid_run_stops_it_resumable_with_exit_2(
    env: dict[str, str], tmp_path: Path
) -> None:
    """The backend failing while the run goes on (a folder made unwritable, a full disk; here a
    file where pipeline 1's blob folder must go) is not that task's fault, and would fail each
    following pipeline after its paid task too. It used to be an internal error per pipeline
    with no attempt row. Now the attempt is recorded, the pipeline stays resumable, the run
    stops with exit 2 naming the backend, task and pipeline, and a resume finishes the work."""
    from pyattacker.digest import digest_bytes
    from pyattacker.store.base import iter_rows
    from pyattacker.store.location import open_store

    root = tmp_path / "blobs"
    root.mkdir()
    blocker = root / digest_bytes(b'{"i":1}')[:2]  # `first` returns its seed {"i": 1}
    blocker.write_text("in the way")
    body = AUDIT_CONFIG.replace("N}", "3}").replace(
        "concurrency: 2, grace_s: 5}",
        "concurrency: 1, grace_s: 5, artifact_backend: {kind: file, root: blobs, min_bytes: 0}}",
    )
    cfg = _config(tmp_path, body)
    result = cli(["run", "-c", str(cfg)], env)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    store = open_store(str(tmp_path / "runs" / "audit.db"), read_only=True)
    try:
        by_seed = {p.seed_key or p.key: p for p in iter_rows(store, "pipelines")}
        failed_attempts = [a for a in iter_rows(store, "attempts") if a.outcome == "failed"]
        (run,) = store.runs()
    finally:
        store.close()
    (attempt,) = failed_attempts
    key = attempt.pipeline_id
    message = f"artifact backend 'file' could not store the output of task 'first' of pipeline '{key}'"
    assert message in result.stderr and str(blocker) in result.stderr
    assert attempt.task_name == "first" and attempt.error_type == "ArtifactBackendUnavailable"
    assert attempt.decision["reason"] == "artifact_backend_unavailable"
    row = by_seed[key]
    assert (row.state, row.cursor, row.error_type) == ("interrupted", 0, "ArtifactBackendUnavailable")
    assert run.stop_reason == "artifact_backend_unavailable"
    assert all(p.state != "failed" for p in by_seed.values())
    blocker.unlink()
    result = cli(["resume", "-c", str(cfg), "--summary-format", "json"], env)
    assert result.returncode == 0, result.stderr
    assert (
        json.loads(result.stdout)["counters"]["pipelines_succeeded"]
        + len([p for p in by_seed.values() if p.state == "succeeded"])
        == 3
    )


@pytest.mark.parametrize("closed", [1, 2], ids=["stdout", "stderr"])
def test_a_closed_stdout_or_stderr_keeps_the_runs_exit_code(
    env: dict[str, str], tmp_path: Path, closed: int
) -> None:
    """`pyattacker run ... >&-` printed a traceback after the run (sys.stdout is None) and
    exited 1 whatever the pipelines did; with stderr closed the console sink failed each batch.
    The run and its exit code are what they would be with the streams open."""
    body = AUDIT_CONFIG.replace("N}", "3}").replace("grace_s: 5}", "grace_s: 5, event_sinks: [console]}")
    cfg = _config(tmp_path, body)
    result = subprocess.run(
        [sys.executable, "-m", "pyattacker", "run", "-c", str(cfg)],
        env=env,
        stdout=subprocess.PIPE if closed == 2 else None,
        stderr=subprocess.PIPE if closed == 1 else None,
        text=True,
        timeout=120,
        preexec_fn=lambda: os.close(closed),
    )
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in (result.stderr or "") + (result.stdout or "")
    assert count_succeeded(tmp_path / "runs" / "audit.db") == 3
