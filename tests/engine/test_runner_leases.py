"""The lease-safety contract inside real runs: no task ever ends holding a lease."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rich.console import Console

from pyattacker import Pool, Resource, RetryableError, VirtualClock, pipeline, task
from pyattacker.plugins.registry import Registry
from pyattacker.resources.algorithm import AlgorithmResolver
from pyattacker.views.common import choose_run
from pyattacker.views.live import LiveDigest, snapshot
from pyattacker.views.watch import render_snapshot
from tests.support.runner import events, rows, seeds, states, vrunner


def _pool(clock: VirtualClock, capacity: int = 2, n: int = 2) -> Pool:
    return Pool(
        "apis", [Resource.create("api", capacity=capacity, cooldown_s=1.0) for _ in range(n)], clock=clock
    )


def test_lease_returned_on_exception_and_recorded_on_the_attempt() -> None:
    clock = VirtualClock()
    pool = _pool(clock)

    @task(resource="apis", retry={"max_attempts": 2, "base": 0.1})
    async def call(x: Any, ctx: Any) -> Any:
        async with ctx.acquire() as lease:
            if ctx.attempt == 1:
                lease.report(ok=False)
                raise RetryableError("flaky endpoint")
            lease.report(ok=True, latency_ms=5, usage={"tokens": 3})
            return x

    with vrunner(pools=[pool], clock=clock) as r:
        rep = r.run(pipeline("p", call).map(seeds(5)))
        atts = rows(r.store, "attempts")
    assert rep.succeeded == 5 and pool.stats().active == 0
    assert all(a.leases and a.leases[0]["pool"] == "apis" for a in atts)
    assert {a.outcome for a in atts} == {"failed", "succeeded"}


def test_forgotten_escape_hatch_lease_is_reclaimed_as_leaked() -> None:
    clock = VirtualClock()
    pool = _pool(clock)

    @task(resource="apis")
    async def leaky(x: Any, ctx: Any) -> Any:
        await ctx.acquire_lease()
        return x

    with vrunner(pools=[pool], clock=clock) as r:
        rep = r.run(pipeline("p", leaky).map(seeds(3)))
        leaked = events(r.store, "lease.leaked")
    assert rep.succeeded == 3 and rep.leases_leaked == 3
    assert len(leaked) == 3 and leaked[0].data["hint"]
    assert pool.stats().active == 0 and pool.stats().leaked_total == 3


def test_strict_leases_turn_a_leak_into_a_failure() -> None:
    clock = VirtualClock()
    pool = _pool(clock)

    @task(resource="apis")
    async def leaky(x: Any, ctx: Any) -> Any:
        await ctx.acquire_lease()
        return x

    with vrunner(pools=[pool], clock=clock, strict_leases=True) as r:
        rep = r.run(pipeline("p", leaky).map(seeds(2)))
        failed = [p for p in rows(r.store, "pipelines") if p.state == "failed"]
    assert rep.failed == 2 and {p.error_type for p in failed} == {"LeaseLeakError"}
    assert pool.stats().active == 0


def test_timeout_while_holding_a_lease_returns_it() -> None:
    clock = VirtualClock()
    pool = _pool(clock, capacity=1, n=1)

    @task(resource="apis", timeout_s=1)
    async def hang(x: Any, ctx: Any) -> Any:
        async with ctx.acquire():
            await asyncio.sleep(100)

    with vrunner(pools=[pool], clock=clock, concurrency=3) as r:
        rep = r.run(pipeline("p", hang).map(seeds(3)))
    assert rep.failed == 3 and pool.stats().active == 0


def test_unknown_pool_fails_the_pipeline_with_a_clear_error() -> None:
    @task(resource="nope")
    async def t(x: Any, ctx: Any) -> Any:
        async with ctx.acquire():
            return x

    with vrunner() as r:
        rep = r.run(pipeline("p", t).map(seeds(1)))
        (row,) = rows(r.store, "pipelines")
    assert rep.failed == 1 and row.error_type == "PoolNotFound" and "nope" in (row.error_message or "")


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    plan=st.lists(st.sampled_from(["ok", "fail", "retry", "hang", "leak", "slow"]), min_size=1, max_size=12),
    concurrency=st.integers(1, 4),
    capacity=st.integers(1, 3),
    stop_at=st.one_of(st.none(), st.floats(0.5, 30)),
)
def test_no_lease_outlives_its_task_and_every_pipeline_terminates(
    plan: list[str], concurrency: int, capacity: int, stop_at: float | None
) -> None:
    clock = VirtualClock()
    pool = _pool(clock, capacity=capacity, n=1)
    held_after: list[int] = []

    @task(resource="apis", timeout_s=5, retry={"max_attempts": 2, "base": 0.5})
    async def step(x: dict[str, int], ctx: Any) -> Any:
        kind = plan[x["i"]]
        async with ctx.acquire() as lease:
            await asyncio.sleep(0.1)
            if kind == "fail":
                raise ValueError("bad")
            if kind == "retry" and ctx.attempt == 1:
                lease.report(ok=False)
                raise RetryableError("again")
            if kind == "hang":
                await asyncio.sleep(60)
            if kind == "slow":
                await asyncio.sleep(3)
        if kind == "leak":
            await ctx.acquire_lease()
        return x

    @task
    def after(x: Any, ctx: Any) -> Any:
        held_after.append(pool.stats().active)
        return x

    r = vrunner(pools=[pool], clock=clock, concurrency=concurrency, stop_after_s=stop_at, grace_s=1)
    rep = r.run(pipeline("p", step, after).map(seeds(len(plan))))
    assert pool.stats().active == 0
    assert all(n <= capacity for n in held_after)
    st_ = states(r.store)
    assert set(st_.values()) <= {"succeeded", "failed", "interrupted"}
    assert rep.counters["pipelines_done"] == rep.counters["pipelines_admitted"]
    if stop_at is None:
        assert set(st_.values()) <= {"succeeded", "failed"} and len(st_) == len(plan)


def test_events_setting_decides_per_lease_and_per_success_events() -> None:
    """standard: each lease and success is a fact on its attempt row only; all: also events."""

    @task(resource="apis")
    async def call(x: Any, ctx: Any) -> Any:
        async with ctx.acquire():
            return x

    kinds: dict[str, set[str]] = {}
    for mode in ("standard", "all"):
        clock = VirtualClock()
        with vrunner(pools=[_pool(clock)], clock=clock, events=mode) as r:
            r.run(pipeline("p", call).map(seeds(2)))
            r.run(pipeline("p", call).map(seeds(2)))  # everything skipped
            kinds[mode] = {e.kind for e in events(r.store)}
            assert all(a.leases for a in rows(r.store, "attempts"))
    lease_and_success = {"resource.leased", "resource.released", "task.succeeded", "pipeline.skipped"}
    assert not lease_and_success & kinds["standard"] and "run.skipped" in kinds["standard"]
    assert lease_and_success <= kinds["all"] and "run.skipped" not in kinds["all"]


def test_synchronous_first_try_is_used_when_it_leases_and_skipped_when_it_cannot() -> None:
    """``try_now`` (optional on an algorithm) serves a free slot without the coroutine path;
    None falls through to ``acquire``; an algorithm without it always goes through ``acquire``."""
    calls: dict[str, int] = {"try_now": 0, "acquire": 0}

    class Counting:
        name = "counting"

        def __init__(self, fast: bool) -> None:
            self.fast = fast

        def try_now(self, pool: Pool, *, ctx: Any, where: Any, selector: Any) -> Any:
            calls["try_now"] += 1
            return pool.try_acquire(ctx, where=where, **selector) if self.fast else None

        async def acquire(self, pool: Pool, *, ctx: Any, where: Any, timeout: Any, selector: Any) -> Any:
            calls["acquire"] += 1
            return pool.try_acquire(ctx, where=where, **selector)

        def fingerprint(self) -> dict[str, Any]:
            return {"name": self.name, "fast": self.fast}

    for fast, expected in ((True, {"try_now": 4, "acquire": 0}), (False, {"try_now": 4, "acquire": 4})):
        calls.update(try_now=0, acquire=0)
        clock = VirtualClock()
        pool = _pool(clock)

        @task(resource="apis", algorithm=Counting(fast))
        async def call(x: Any, ctx: Any) -> Any:
            async with ctx.acquire():
                pass
            lease = await ctx.acquire()  # the awaitable form takes the same path
            lease.release_now()
            return x

        with vrunner(pools=[pool], clock=clock) as r:
            rep = r.run(pipeline("p", call).map(seeds(2)))
            atts = rows(r.store, "attempts")
        assert rep.succeeded == 2 and calls == expected, (fast, calls)
        assert all(len(a.leases) == 2 for a in atts) and pool.stats().active == 0


def test_the_runner_resolves_algorithm_names_and_hands_the_pool_instances() -> None:
    """The runner holds the plugins, so a task's ``algorithm: backoff`` and a
    ``ctx.acquire(algorithm="wait")`` are resolved there, once per name: the pool gets the
    instance, and a pool whose own registry knows no algorithm at all still serves them."""
    clock = VirtualClock()
    pool = Pool(
        "apis",
        [Resource.create("api", capacity=1)],
        clock=clock,
        algorithms=AlgorithmResolver(Registry("algorithms")),
    )

    @task(resource="apis", algorithm={"name": "backoff", "base": 0.01, "jitter": "none"})
    async def call(x: Any, ctx: Any) -> Any:
        async with ctx.acquire():
            await asyncio.sleep(0.05)
        async with ctx.acquire("apis", algorithm="wait") as lease:
            await asyncio.sleep(0.05)
            return lease.pool

    with vrunner(pools=[pool], clock=clock, concurrency=4) as r:
        rep = r.run(pipeline("p", call).map(seeds(4)))
        assert r.algorithms.resolve("wait") is r.algorithms.resolve("wait")
    assert rep.succeeded == 4 and pool.stats().active == 0
    assert pool.stats().waits_total == 8 and pool.stats().wait_ms_max > 0  # both paths waited


def test_a_missing_pool_is_not_remembered_and_a_pool_added_later_is_used() -> None:
    """``ctx.acquire()`` resolves its pool once per task; a failed resolution is not cached, and
    adding a pool makes every task resolve again."""
    clock = VirtualClock()

    @task(resource="late", retry={"max_attempts": 1})
    async def call(x: Any, ctx: Any) -> Any:
        async with ctx.acquire() as lease:
            return lease.pool

    r = vrunner(pools=[_pool(clock)], clock=clock)
    first = r.run(pipeline("p", call).map(seeds(2)))
    assert first.failed == 2
    assert {a.error_type for a in rows(r.store, "attempts")} == {"PoolNotFound"}
    r.add_pool(Pool("late", [Resource.create("api", capacity=2)], clock=clock))
    second = r.run(pipeline("p2", call).map(seeds(2)))
    assert second.succeeded == 2
    assert {a.leases[0]["pool"] for a in rows(r.store, "attempts") if a.outcome == "succeeded"} == {"late"}


def test_a_run_whose_endpoints_all_died_ends_instead_of_waiting_for_ever() -> None:
    """Every endpoint failed ``dead_after`` times in a row: the pipelines still waiting for a
    lease fail with ResourceUnavailable naming the dead endpoints, and the run ends (before, it
    waited for ever with every worker asleep)."""
    clock = VirtualClock()
    pool = Pool(
        "apis",
        [Resource.create("api", id=f"e{i}", degrade_after=1, dead_after=2, cooldown_s=1.0) for i in range(2)],
        clock=clock,
    )

    @task(resource="apis", retry={"max_attempts": 3, "base": 0.1})
    async def call(x: Any, ctx: Any) -> Any:
        async with ctx.acquire() as lease:
            lease.report(ok=False, error="HTTP 500")
            raise RetryableError("HTTP 500")

    with vrunner(pools=[pool], clock=clock, concurrency=2) as r:
        rep = r.run(pipeline("p", call).map(seeds(6)))
        atts = rows(r.store, "attempts")
    assert rep.failed == 6 and rep.succeeded == 0 and pool.stats().active == 0
    assert {res.state.value for res in pool.resources()} == {"dead"}
    errors = {a.error_message for a in atts if a.error_type == "ResourceUnavailable"}
    assert errors and all("e0 dead after 2" in e and "e1 dead after 2" in e for e in errors)


def test_a_run_waiting_for_a_resource_nothing_matches_records_the_hint_and_can_be_stopped(
    tmp_path: Path,
) -> None:
    """A selector that matches no resource waits for a publish. Each waiting request leaves one
    ``acquire.waiting_unmatched`` event in the store (the live views read it from there), and
    the run still stops: the waits are interrupted and the pipelines are resumable."""
    clock = VirtualClock()
    pool = _pool(clock)

    @task(resource="apis")
    async def call(x: Any, ctx: Any) -> Any:
        async with ctx.acquire(region="mars"):
            return x

    db = tmp_path / "runs.db"
    with vrunner(store=str(db), pools=[pool], clock=clock, concurrency=2, stop_after_s=30, grace_s=1) as r:
        rep = r.run(pipeline("p", call).map(seeds(3)))
        hints = events(r.store, "acquire.waiting_unmatched")
        pipeline_ids = {p.pipeline_id for p in rows(r.store, "pipelines")}
        digest = LiveDigest(r.run_id)
        digest.update(r.store)
        snap = snapshot(r.store, choose_run(r.store, None), digest)
    assert snap["wait_hints"] == {"acquire.waiting_unmatched": 2}
    panel = io.StringIO()
    Console(file=panel, width=250).print(render_snapshot(snap))
    assert "warning: 2 lease request(s) matched no resource of their pool" in panel.getvalue()
    assert db.exists() and rep.status == "interrupted" and rep.stop_reason == "stop_after_s"
    assert rep.interrupted == 3 and pool.stats().active == 0 and pool.waiting == 0
    assert len(hints) == 2  # one per waiting request (concurrency 2), not one per wake-up
    assert {h.pool for h in hints} == {"apis"} and all(h.resource_id is None for h in hints)
    assert {h.data["pipeline_id"] for h in hints} <= pipeline_ids
    for hint in hints:
        assert hint.data["selector"] == {"region": "'mars'"} and hint.data["where"] is False
        assert hint.data["resources"] == 2 and hint.data["task"] == "call"
    assert digest.event_counts["acquire.waiting_unmatched"] == 2
