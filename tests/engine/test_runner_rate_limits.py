"""Rate limits inside real runs: tasks lease with ``ctx.acquire(tokens=...)``, a 429 raised
through the lease holds its resource, and the resource rows carry the budget."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from pyattacker import Pool, Resource, RetryableError, VirtualClock, pipeline, task
from pyattacker.views.common import choose_run
from pyattacker.views.live import LiveDigest, snapshot
from pyattacker.views.watch import render_snapshot
from tests.support.runner import seeds, vrunner


def test_a_run_keeps_every_60_s_window_within_rpm_and_tpm_and_records_the_budget() -> None:
    clock = VirtualClock()
    pool = Pool("llm", [Resource("llm", id="k", capacity=16, limits={"rpm": 30, "tpm": 6000})], clock=clock)
    grants: list[tuple[float, float]] = []

    @task(resource="llm")
    async def call(x: Any, ctx: Any) -> Any:
        async with ctx.acquire(tokens=300) as lease:
            grants.append((ctx.clock.now(), 150.0))
            await ctx.clock.sleep(0.5)
            lease.report(ok=True, usage={"tokens": 150})
        return x

    with vrunner(pools=[pool], clock=clock, concurrency=16) as r:
        rep = r.run(pipeline("p", call).map(seeds(90)))
        resource_rows = r.store.resources()
    assert rep.succeeded == 90
    times = sorted(t for t, _ in grants)
    for start in times:
        inside = [t for t in times if start <= t < start + 60.0]
        assert len(inside) <= 30
        assert 150.0 * len(inside) <= 6000
    assert times[-1] >= 120.0  # 90 requests at 30 a minute: three windows
    (row,) = [x for x in resource_rows if x.resource_id == "k"]
    assert set(row.stats["limits"]) == {"rpm", "tpm"}
    assert row.stats["waited_budget_ms"] > 0


def test_a_429_raised_through_ctx_acquire_holds_the_resource_for_its_retry_after() -> None:
    """Pipeline 0 gets a 429 at 0 s asking for 3.25 s; pipeline 1 asks for a lease at 1 s and
    is granted one when the hold ends, not before (the retry policy alone would not wait)."""
    clock = VirtualClock()
    pool = Pool("llm", [Resource("llm", id="k", capacity=4, limits={"rpm": 1000})], clock=clock)
    granted: dict[tuple[int, int], float] = {}

    @task(resource="llm", retry={"max_attempts": 2, "base": 0.0, "jitter": "none"})
    async def call(x: Any, ctx: Any) -> Any:
        if x["i"] == 1:
            await ctx.clock.sleep(1.0)
        async with ctx.acquire():
            granted[(x["i"], ctx.attempt)] = ctx.clock.now()
            if x["i"] == 0 and ctx.attempt == 1:
                raise RetryableError("429", error_class="rate_limit", retry_after=3.25)
        return x

    with vrunner(pools=[pool], clock=clock, concurrency=2) as r:
        rep = r.run(pipeline("p", call).map(seeds(2)))
    assert rep.succeeded == 2
    assert granted[(0, 1)] == 0.0
    assert round(granted[(1, 1)] * 1000) == 3250
    assert round(granted[(0, 2)] * 1000) == 3250


def test_watch_shows_each_limited_resource_budget_and_the_waits_for_budget_and_slots() -> None:
    clock = VirtualClock()
    pool = Pool(
        "llm",
        [Resource("llm", id="k", capacity=2, limits={"rpm": 4}), Resource("llm", id="free", capacity=1)],
        clock=clock,
    )

    @task(resource="llm")
    async def call(x: Any, ctx: Any) -> Any:
        async with ctx.acquire(where={"id": "k"}):
            await ctx.clock.sleep(1.0)
        return x

    with vrunner(pools=[pool], clock=clock, concurrency=4) as r:
        assert r.run(pipeline("p", call).map(seeds(6))).succeeded == 6
        choice = choose_run(r.store, None)
        snap = snapshot(r.store, choice, LiveDigest(choice.run_id))
    (summary,) = snap["pools"]
    assert [b["resource_id"] for b in summary["budget"]] == ["k"]
    assert summary["waited_budget_ms"] > 0 and summary["waited_slot_ms"] > 0, (
        snap["pools"],
        r.store.resources(),
    )
    out = io.StringIO()
    Console(file=out, width=200).print(render_snapshot(snap))
    text = out.getvalue()
    assert "  k: rpm " in text and "/4 left" in text
    assert "waited for budget " in text and "for a slot " in text
