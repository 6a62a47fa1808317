"""A run that stops making progress says why, without ``--progress``: one line on stderr (the
``pyattacker`` logger) and a ``run.stalled`` event, from a timer (``run.stall_after_s``)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from pyattacker import Pool, Resource, RunConfig, VirtualClock, pipeline, task
from tests.support.cli import cli, cli_env
from tests.support.runner import events, seeds, vrunner

ALWAYS_FAILS = """\
run: {store: st.db, concurrency: 4, stall_after_s: 0.5, stop_after_s: 2, grace_s: 0}
pools:
  apis:
    resources: [{id: api-1, capacity: 1, degrade_after: 1, dead_after: 1000, cooldown_s: 60}]
pipeline:
  tasks:
    - {use: pyattacker.tasks:simulate_llm, resource: apis, kwargs: {latency_ms: 1, fail_rate: 1.0},
       retry: {max_attempts: 3, "on": [RetryableError]}}
source: {kind: range, n: 4}
"""


def test_a_run_whose_endpoint_always_fails_says_why_it_stalls(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text(ALWAYS_FAILS)
    env = cli_env(tmp_path / "home", tmp_path)
    result = cli(["run", "-c", "c.yaml"], env, cwd=tmp_path)  # no --progress
    assert result.returncode == 130, result.stderr  # stopped by stop_after_s, resumable
    notices = [line for line in result.stderr.splitlines() if "no pipeline has finished for" in line]
    assert notices, result.stderr
    first = notices[0]
    assert "(4 in flight)" in first
    assert "pool 'apis' has no usable resource (api-1 cooling down after failures" in first
    assert "cooldown_s, degrade_after and dead_after" in first  # what to change
    assert "run.stall_after_s=0.5" in first  # the setting that made it speak
    exported = cli(["export", "st.db", "-", "--rows", "events"], env, cwd=tmp_path)
    stalled = [e for e in map(json.loads, exported.stdout.splitlines()) if e["kind"] == "run.stalled"]
    assert stalled and stalled[0]["data"]["reasons"][0].startswith("pool 'apis' has no usable resource")


def test_leases_waiting_on_a_selector_nothing_matches_are_named(caplog: pytest.LogCaptureFixture) -> None:
    clock = VirtualClock()
    pool = Pool("gpu", [Resource.create("gpu", id="g-1", tags=["a100"])], clock=clock)

    @task(resource="gpu")
    async def train(x: Any, ctx: Any) -> Any:
        async with ctx.acquire(tags="h100"):
            return x

    config = RunConfig(stall_after_s=30, stop_after_s=100, grace_s=0, handle_signals=False)
    with (
        caplog.at_level(logging.WARNING, logger="pyattacker"),
        vrunner(pools=[pool], clock=clock, config=config) as r,
    ):
        r.run(pipeline("p", train).map(seeds(2)))
        stalled = events(r.store, "run.stalled")
    said = [rec.getMessage() for rec in caplog.records if "no pipeline has finished" in rec.getMessage()]
    assert said and "2 lease request(s) of pool 'gpu' wait on a selector that no resource matches" in said[0]
    assert stalled and "check the task's selector" in stalled[0].data["reasons"][0]


def test_a_run_that_makes_progress_says_nothing(caplog: pytest.LogCaptureFixture) -> None:
    clock = VirtualClock()

    @task
    async def slow(x: Any, ctx: Any) -> Any:
        await clock.sleep(20)  # each finishes within the threshold: progress, never a stall
        return x

    config = RunConfig(stall_after_s=30, concurrency=1, handle_signals=False)
    with caplog.at_level(logging.WARNING, logger="pyattacker"), vrunner(clock=clock, config=config) as r:
        report = r.run(pipeline("p", slow).map(seeds(5)))
        assert not events(r.store, "run.stalled")
    assert report.succeeded == 5
    assert not [rec for rec in caplog.records if "no pipeline has finished" in rec.getMessage()]
