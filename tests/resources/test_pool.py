"""Pools, resources, leases and the bus: selection, health, wake-ups, lease safety, views."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest

from pyattacker import AcquireTimeout, ConfigError, Lease, Pool, Resource, ResourceUnavailable, VirtualClock
from pyattacker.clock import Clock
from pyattacker.plugins.registry import Registry
from pyattacker.resources.bus import Bus
from pyattacker.resources.diagnostics import PoolStats
from pyattacker.resources.pool import ResourceEvent
from pyattacker.resources.redact import mask_secrets
from pyattacker.resources.resource import ResourceState
from tests.support.pools import Ctx, Recorder, algorithms_fixture, clock_fixture, run

__all__ = ["algorithms_fixture", "clock_fixture"]  # fixtures used by name below


def make_pool(clock: VirtualClock, n: int = 1, *, registry: Registry | None = None, **kw: Any) -> Pool:
    resources = [Resource.create("api", id=f"r{i}", **kw) for i in range(n)]
    return Pool("p", resources, clock=clock, algorithms=registry)


# -- resources ------------------------------------------------------------------------------


def test_create_assigns_kind_counter_ids_and_validates_capacity() -> None:
    a, b = Resource.create("idtest"), Resource.create("idtest")
    assert a.id.startswith("idtest-") and b.id.startswith("idtest-")
    assert int(b.id.rsplit("-", 1)[1]) == int(a.id.rsplit("-", 1)[1]) + 1
    assert Resource.create("x", id="mine").id == "mine"
    bad: Any
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ConfigError, match="capacity"):
            Resource.create("x", capacity=bad)
    with pytest.raises(ConfigError, match="cooldown_s"):
        Resource.create("x", cooldown_s=-1)


def test_spec_masks_secret_values_recursively_keeping_last_four() -> None:
    r = Resource.create(
        "llm",
        id="r",
        options={
            "api_key": "sk-abcdef123456",
            "endpoint": "https://x",
            "auth": {"Authorization": "Bearer zzzz9876", "token": 1234567, "user": "bob"},
            "keys": ["aaaaaaa1", "bbbbbbb2"],
            "password": "abc",
        },
        meta={"client_secret": "shhhhhh-0001"},
    )
    spec = r.spec()
    assert spec["options"]["api_key"] == "****3456"
    assert spec["options"]["endpoint"] == "https://x"
    assert spec["options"]["auth"] == {"Authorization": "****9876", "token": "****4567", "user": "bob"}
    assert spec["options"]["keys"] == ["****aaa1", "****bbb2"]
    assert spec["options"]["password"] == "****"
    assert spec["meta"]["client_secret"] == "****0001"
    assert r.options["api_key"] == "sk-abcdef123456"  # the live options are untouched
    assert mask_secrets({"SECRET_THING": {"nested": "1234567890"}}) == {
        "SECRET_THING": {"nested": "****7890"}
    }


def test_selector_lookup_order_and_dotted_paths() -> None:
    r = Resource.create("llm", id="a", options={"model": "m1", "limits": {"rpm": 60}}, tags=("eu", "fast"))
    assert r.matches({"id": "a", "kind": "llm", "model": "m1"})
    assert r.matches({"limits.rpm": 60})
    assert not r.matches({"limits.rpm": 61})
    assert not r.matches({"limits.tpm": 1})
    assert r.matches({"tag": "eu"}) and r.matches({"tags": ["eu", "fast"]})
    assert not r.matches({"tag": "us"})
    assert r.matches(None, where=lambda res: res.options["model"] == "m1")
    assert not r.matches({"model": "m1"}, where={"model": "m2"})
    mapped = Resource.create("llm", tags={"region": "eu"})
    assert mapped.matches({"region": "eu"}) and not mapped.matches({"region": "us"})


# -- selection --------------------------------------------------------------------------------


def test_try_acquire_lowest_load_then_round_robin(clock: VirtualClock) -> None:
    pool = make_pool(clock, 3, capacity=2)
    first = [pool.try_acquire() for _ in range(3)]
    assert [lease.resource.id for lease in first if lease] == ["r0", "r1", "r2"]
    second = [pool.try_acquire() for _ in range(3)]
    assert sorted(lease.resource.id for lease in second if lease) == ["r0", "r1", "r2"]
    assert pool.try_acquire() is None
    assert first[1] is not None
    first[1].release_now()  # r1 is now the least loaded
    again = pool.try_acquire()
    assert again is not None and again.resource.id == "r1"


def test_round_robin_among_idle_ties(clock: VirtualClock) -> None:
    pool = make_pool(clock, 3)
    picked = []
    for _ in range(6):
        lease = pool.try_acquire()
        assert lease is not None
        picked.append(lease.resource.id)
        lease.release_now()
    assert picked == ["r0", "r1", "r2", "r0", "r1", "r2"]


def test_selector_where_score_and_revoked(clock: VirtualClock) -> None:
    pool = Pool(
        "p",
        [
            Resource.create("api", id="a", options={"region": "eu", "w": 1}),
            Resource.create("api", id="b", options={"region": "us", "w": 5}),
            Resource.create("api", id="c", options={"region": "eu", "w": 3}),
        ],
        clock=clock,
    )
    lease = pool.try_acquire(region="us")
    assert lease is not None and lease.resource.id == "b"
    lease.release_now()
    best = pool.try_acquire(score=lambda r: r.options["w"])
    assert best is not None and best.resource.id == "b"
    best.release_now()
    eu = pool.try_acquire(where=lambda r: r.options["region"] == "eu", score=lambda r: r.options["w"])
    assert eu is not None and eu.resource.id == "c"
    eu.release_now()
    assert pool.revoke("b", reason="rotated")
    assert pool.try_acquire(region="us") is None
    assert not pool.revoke("b") and not pool.revoke("nope")
    assert pool.select(region="eu") is not None


def test_lease_attributes_and_as_dict(clock: VirtualClock) -> None:
    pool = Pool(
        "p", [Resource.create("api", id="r", options={"url": "u"}, factory=lambda r: ("client", r.id))]
    )
    assert pool.clock_is_default
    pool.clock = clock  # e.g. a runner imposing its virtual clock
    assert not pool.clock_is_default
    ctx = Ctx(task_name="fetch")
    lease = pool.try_acquire(ctx)
    assert lease is not None
    assert lease.client == ("client", "r") and lease.options == {"url": "u"}
    assert lease.pool == "p" and lease.task_name == "fetch" and not lease.released
    assert set(lease.as_dict()) == {"pool", "resource_id", "held_ms", "waited_ms"}
    clock.advance(1.5)
    assert lease.held_ms == 1500.0
    assert lease.release_now() is True and lease.released
    assert lease.release_now() is False  # idempotent


def test_try_free_leases_like_the_wait_algorithms_first_try(clock: VirtualClock) -> None:
    """``Pool.try_free`` (the runner's route for ``ctx.acquire()``) is ``try_free_slot`` without a
    filter: the same resources in the same order, each lease recorded as a zero wait."""
    from pyattacker.resources.algorithm import try_free_slot

    def leases(take: Any, pool: Pool) -> list[str | None]:
        got = [take(pool) for _ in range(4)]
        return [lease.resource.id if lease else None for lease in got]

    for n, capacity in ((1, 2), (3, 1)):
        free, slot = make_pool(clock, n, capacity=capacity), make_pool(clock, n, capacity=capacity)
        mine = leases(lambda p: p.try_free(Ctx(task_name="t")), free)
        theirs = leases(lambda p: try_free_slot(p, ctx=Ctx(task_name="t"), where=None, selector={}), slot)
        assert mine == theirs and mine[-1] is None, (n, mine, theirs)
        assert free.stats().waits_total == slot.stats().waits_total == len([m for m in mine if m])
        assert free.stats().wait_ms_max == 0.0 and free.leases_total == slot.leases_total
    pool = make_pool(clock, 1)
    lease = pool.try_free(Ctx(task_name="t"))
    assert lease is not None and lease.task_name == "t"
    clock.advance(0.25)
    lease.release_now()
    clock.advance(1.0)  # a released lease's record keeps the time it was held
    assert lease.as_dict() == {"pool": "p", "resource_id": "r0", "held_ms": 250.0, "waited_ms": 0.0}


# -- health -----------------------------------------------------------------------------------


def test_failures_degrade_then_cooldown_keeps_count_and_lone_resource_dies(clock: VirtualClock) -> None:
    rec = Recorder()
    pool = Pool("p", [Resource.create("api", id="r", cooldown_s=30)], clock=clock, on_event=rec)
    r = pool.resource("r")
    assert r is not None
    for _ in range(3):
        lease = pool.try_acquire()
        assert lease is not None
        lease.report(ok=False, error=RuntimeError("boom"))
        lease.release_now()
    assert r.state is ResourceState.DEGRADED and r.consecutive_failures == 3
    assert pool.try_acquire() is None  # blocked until the cooldown ends
    degraded = rec.of("resource.degraded")
    assert degraded[0].data == {"consecutive_failures": 3, "cooldown_s": 30.0, "error": "RuntimeError: boom"}
    for expected in (4, 5, 6, 7):
        clock.advance(30)
        lease = pool.try_acquire()
        assert lease is not None, "the cooldown elapsed"
        assert r.consecutive_failures == expected - 1  # the cooldown did not reset the counter
        lease.report(ok=False)
        lease.release_now()
        assert r.state is ResourceState.DEGRADED
    clock.advance(30)
    lease = pool.try_acquire()
    assert lease is not None
    lease.report(ok=False, error="still broken")
    lease.release_now()
    assert r.state is ResourceState.DEAD
    assert rec.of("resource.dead")[0].data == {"consecutive_failures": 8, "error": "still broken"}
    clock.advance(1000)
    assert pool.try_acquire() is None  # dead stays dead


def test_ok_report_revives_and_resets(clock: VirtualClock) -> None:
    rec = Recorder()
    pool = Pool("p", [Resource.create("api", id="r", degrade_after=1, dead_after=2)], clock=clock)
    pool.listeners.append(rec)
    a = pool.try_acquire()
    assert a is not None
    a.report(ok=False)
    a.report(ok=False)
    r = a.resource
    assert r.state is ResourceState.DEAD
    a.report(ok=True, latency_ms=100)
    assert r.state is ResourceState.READY and r.consecutive_failures == 0 and r.blocked_until is None
    assert "resource.recovered" in rec.kinds()
    a.release_now()
    assert pool.try_acquire() is not None


def test_latency_ema_and_usage_counters(clock: VirtualClock) -> None:
    pool = make_pool(clock)
    lease = pool.try_acquire()
    assert lease is not None
    lease.report(latency_ms=100, usage={"tokens": 10})
    lease.report(latency_ms=200, usage={"tokens": 5, "requests": 1})
    assert lease.resource.latency_ms_ema == pytest.approx(0.7 * 100 + 0.3 * 200)
    assert lease.resource.usage == {"tokens": 15, "requests": 1}
    assert pool.stats().usage == {"tokens": 15, "requests": 1}
    with pytest.raises(ValueError, match="tokens"):
        lease.report(usage={"tokens": "many"})  # type: ignore[dict-item]


def test_degrade_forces_one_cooldown(clock: VirtualClock) -> None:
    rec = Recorder()
    pool = Pool("p", [Resource.create("api", id="r", cooldown_s=10)], clock=clock, on_event=rec)
    lease = pool.try_acquire()
    assert lease is not None
    lease.degrade("429 from server")
    lease.release_now()
    assert lease.resource.state is ResourceState.DEGRADED and lease.resource.consecutive_failures == 0
    assert rec.of("resource.degraded")[0].data == {"reason": "429 from server"}
    clock.advance(9.9)
    assert pool.try_acquire() is None
    clock.advance(0.1)
    assert pool.try_acquire() is not None
    assert rec.of("resource.recovered")[0].data == {"reason": "cooldown_elapsed"}


# -- factories ------------------------------------------------------------------------------------


def test_factory_is_called_lazily_and_once(clock: VirtualClock) -> None:
    calls: list[str] = []

    def factory(r: Resource) -> object:
        calls.append(r.id)
        return object()

    pool = Pool("p", [Resource.create("api", id="r", capacity=2, factory=factory)], clock=clock)
    assert calls == []
    a, b = pool.try_acquire(), pool.try_acquire()
    assert a is not None and b is not None and a.client is b.client
    a.release_now()
    b.release_now()
    assert pool.try_acquire() is not None
    assert calls == ["r"]


def test_factory_failure_refuses_blocks_until_cooldown_then_retries(clock: VirtualClock) -> None:
    rec = Recorder()
    attempts: list[int] = []

    def factory(r: Resource) -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise OSError("cannot connect")
        return "client"

    pool = Pool(
        "p", [Resource.create("api", id="r", factory=factory, cooldown_s=20)], clock=clock, on_event=rec
    )
    with pytest.raises(ResourceUnavailable, match="cannot connect"):
        pool.try_acquire()
    r = pool.resource("r")
    assert r is not None
    assert r.consecutive_failures == 1 and r.factory_error == "OSError: cannot connect"
    assert rec.of("resource.factory_failed")[0].data == {"error": "OSError: cannot connect"}
    assert pool.try_acquire() is None  # the stored error blocks: no client=None lease, no retry storm
    assert len(attempts) == 1
    clock.advance(20)
    lease = pool.try_acquire()
    assert lease is not None and lease.client == "client"
    assert r.factory_error is None and len(attempts) == 2


def test_factory_failure_drops_slot_and_tries_next(clock: VirtualClock) -> None:
    def broken(r: Resource) -> object:
        raise RuntimeError("bad key")

    pool = Pool(
        "p",
        [Resource.create("api", id="bad", factory=broken), Resource.create("api", id="good")],
        clock=clock,
    )
    lease = pool.try_acquire()
    assert lease is not None and lease.resource.id == "good"


def test_repeated_factory_failures_degrade_and_die(clock: VirtualClock) -> None:
    def broken(r: Resource) -> object:
        raise RuntimeError("nope")

    pool = Pool("p", [Resource.create("api", id="r", factory=broken, cooldown_s=1)], clock=clock)
    r = pool.resource("r")
    assert r is not None
    for _ in range(3):
        with pytest.raises(ResourceUnavailable):
            pool.try_acquire()
        clock.advance(1)
    assert r.consecutive_failures == 3
    for _ in range(5):
        with pytest.raises(ResourceUnavailable):
            pool.try_acquire()
        clock.advance(1)
    assert r.state is ResourceState.DEAD
    assert pool.try_acquire() is None


def test_async_factory_is_rejected(clock: VirtualClock) -> None:
    async def factory(r: Resource) -> object:
        return object()

    pool = Pool("p", [Resource.create("api", factory=factory)], clock=clock)
    with pytest.raises(ResourceUnavailable, match="synchronous"):
        pool.try_acquire()


# -- waiting and wake-ups -----------------------------------------------------------------------------


def test_release_wakes_only_matching_waiters(clock: VirtualClock) -> None:
    async def scenario() -> None:
        pool = Pool("p", [Resource.create("a", id="a"), Resource.create("b", id="b")], clock=clock)
        held_a = pool.try_acquire(kind="a")
        held_b = pool.try_acquire(kind="b")
        assert held_a is not None and held_b is not None
        wait_a = asyncio.ensure_future(pool.wait_slot(selector={"kind": "a"}))
        wait_b = asyncio.ensure_future(pool.wait_slot(selector={"kind": "b"}))
        await asyncio.sleep(0)
        assert pool.stats().waiting == 2
        held_a.release_now()
        await asyncio.sleep(0)
        assert wait_a.done() and wait_a.result() is True
        assert not wait_b.done()
        held_b.release_now()
        assert await wait_b is True

    run(clock, scenario)


def test_one_release_wakes_one_waiter_and_cancelled_wake_is_passed_on(clock: VirtualClock) -> None:
    async def scenario() -> None:
        pool = make_pool(clock)
        held = pool.try_acquire()
        assert held is not None
        first = asyncio.ensure_future(pool.wait_slot())
        second = asyncio.ensure_future(pool.wait_slot())
        await asyncio.sleep(0)
        held.release_now()
        assert not second.done()
        first.cancel()  # woken, but it will never take the slot
        await asyncio.sleep(0)
        assert first.cancelled()
        assert await second is True

    run(clock, scenario)


def test_wait_slot_timeout_returns_false(clock: VirtualClock) -> None:
    async def scenario() -> tuple[bool, float]:
        pool = make_pool(clock)
        assert pool.try_acquire() is not None
        ok = await pool.wait_slot(timeout=3)
        return ok, clock.now()

    assert run(clock, scenario) == (False, 3.0)


def test_cooldown_notifier_wakes_waiters_when_all_resources_cool_down(
    clock: VirtualClock, algorithms: Registry
) -> None:
    async def scenario() -> tuple[str, float]:
        pool = Pool(
            "p",
            [Resource.create("api", id="a", cooldown_s=30), Resource.create("api", id="b", cooldown_s=50)],
            clock=clock,
            algorithms=algorithms,
        )
        for rid in ("b", "a"):
            lease = pool.try_acquire(id=rid)
            assert lease is not None
            lease.degrade("overloaded")
            lease.release_now()
        lease = await asyncio.wait_for(pool.acquire(), timeout=100)
        return lease.resource.id, clock.now()

    assert run(clock, scenario) == ("a", 30.0)


def test_cooldown_notifier_rearms_for_an_earlier_ending_cooldown(clock: VirtualClock) -> None:
    async def scenario() -> float:
        pool = Pool(
            "p",
            [Resource.create("api", id="a", cooldown_s=60), Resource.create("api", id="b", cooldown_s=5)],
            clock=clock,
        )
        a = pool.try_acquire(id="a")
        b = pool.try_acquire(id="b")
        assert a is not None and b is not None
        a.degrade("slow")
        a.release_now()
        waiter = asyncio.ensure_future(pool.wait_slot())
        await asyncio.sleep(1)  # the notifier is armed for t=60 now
        b.degrade("slow")  # ends at t=6: must replace the later timer
        b.release_now()
        assert await waiter is True
        return clock.now()

    assert run(clock, scenario) == 6.0


def test_cooldown_notifier_ignores_dead_slots_without_livelock(clock: VirtualClock) -> None:
    async def scenario() -> tuple[bool, float]:
        pool = Pool("p", [Resource.create("api", id="a", degrade_after=1, dead_after=1)], clock=clock)
        lease = pool.try_acquire()
        assert lease is not None
        lease.report(ok=False)
        lease.release_now()
        assert lease.resource.state is ResourceState.DEAD
        ok = await pool.wait_slot(timeout=100)
        return ok, clock.now()

    assert run(clock, scenario) == (False, 100.0)


def test_publish_wakes_waiters_and_republish_resets(clock: VirtualClock) -> None:
    async def scenario() -> None:
        rec = Recorder()
        pool = Pool("p", clock=clock, on_event=rec)
        waiter = asyncio.ensure_future(pool.wait_slot(selector={"kind": "api"}))
        await asyncio.sleep(0)
        r = pool.publish(Resource.create("api", id="r", degrade_after=1), by="task-x")
        assert await waiter is True
        assert rec.of("resource.published")[0].data == {"kind": "api", "capacity": 1, "by": "task-x"}
        lease = pool.try_acquire()
        assert lease is not None
        lease.report(ok=False)
        assert r.state is ResourceState.DEGRADED
        pool.publish(r)
        assert r.state is ResourceState.READY and r.consecutive_failures == 0
        assert len(pool.resources()) == 1
        pool.publish({"id": "r2", "capacity": 2})
        r2 = pool.resource("r2")
        assert r2 is not None and r2.kind == "p" and r2.capacity == 2

    run(clock, scenario)


# -- lease safety -----------------------------------------------------------------------------------


def test_async_with_releases_on_exception_and_cancellation(clock: VirtualClock) -> None:
    async def scenario() -> None:
        pool = make_pool(clock)
        with pytest.raises(KeyError):
            async with pool.try_acquire() as lease:  # type: ignore[union-attr]
                raise KeyError("x")
        assert lease.released and pool.stats().active == 0

        entered = asyncio.Event()
        holder: list[Lease] = []

        async def task() -> None:
            lease = await pool.acquire(algorithm=_first_try())
            async with lease:
                holder.append(lease)
                entered.set()
                await asyncio.sleep(3600)

        job = asyncio.ensure_future(task())
        await entered.wait()
        job.cancel()
        with pytest.raises(asyncio.CancelledError):
            await job
        assert holder[0].released and pool.stats().active == 0

    run(clock, scenario)


class _first_try:
    name = "first_try"

    async def acquire(self, pool: Pool, *, ctx: Any, where: Any, timeout: Any, selector: Any) -> Lease:
        lease = pool.try_acquire(ctx, where=where, **selector)
        assert lease is not None
        return lease

    def fingerprint(self) -> dict[str, Any]:
        return {"name": self.name}


def test_leaked_release_is_counted_and_reported(clock: VirtualClock) -> None:
    rec = Recorder()
    pool = make_pool(clock)
    pool.listeners.append(rec)
    lease = pool.try_acquire(Ctx(task_name="leaky"))
    assert lease is not None
    clock.advance(2)
    assert lease.release_now(leaked=True) is True
    assert lease.release_now(leaked=True) is False
    assert pool.stats().leaked_total == 1
    assert "resource.released" not in rec.kinds()
    leaked = rec.of("resource.leaked")
    assert len(leaked) == 1
    assert leaked[0].data == {"active": 0, "held_ms": 2000.0, "task": "leaky"}


def test_waiter_cancelled_inside_wait_leaves_no_waiter(clock: VirtualClock) -> None:
    async def scenario() -> None:
        pool = make_pool(clock)
        assert pool.try_acquire() is not None
        job = asyncio.ensure_future(pool.wait_slot())
        await asyncio.sleep(0)
        job.cancel()
        with pytest.raises(asyncio.CancelledError):
            await job
        assert pool.stats().waiting == 0 and not pool._waiters

    run(clock, scenario)


# -- events -------------------------------------------------------------------------------------------


def test_events_go_to_listeners_bus_and_subscribers(clock: VirtualClock) -> None:
    async def scenario() -> None:
        bus = Bus(clock)
        all_topics = bus.subscribe()
        pool = Pool("p", [Resource.create("api", id="r")], clock=clock, bus=bus)
        sub = pool.subscribe(events={"resource.released"})
        lease = pool.try_acquire()
        assert lease is not None
        lease.release_now()
        event = await sub.__anext__()
        assert isinstance(event, ResourceEvent)
        assert (event.pool, event.kind, event.resource_id) == ("p", "resource.released", "r")
        assert sub.pending() == 0
        payloads = [all_topics.get_nowait() for _ in range(all_topics.pending())]
        kinds = [p["kind"] for p in payloads if p]
        assert kinds == ["resource.published", "resource.leased", "resource.released"]
        assert all(p and p["topic"] == "resource" and p["pool"] == "p" for p in payloads)
        sub.close()
        all_topics.close()
        assert bus.subscriber_count == 0

    run(clock, scenario)


def test_no_event_is_built_when_nobody_listens(clock: VirtualClock, monkeypatch: pytest.MonkeyPatch) -> None:
    pool = make_pool(clock)

    def fail(*args: Any) -> None:
        raise AssertionError("an event was built with nobody listening")

    monkeypatch.setattr(pool, "_emit", fail)
    lease = pool.try_acquire()
    assert lease is not None
    lease.report(ok=False)
    lease.release_now()
    pool.publish(Resource.create("api", id="x"))
    pool.revoke("x")


def test_listener_failure_does_not_break_release(clock: VirtualClock) -> None:
    pool = make_pool(clock)

    def broken(event: ResourceEvent) -> None:
        raise RuntimeError("listener bug")

    pool.listeners.append(broken)
    lease = pool.try_acquire()
    assert lease is not None
    assert lease.release_now() is True


def test_bus_publish_counts_and_drops_oldest(clock: VirtualClock) -> None:
    bus = Bus(clock, maxsize=2)
    assert bus.publish("x", a=1) == 0
    star = bus.subscribe("*")
    only_x = bus.subscribe("x")
    assert bus.publish("x", n=1) == 2
    assert bus.publish("y", n=2) == 1
    assert bus.publish("x", n=3) == 2
    assert only_x.dropped == 0 and star.dropped == 1
    first = star.get_nowait()
    assert first is not None and first["n"] == 2 and first["topic"] == "y" and first["ts"] == clock.wall()

    async def drain() -> list[int]:
        only_x.close()
        return [item["n"] async for item in only_x]

    assert run(clock, drain) == [1, 3]


# -- stats and views ------------------------------------------------------------------------------------


def test_stats_percentiles_over_last_512_waits(clock: VirtualClock) -> None:
    pool = make_pool(clock, 2, capacity=2)
    for ms in range(1, 101):
        pool.note_wait(float(ms))
    stats = pool.stats()
    assert isinstance(stats, PoolStats)
    assert (stats.waits_total, stats.wait_ms_p50, stats.wait_ms_p95, stats.wait_ms_max) == (100, 50, 95, 100)
    assert stats.wait_ms_avg == pytest.approx(50.5)
    for _ in range(600):
        pool.note_wait(1.0)
    stats = pool.stats()
    assert stats.waits_total == 700 and stats.wait_ms_max == 1.0  # only the last 512 count
    lease = pool.try_acquire()
    assert lease is not None
    stats = pool.stats()
    assert (stats.total, stats.ready, stats.capacity, stats.active) == (2, 2, 4, 1)
    assert stats.utilization == 0.25 and stats.leases_total == 1
    assert pool.stats(id="r1").active == 0
    msgspec.json.encode(stats)  # plain data


def test_snapshot_rows_mask_secrets(clock: VirtualClock) -> None:
    pool = Pool("p", [Resource.create("llm", id="r", options={"api_key": "sk-verysecret-9999"})], clock=clock)
    lease = pool.try_acquire()
    assert lease is not None
    lease.report(ok=False, latency_ms=12.5)
    (row,) = pool.snapshot()
    assert {
        "id",
        "kind",
        "state",
        "active",
        "capacity",
        "consecutive_failures",
        "leases",
        "failed",
        "latency_ms_ema",
        "blocked_until",
    } <= set(row)
    assert row["state"] == "ready" and row["active"] == 1 and row["failed"] == 1
    assert row["latency_ms_ema"] == 12.5 and row["consecutive_failures"] == 1
    assert "sk-verysecret" not in repr(row) and row["options"]["api_key"] == "****9999"
    msgspec.json.encode(row)


def test_slow_wait_and_suspected_deadlock_events(clock: VirtualClock, algorithms: Registry) -> None:
    async def scenario() -> None:
        rec = Recorder()
        pool = Pool("p", [Resource.create("api", id="r")], clock=clock, on_event=rec, algorithms=algorithms)
        ctx = Ctx(task_name="greedy", pipeline_id="pipe-1")
        first = await pool.acquire(ctx)
        ctx.held_leases.append(first)
        with pytest.raises(AcquireTimeout):
            await pool.acquire(ctx, timeout=8)
        (hint,) = rec.of("acquire.suspected_deadlock")
        assert hint.ts == clock.wall() - 3  # fired at t=5 of the 8 s wait
        assert hint.data["held"] == ["r"] and hint.data["task"] == "greedy"
        assert hint.data["pipeline_id"] == "pipe-1" and "hint" in hint.data

        # a wait that ends before deadlock_warn_s cancels the hint; a wait > 1 s is "slow"
        loop = asyncio.get_running_loop()
        loop.call_later(2, first.release_now)
        second = await pool.acquire(ctx)
        await asyncio.sleep(10)
        assert len(rec.of("acquire.suspected_deadlock")) == 1
        (slow,) = rec.of("acquire.slow_wait")
        assert slow.data["waited_ms"] == pytest.approx(2000) and second.waited_ms == pytest.approx(2000)

    run(clock, scenario)


# -- the unmatched-wait hint ----------------------------------------------------------------

UNMATCHED = "acquire.waiting_unmatched"


def count_waits(pool: Pool) -> list[int]:
    """Count the pool's ``wait_slot`` calls (each is one wait: the first, or one after a wake-up)."""
    calls = [0]
    original = pool.wait_slot

    async def counting(**kw: Any) -> bool:
        calls[0] += 1
        return await original(**kw)

    pool.wait_slot = counting  # type: ignore[method-assign]
    return calls


def test_a_wait_nothing_matches_emits_one_unmatched_event_across_wake_ups(
    clock: VirtualClock, algorithms: Registry
) -> None:
    """A selector that matches no resource waits for a publish; the pool says so, once."""

    async def scenario() -> None:
        rec = Recorder()
        pool = Pool(
            "p",
            [Resource.create("api", id="r0", options={"region": "eu"}, cooldown_s=10.0)],
            clock=clock,
            on_event=rec,
            algorithms=algorithms,
        )
        waits = count_waits(pool)
        ctx = Ctx(task_name="fetch", pipeline_id="pipe-1")
        waiter = asyncio.create_task(pool.acquire(ctx, region="mars", tier=1, timeout=100))
        await asyncio.sleep(0)
        assert pool.waiting == 1
        (event,) = rec.of(UNMATCHED)
        assert event.pool == "p" and event.resource_id is None
        assert event.data == {
            "pool": "p",
            "selector": {"region": "'mars'", "tier": "1"},
            "where": False,
            "resources": 1,
            "task": "fetch",
            "pipeline_id": "pipe-1",
            "hint": (
                "none of the 1 resource(s) of pool 'p' matches region='mars', tier=1: this lease waits"
                " until a matching resource is published (check the selector, or publish such a resource)"
            ),
        }
        msgspec.json.encode(event.data)  # plain data: any store can keep it

        # wake-ups that bring no match: the end of a cooldown, a revoke; the waiter waits again
        lease = pool.try_acquire()
        assert lease is not None
        lease.degrade("429")
        lease.release_now()
        await asyncio.sleep(11)
        pool.publish(Resource.create("api", id="other"))
        pool.revoke("other")
        await asyncio.sleep(0)
        assert waits[0] == 3 and not waiter.done()  # the first wait and two after wake-ups
        assert len(rec.of(UNMATCHED)) == 1

        # a publish that matches ends the wait, and says nothing more
        pool.publish(Resource.create("api", id="mars", options={"region": "mars", "tier": 1}))
        got = await waiter
        assert got.resource.id == "mars" and len(rec.of(UNMATCHED)) == 1

    run(clock, scenario)


def test_an_unmatched_wait_in_an_empty_pool_names_the_where_filter_and_masks_secrets(
    clock: VirtualClock, algorithms: Registry
) -> None:
    async def scenario() -> None:
        rec = Recorder()
        pool = Pool("dyn", clock=clock, on_event=rec, algorithms=algorithms)
        with pytest.raises(AcquireTimeout):
            await pool.acquire(None, where=lambda r: True, api_key="sk-abcdef123456", timeout=3)
        (event,) = rec.of(UNMATCHED)
        assert event.data["where"] is True and event.data["resources"] == 0
        assert event.data["selector"] == {"api_key": "****456'"}
        assert event.data["task"] is None and event.data["pipeline_id"] is None
        assert event.data["hint"].startswith("pool 'dyn' has no resource yet: this lease waits")
        assert "abcdef" not in repr(event)

    run(clock, scenario)


def test_a_wait_that_starts_matched_warns_once_when_the_match_goes_away(
    clock: VirtualClock, algorithms: Registry
) -> None:
    """The check runs before every wait until it fires: a resource re-published with other
    options no longer matches, and the next wake-up finds out."""

    async def scenario() -> None:
        rec = Recorder()
        pool = Pool(
            "p",
            [Resource.create("api", id="r0", options={"region": "eu"})],
            clock=clock,
            on_event=rec,
            algorithms=algorithms,
        )
        held = pool.try_acquire(region="eu")
        assert held is not None
        waiter = asyncio.create_task(pool.acquire(Ctx(), region="eu", timeout=100))
        await asyncio.sleep(0)
        assert pool.waiting == 1 and not rec.of(UNMATCHED)  # busy, but it matches

        pool.publish(Resource.create("api", id="r0", options={"region": "us"}))
        held.release_now()  # wakes the waiter (the old r0 wanted it): now nothing matches
        await asyncio.sleep(0)
        (event,) = rec.of(UNMATCHED)
        assert event.data["selector"] == {"region": "'eu'"} and event.data["resources"] == 1
        await asyncio.sleep(50)
        assert len(rec.of(UNMATCHED)) == 1 and not waiter.done()
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter

    run(clock, scenario)


def test_no_unmatched_event_for_a_busy_or_cooling_match_or_an_immediate_lease(
    clock: VirtualClock, algorithms: Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        rec = Recorder()
        pool = Pool(
            "p",
            [Resource.create("api", id=f"r{i}", tags={"zone": "a"}, cooldown_s=5.0) for i in range(2)],
            clock=clock,
            on_event=rec,
            algorithms=algorithms,
        )
        checked: list[Any] = []
        original = Pool.warn_unmatched

        def spy(self: Pool, *args: Any, **kw: Any) -> bool:
            checked.append(args)
            return original(self, *args, **kw)

        monkeypatch.setattr(Pool, "warn_unmatched", spy)

        # leased at once (also through the coroutine path): no check at all
        first = await pool.acquire(Ctx(), zone="a")
        second = await pool.acquire(Ctx(), algorithm="least_busy", zone="a")
        assert checked == []

        # busy: the wait is checked, finds a match, and ends with the release
        loop = asyncio.get_running_loop()
        loop.call_later(1, first.release_now)
        third = await pool.acquire(Ctx(), zone="a", timeout=10)
        assert len(checked) == 1

        # cooling down: both degraded for 5 s, the wait ends when the cooldown does
        second.degrade("slow")
        third.degrade("slow")
        second.release_now()
        third.release_now()
        fourth = await pool.acquire(Ctx(), zone="a", timeout=10)
        assert fourth.resource.state is ResourceState.READY
        assert not rec.of(UNMATCHED)

        # ``immediate`` never waits: ResourceUnavailable, no event
        with pytest.raises(ResourceUnavailable):
            await pool.acquire(Ctx(), algorithm="immediate", zone="b")
        assert not rec.of(UNMATCHED)

    run(clock, scenario)


def test_warn_unmatched_builds_nothing_when_nobody_listens(clock: VirtualClock) -> None:
    pool = Pool("p", clock=clock)
    assert pool.warn_unmatched(None, None, {"region": "mars"}) is False
    rec = Recorder()
    pool.listeners.append(rec)
    assert pool.warn_unmatched(None, None, {"region": "mars"}) is True
    assert rec.kinds() == [UNMATCHED]


def test_pool_validates_inputs() -> None:
    with pytest.raises(ConfigError):
        Pool("")
    with pytest.raises(ConfigError, match="bad resource spec"):
        Pool("p", [{"kind": "x", "nonsense": 1}])
    with pytest.raises(ConfigError, match="expected a Resource"):
        Pool("p", [object()])  # type: ignore[list-item]


def test_a_broken_where_filter_cannot_break_a_release(clock: VirtualClock) -> None:
    async def scenario() -> None:
        pool = make_pool(clock)
        held = pool.try_acquire()
        assert held is not None

        def where(r: Resource) -> bool:
            raise RuntimeError("filter bug")

        waiter = asyncio.ensure_future(pool.wait_slot(where=where))
        await asyncio.sleep(0)
        assert held.release_now() is True  # the filter raised inside the wake-up: swallowed
        assert await waiter is True  # woken so that it re-checks in its own task...
        with pytest.raises(RuntimeError, match="filter bug"):
            pool.try_acquire(where=where)  # ...where the error belongs
        assert pool.stats().active == 0

    run(clock, scenario)


class _SteppingClock(Clock):
    """``now()`` returns the queued readings one by one, then the last one for ever."""

    def __init__(self, *readings: float) -> None:
        self.readings = list(readings)

    def now(self) -> float:
        return self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]


def test_a_cooldown_that_ends_between_the_check_and_the_wait_wakes_the_waiter() -> None:
    """A waiter that found the resource blocked and registered after its cooldown ended is woken
    (no timer is left that would see the end). The same gap opens when a timer fires a little
    early, as uvloop's whole-millisecond timers do: runs then hung with every worker waiting."""
    clock = _SteppingClock(0.0)
    pool = Pool("p", [Resource.create("api", id="r", cooldown_s=10)], clock=clock)

    async def scenario() -> bool:
        lease = pool.try_acquire(Ctx())
        assert lease is not None
        lease.degrade("slow down")  # blocked until 10
        lease.release_now()
        # the check sees 9.999 (still blocked), the registration 10.001 (ended)
        clock.readings = [9.999, 10.001]
        return await asyncio.wait_for(pool.wait_slot(), 5.0)

    assert asyncio.run(scenario()) is True
    assert pool.try_acquire(Ctx()) is not None  # the cooldown is over, the slot is free


# -- wake-ups that must not be lost -----------------------------------------------------------------


def test_a_wake_up_used_for_another_slot_is_passed_to_a_waiter_that_wants_the_first() -> None:
    """A waiter woken for r1 that leases r2 (round-robin) must not leave a waiter that only
    wants r1 asleep beside a free r1: the slot is handed on."""

    async def scenario() -> str:
        pool = Pool("p", [Resource.create("api", id="r1"), Resource.create("api", id="r2")])
        l2 = pool.try_acquire(id="r2")
        l1 = pool.try_acquire(id="r1")  # the next pick starts at r2
        assert l1 is not None and l2 is not None
        anyone = asyncio.ensure_future(pool.acquire())
        await asyncio.sleep(0)
        only_r1 = asyncio.ensure_future(pool.acquire(id="r1"))
        await asyncio.sleep(0)
        assert pool.waiting == 2
        l1.release_now()  # wakes `anyone` for r1
        l2.release_now()  # `anyone` is woken already, `only_r1` does not want r2: nobody
        assert (await anyone).resource.id == "r2"
        lease = await asyncio.wait_for(only_r1, 5.0)
        return lease.resource.id

    assert asyncio.run(scenario()) == "r1"


def test_a_cooldown_seen_ended_by_another_pick_wakes_the_waiters() -> None:
    """The notifier's timer waits for r1's cooldown; a pick for r2 sees it ended first (the loop
    was busy) and the registration that follows finds no cooldown to arm a timer for. The
    waiter for r1 must still be woken."""
    clock = _SteppingClock(0.0)
    pool = Pool(
        "p",
        [Resource.create("api", id="r1", cooldown_s=10), Resource.create("api", id="r2", cooldown_s=10)],
        clock=clock,
    )

    async def scenario() -> str:
        l1 = pool.try_acquire(id="r1")
        l2 = pool.try_acquire(id="r2")  # r2 stays leased
        assert l1 is not None and l2 is not None
        l1.degrade("429")  # r1 blocked until 10
        l1.release_now()
        for_r1 = asyncio.ensure_future(pool.acquire(id="r1"))
        await asyncio.sleep(0)
        assert pool.waiting == 1
        clock.readings = [10.001]  # the cooldown is over before the timer fires
        for_r2 = asyncio.ensure_future(pool.wait_slot(selector={"id": "r2"}))
        await asyncio.sleep(0)
        lease = await asyncio.wait_for(for_r1, 5.0)
        for_r2.cancel()
        return lease.resource.id

    assert asyncio.run(scenario()) == "r1"


def test_a_woken_waiter_whose_filter_raises_hands_the_slot_on(clock: VirtualClock) -> None:
    """The woken waiter's own ``where`` raises in its try: the error is its own, and the slot it
    was woken for goes to the next waiter instead of staying free with everybody asleep."""

    async def scenario() -> None:
        pool = make_pool(clock)
        held = pool.try_acquire()
        assert held is not None

        def broken(r: Resource) -> bool:
            raise RuntimeError("filter bug")

        bad = asyncio.ensure_future(pool.acquire(where=broken))
        await asyncio.sleep(0)
        good = asyncio.ensure_future(pool.acquire())
        await asyncio.sleep(0)
        held.release_now()  # wakes `bad` first (the broken filter counts as wanting the slot)
        with pytest.raises(RuntimeError, match="filter bug"):
            await bad
        lease = await asyncio.wait_for(good, 5.0)
        assert lease.resource.id == "r0"

    run(clock, scenario)


# -- waits that could never end ----------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["wait", "backoff"])
def test_a_wait_on_resources_that_are_all_dead_raises_instead_of_lasting_for_ever(
    clock: VirtualClock, algorithms: Registry, algorithm: str
) -> None:
    """Only an ok report on a held lease or re-publishing revives a dead resource. Once every
    matching resource is dead with no lease held (or revoked), a waiting acquisition raises
    ResourceUnavailable naming them, both for a waiter that was already waiting and a new one."""

    async def scenario() -> None:
        pool = make_pool(clock, 2, registry=algorithms, degrade_after=1, dead_after=1)
        a, b = pool.try_acquire(), pool.try_acquire()
        assert a is not None and b is not None
        early = asyncio.ensure_future(pool.acquire(algorithm=algorithm))
        await asyncio.sleep(0.5)
        pool.revoke("r0")
        a.release_now()
        await asyncio.sleep(0.5)
        assert not early.done()  # r1 is dead-to-be but still held: its holder may report ok
        b.report(ok=False)
        assert pool.resource("r1").state is ResourceState.DEAD  # type: ignore[union-attr]
        await asyncio.sleep(0.5)
        assert not early.done()  # still held: an ok report would revive it
        b.release_now()
        # backoff notices at its next poll, at most its cap (10 s, virtual) later: the jitter
        # decides when, so the hang guard is well past the cap
        with pytest.raises(ResourceUnavailable, match=r"r0 revoked; r1 dead after 1 consecutive"):
            await asyncio.wait_for(early, 30.0)
        with pytest.raises(ResourceUnavailable, match="can be leased again"):
            await asyncio.wait_for(pool.acquire(algorithm=algorithm), 30.0)
        assert pool.waiting == 0

    run(clock, scenario)


def test_a_dead_resource_whose_held_lease_reports_ok_serves_the_waiter(clock: VirtualClock) -> None:
    async def scenario() -> str:
        pool = make_pool(clock, degrade_after=1, dead_after=1)
        held = pool.try_acquire()
        assert held is not None
        held.report(ok=False)
        assert held.resource.state is ResourceState.DEAD
        waiter = asyncio.ensure_future(pool.acquire())
        await asyncio.sleep(1)
        held.report(ok=True)  # revived through the lease it still holds
        held.release_now()
        return (await asyncio.wait_for(waiter, 5.0)).resource.id

    assert run(clock, scenario) == "r0"


def test_a_pool_with_nothing_matching_yet_waits_for_a_publish(clock: VirtualClock) -> None:
    """Not beyond recovery: no resource matches, and a publish may bring one."""

    async def scenario() -> str:
        pool = make_pool(clock, degrade_after=1, dead_after=1)
        waiter = asyncio.ensure_future(pool.acquire(kind="gpu"))
        await asyncio.sleep(10)
        assert not waiter.done()
        pool.publish(Resource.create("gpu", id="g"))
        return (await asyncio.wait_for(waiter, 5.0)).resource.id

    assert run(clock, scenario) == "g"
