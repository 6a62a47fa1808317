"""Stores for the view tests (report, export, watch, serve), written by the real runner."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyattacker.errors import RetryableError
from pyattacker.model import Batch, EventRecord
from pyattacker.pipeline import pipeline
from pyattacker.pool import Pool, Resource
from pyattacker.runner import Runner
from pyattacker.store import open_store
from pyattacker.task import task

XSS = "<script>alert('x')</script>"


@task(resource="api")
async def fetch(x: dict[str, Any], ctx: Any) -> int:
    async with ctx.acquire():
        ctx.record(score=x["i"] * 0.5, label="=cmd|' /C calc'!A0")
        ctx.track_many([{"loss": 1.0 / (j + 1)} for j in range(3)])
        return int(x["i"]) + 1


@task(retry={"max_attempts": 2, "base": 0.001})
async def judge(x: int, ctx: Any) -> dict[str, Any]:
    if x % 5 == 0 and ctx.attempt < 2:
        raise RetryableError("flaky")
    if x % 7 == 0:
        raise ValueError(XSS)
    return {"v": x * 2, "note": "-negative looking" if x == 3 else "ok"}


def build_store(
    path: str | os.PathLike[str],
    n: int = 20,
    *,
    concurrency: int = 4,
    start: int = 0,
    events: str = "standard",
) -> str:
    """Run ``n`` two-task pipelines (some retry, every 7th fails with a markup message)."""
    pools = [Pool("api", [Resource("llm", id="r1", capacity=2)])]
    done = {"n": 0}

    def finished(runner: Runner, record: Any, artifact: Any) -> None:
        done["n"] += 1
        runner.report_metric("finished", done["n"])
        runner.report_metric("accuracy", 0.75)

    with Runner(
        store=str(path), pools=pools, concurrency=concurrency, on_pipeline_finished=finished, events=events
    ) as runner:
        runner.run(
            pipeline("p", fetch, judge).map(
                ({"i": i} for i in range(start, start + n)), key_of=lambda s: f"k{s['i']}"
            )
        )
    return str(path)


def add_repair_failure(path: str, pipeline_id: str) -> None:
    """Append a ``pipeline.terminal_repair_failed`` event as a later run would."""
    store = open_store(path)
    try:
        run_id = store.runs()[-1].run_id
        batch = Batch()
        batch.events.append(
            EventRecord(
                ts=1.0,
                kind="pipeline.terminal_repair_failed",
                scope="pipeline",
                run_id=run_id,
                pipeline_id=pipeline_id,
                data={"error": "disk full", "phase": "mark_final"},
            )
        )
        store.commit(batch)
    finally:
        store.close()


def sibling(tmp: Path, name: str) -> str:
    return str(tmp / name)


@contextlib.contextmanager
def serving(
    store: str, token: str | None, *, env_token: str | None = None, expect: str | None = None
) -> Iterator[tuple[int, str]]:
    """``pyattacker serve STORE`` on a free loopback port, as users start it; yields the port and
    the URL it printed (with the token), and stops the process by its pid.

    ``token`` goes on the command line (``--token``), ``env_token`` into
    ``PYATTACKER_SERVE_TOKEN`` (never inherited from the caller's environment); ``expect`` is the
    token the printed URL must carry (default: ``token``)."""
    argv = [sys.executable, "-m", "pyattacker", "serve", store, "--port", "0"]
    if token is not None:
        argv += ["--token", token]
    env = {k: v for k, v in os.environ.items() if k != "PYATTACKER_SERVE_TOKEN"}
    if env_token is not None:
        env["PYATTACKER_SERVE_TOKEN"] = env_token
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)/\?token=(\S+)", line)
        assert match, (line, proc.stderr.read() if proc.poll() is not None and proc.stderr else "")
        assert match.group(2) == (expect if expect is not None else token)
        yield int(match.group(1)), match.group(0)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
