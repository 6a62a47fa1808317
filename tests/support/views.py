"""Stores for the view tests (report, export, watch, serve), written by the real runner."""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyattacker import Handoff, Pool, Resource, RetryableError, Runner, pipeline, task
from pyattacker.model import Batch, EventRecord
from pyattacker.store.location import open_store

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


# -- a store whose pipelines jump (docs/handoffs.md) --------------------------------------------
#: where each seed's ``lookup`` or ``judge`` sends it in the current run (build_handoff_store sets it)
ROUTES: dict[int, str] = {}


@task("load")
def h_load(seed: dict[str, int]) -> dict[str, Any]:
    return {"i": seed["i"]}


@task("lookup")
def h_lookup(q: dict[str, Any]) -> Any:
    route = ROUTES.get(q["i"])
    if route == "report":
        return Handoff.to("report", {**q, "answer": "cached"}, reason="cache hit")
    if route == "end":
        return Handoff.end({**q, "answer": None}, reason="out of scope")
    return q


@task("ask")
def h_ask(q: dict[str, Any]) -> dict[str, Any]:
    return {**q, "answer": f"answer {q['i']}"}


@task("judge")
def h_judge(a: dict[str, Any]) -> Any:
    if ROUTES.get(a["i"]) == "judge_end":
        return Handoff.end({**a, "score": 1.0}, reason="good enough")
    return {**a, "score": 0.5}


@task("report")
def h_report(a: dict[str, Any]) -> dict[str, Any]:
    return dict(a)


@task(XSS)
def h_xss(q: dict[str, Any]) -> Any:
    return Handoff.to("report", reason=XSS)


def _hop(i: int, n: int) -> Any:
    """Task ``s<i>`` of an ``n``-task chain: the even ones jump two ahead, the last but one ends."""

    def step(x: Any) -> Any:
        if i % 2 == 0 and i + 2 < n:
            return Handoff.to(f"s{i + 2}", reason=f"s{i + 1} not needed")
        if i == n - 2:
            return Handoff.end(reason="far enough")
        return x

    return task(f"s{i}")(step)


QA_EDGES = {"edges": {"lookup": ["report", "end"], "judge": ["end"]}}
QA = pipeline("qa", h_load, h_lookup, h_ask, h_judge, h_report, control=QA_EDGES)
HOPS = pipeline(
    "hops",
    *(_hop(i, 12) for i in range(12)),
    control={"edges": {**{f"s{i}": [f"s{i + 2}"] for i in range(0, 10, 2)}, "s10": ["end"]}},
)
MARKUP = pipeline("markup", h_load, h_xss, h_report, control={"edges": {XSS: ["report"]}})


def _qa(*seeds: int) -> Any:
    return QA.map(({"i": i} for i in seeds), key_of=lambda s: f"k{s['i']}")


def build_handoff_store(path: str | os.PathLike[str]) -> str:
    """Two runs of pipelines that jump, each row of their ledgers written by the real runner.

    The first run: ``k4`` jumps ``lookup -> report``; ``hops`` jumps six times (``s0 -> s2``,
    ..., ``s8 -> s10``, ``s10 -> end``). The second (the latest; ``--fresh-restart
    --retry-succeeded``): ``k0`` jumps ``lookup -> report``, ``k1`` ``lookup -> end``, ``k2``
    runs every task, ``k3`` ends at ``judge``; ``k4`` and ``hops`` restart from the seed and
    jump again (``k4`` to END); ``kx`` jumps from a task named ``XSS`` with reason ``XSS``. The
    latest run commits 11 jumps."""
    with Runner(store=str(path)) as runner:
        ROUTES.clear()
        ROUTES.update({4: "report"})
        first = runner.run(itertools.chain(_qa(4), HOPS.map([{"i": 0}], key_of=lambda s: "hops")))
        assert first.counters["handoffs"] == 7, first.counters
    with Runner(store=str(path), fresh_restart=True, retry_succeeded=True) as runner:
        ROUTES.clear()
        ROUTES.update({0: "report", 1: "end", 3: "judge_end", 4: "end"})
        second = runner.run(
            itertools.chain(
                _qa(0, 1, 2, 3, 4),
                HOPS.map([{"i": 0}], key_of=lambda s: "hops"),
                MARKUP.map([{"i": 9}], key_of=lambda s: "kx"),
            )
        )
        assert second.succeeded == 7 and second.counters["handoffs"] == 11, second
    ROUTES.clear()
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
        for pipe in (proc.stdout, proc.stderr):  # no ResourceWarning for the pipes left open
            if pipe is not None:
                pipe.close()
