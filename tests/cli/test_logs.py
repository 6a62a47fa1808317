"""``pyattacker logs``: task logs of a store as text or JSON Lines, filtered, and followed while a
real run (a subprocess) writes them."""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support.cli import cli, cli_env

TASKS = """
import asyncio, logging, os
from pyattacker import task

GO = os.environ.get("LOGS_GO", "")

@task(name="talk")
async def talk(value, ctx):
    if GO and value["i"] > 0:
        while not os.path.exists(GO):  # the follower is running before this line is written
            await asyncio.sleep(0.05)
    ctx.log("hello from %d <b>", value["i"])
    logging.getLogger("user").warning("warned %d", value["i"])
    return value

@task(name="fail")
def fail(value):
    raise ValueError("no")
"""


@pytest.fixture
def env(tmp_path: Path, _isolated_home: Path) -> dict[str, str]:
    (tmp_path / "log_tasks.py").write_text(TASKS)
    return cli_env(_isolated_home, tmp_path, LOGS_GO=str(tmp_path / "go"))


def _config(tmp_path: Path, n: int) -> Path:
    path = tmp_path / "c.yaml"
    path.write_text(
        "run: {store: s.db, concurrency: 1}\n"
        'pipeline:\n  name: chat\n  tasks:\n    - {use: "log_tasks:talk"}\n'
        f"source: {{kind: range, n: {n}}}\n"
    )
    return path


def test_logs_as_text_and_json_filtered_by_pipeline_and_task(env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "go").write_text("")
    done = cli(["run", "-c", str(_config(tmp_path, 3))], env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    store = str(tmp_path / "s.db")
    text = cli(["logs", store], env)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert sum("talk#1 log: hello from" in line for line in lines) == 3
    assert sum("talk#1 WARNING: user: warned" in line for line in lines) == 3
    assert "hello from 0 <b>" in text.stdout  # stored text printed as it is
    as_json = cli(["logs", store, "--json"], env)
    rows = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert len(rows) == 6 and {r["stream"] for r in rows} == {"log", "WARNING"}
    pid = rows[0]["pipeline_id"]
    one = [json.loads(line) for line in cli(["logs", store, pid, "--json"], env).stdout.splitlines()]
    assert {r["pipeline_id"] for r in one} == {pid} and len(one) == 2
    assert cli(["logs", store, "--task", "nope"], env).stdout == ""


def test_unknown_pipeline_run_or_store_is_exit_2(env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "go").write_text("")
    assert cli(["run", "-c", str(_config(tmp_path, 1))], env, cwd=tmp_path).returncode == 0
    store = str(tmp_path / "s.db")
    missing = cli(["logs", store, "no-such-pipeline"], env)
    assert missing.returncode == 2 and "no pipeline 'no-such-pipeline'" in missing.stderr
    bad_run = cli(["logs", store, "--run-id", "nope"], env)
    assert bad_run.returncode == 2 and "no run 'nope'" in bad_run.stderr
    assert cli(["logs", str(tmp_path / "absent.db")], env).returncode == 2


def _reader(proc: subprocess.Popen[str], lines: queue.Queue[str]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.put(line)


def _wait_for(lines: queue.Queue[str], needle: str, seen: list[str]) -> None:
    deadline = time.monotonic() + 90  # a hang guard, not a timing assertion
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=0.5)
        except queue.Empty:
            continue
        seen.append(line)
        if needle in line:
            return
    raise AssertionError(f"{needle!r} never arrived; got {seen}")


def test_follow_prints_lines_while_a_run_writes_them(env: dict[str, str], tmp_path: Path) -> None:
    store = tmp_path / "s.db"
    run = subprocess.Popen(
        [sys.executable, "-m", "pyattacker", "run", "-c", str(_config(tmp_path, 2))],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    follower: subprocess.Popen[str] | None = None
    try:
        deadline = time.monotonic() + 60
        while not store.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        follower = subprocess.Popen(
            [sys.executable, "-m", "pyattacker", "logs", str(store), "--follow", "--interval", "0.1"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=_reader, args=(follower, lines), daemon=True).start()
        seen: list[str] = []
        _wait_for(lines, "hello from 0", seen)
        assert run.poll() is None  # the run is still writing: pipeline 1 waits for the go file
        (tmp_path / "go").write_text("")
        _wait_for(lines, "hello from 1", seen)
        follower.send_signal(signal.SIGINT)
        assert follower.wait(timeout=60) == 0
        assert run.wait(timeout=120) == 0
    finally:
        for proc in (follower, run):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
