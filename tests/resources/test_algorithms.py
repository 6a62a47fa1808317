"""The seven built-in acquisition algorithms, spec resolution, validation and fingerprints."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import msgspec
import pytest

from pyattacker import AcquireTimeout, ConfigError, Lease, Pool, Resource, ResourceUnavailable, VirtualClock
from pyattacker.plugins.manager import discover
from pyattacker.plugins.registry import Registry
from pyattacker.resources import algorithm as algorithm_module
from pyattacker.resources.algorithm import (
    Algorithm,
    AlgorithmResolver,
    algorithm_fingerprint,
    backoff_delay,
    resolve_algorithm,
    validate_algorithm_spec,
)
from pyattacker_plugins.algo_backoff import Backoff
from pyattacker_plugins.algo_failover import Failover
from pyattacker_plugins.algo_least_busy import LeastBusy
from pyattacker_plugins.algo_quota_aware import QuotaAware
from pyattacker_plugins.algo_sticky import Sticky
from pyattacker_plugins.algo_wait import Immediate, Wait
from tests.support.pools import Ctx, algorithms_fixture, clock_fixture, run

__all__ = ["algorithms_fixture", "clock_fixture"]  # fixtures used by name below

ALL_NAMES = ["backoff", "failover", "immediate", "least_busy", "quota_aware", "sticky", "wait"]


def pool_of(
    clock: VirtualClock, registry: Registry, n: int = 1, name: str = "p", algorithm: Any = None, **kw: Any
) -> Pool:
    resources = [Resource.create("api", id=f"{name}{i}", **kw) for i in range(n)]
    return Pool(name, resources, clock=clock, algorithms=registry, algorithm=algorithm)


def release_at(delay: float, lease: Lease) -> None:
    asyncio.get_running_loop().call_later(delay, lease.release_now)


# -- registration and resolution -------------------------------------------------------------------


def test_entry_points_register_every_builtin_algorithm() -> None:
    plugins = discover(block=set(), only=set())
    assert set(ALL_NAMES) <= set(plugins.algorithms.names())
    for name in ALL_NAMES:
        provider = plugins.algorithms.provider(name)
        assert provider is not None and provider.builtin


def test_resolve_none_string_mapping_and_instance(algorithms: Registry) -> None:
    assert isinstance(resolve_algorithm(None, algorithms), Wait)
    assert isinstance(resolve_algorithm("immediate", algorithms), Immediate)
    backoff = resolve_algorithm({"name": "backoff", "cap": 60, "jitter": "none"}, algorithms)
    assert isinstance(backoff, Backoff) and backoff.cap == 60.0 and backoff.jitter == "none"
    mine = Sticky()
    assert resolve_algorithm(mine, algorithms) is mine
    assert isinstance(resolve_algorithm(LeastBusy, algorithms), LeastBusy)  # a class: built with no args
    assert isinstance(mine, Algorithm)


def test_unknown_name_suggests_the_closest(algorithms: Registry) -> None:
    with pytest.raises(ConfigError, match=r"unknown algorithm 'backof' \(did you mean 'backoff'\?\)"):
        resolve_algorithm("backof", algorithms)
    with pytest.raises(ConfigError, match="known: backoff, failover"):
        resolve_algorithm("nosuchalgorithm", algorithms)


def test_unknown_parameter_suggests_the_closest(algorithms: Registry) -> None:
    with pytest.raises(ConfigError, match=r"unknown parameter 'bse' \(did you mean 'base'\?\)"):
        resolve_algorithm({"name": "backoff", "bse": 1}, algorithms)
    with pytest.raises(ConfigError, match=r"'immediate'.*takes no parameters"):
        resolve_algorithm({"name": "immediate", "timeout": 1}, algorithms)


def test_invalid_parameter_values_name_the_parameter(algorithms: Registry) -> None:
    with pytest.raises(ConfigError, match="'jitter' must be one of full, equal, none"):
        resolve_algorithm({"name": "backoff", "jitter": "ful"}, algorithms)
    with pytest.raises(ConfigError, match="'base' must be a finite number"):
        resolve_algorithm({"name": "backoff", "base": "fast"}, algorithms)
    with pytest.raises(ConfigError, match="'reserve' must be between 0 and 1"):
        resolve_algorithm({"name": "quota_aware", "reserve": 2}, algorithms)
    with pytest.raises(ConfigError, match="'pools' must be a list"):
        resolve_algorithm({"name": "failover", "pools": [1]}, algorithms)
    with pytest.raises(ConfigError, match="fallback must be"):
        resolve_algorithm({"name": "sticky", "fallback": 3}, algorithms)
    with pytest.raises(ConfigError, match="needs a 'name'"):
        resolve_algorithm({"cap": 1}, algorithms)
    with pytest.raises(ConfigError, match="got int"):
        resolve_algorithm(42, algorithms)


def test_validate_spec_reports_field_paths_without_building(algorithms: Registry) -> None:
    assert validate_algorithm_spec(None, algorithms, "pools.a.algorithm") == []
    assert validate_algorithm_spec("wait", algorithms, "x") == []
    assert validate_algorithm_spec({"name": "backoff", "cap": 5}, algorithms, "x") == []
    (err,) = validate_algorithm_spec("nosuchalgorithm", algorithms, "pools.a.algorithm")
    assert err.startswith("pools.a.algorithm: unknown algorithm 'nosuchalgorithm'")
    (err,) = validate_algorithm_spec({"name": "backoff", "bse": 1}, algorithms, "tasks[0].algorithm")
    assert err.startswith("tasks[0].algorithm.bse: ") and "did you mean 'base'" in err
    (err,) = validate_algorithm_spec({"name": "backoff", "base": -1}, algorithms, "pools.a.algorithm")
    assert err.startswith("pools.a.algorithm.base: algorithm 'backoff': parameter 'base' must be >= 0")
    (err,) = validate_algorithm_spec(
        {"name": "sticky", "fallback": {"name": "wait", "timeout": -1}}, algorithms, "t.algorithm"
    )
    assert err.startswith("t.algorithm.fallback.timeout: algorithm 'wait': parameter 'timeout'")
    # a spec the file does not spell out (declared by a use: target) is reported where it is used
    (err,) = validate_algorithm_spec({"name": "backoff", "bse": 1}, algorithms, "u", param_fields=False)
    assert err.startswith("u: algorithm 'backoff': unknown parameter 'bse'")
    (err,) = validate_algorithm_spec(
        {"name": "sticky", "fallback": {"name": "bakoff"}}, algorithms, "t.algorithm"
    )
    assert err.startswith("t.algorithm.fallback: unknown algorithm 'bakoff'")
    (err,) = validate_algorithm_spec([1], algorithms, "t")
    assert err.startswith("t: an algorithm is a name")


def test_equivalent_specs_share_one_strict_json_fingerprint(algorithms: Registry) -> None:
    groups = [
        ["wait", {"name": "wait"}, Wait(), Wait(timeout=None)],
        ["backoff", {"name": "backoff", "base": 0.2, "cap": 10}, Backoff(), Backoff(base=0.2, factor=2)],
        ["sticky", {"name": "sticky", "fallback": "wait"}, Sticky(), Sticky(fallback=Wait())],
        ["least_busy", LeastBusy(fallback={"name": "wait"}), LeastBusy(fallback=None)],
        ["failover", Failover(), {"name": "failover", "pools": []}],
        ["quota_aware", QuotaAware(metric="tokens", reserve=0.05), {"name": "quota_aware"}],
        ["immediate", Immediate()],
    ]
    for group in groups:
        prints = [resolve_algorithm(spec, algorithms).fingerprint() for spec in group]
        assert all(p == prints[0] for p in prints), group
        assert msgspec.json.decode(msgspec.json.encode(prints[0])) == prints[0]  # strict JSON: no tuples
    assert Sticky().fingerprint() == {"name": "sticky", "fallback": {"name": "wait", "timeout": None}}
    assert Failover(pools=("a", "b")).fingerprint()["pools"] == ["a", "b"]
    assert Backoff(cap=5).fingerprint() != Backoff().fingerprint()
    assert Sticky(fallback="backoff").fingerprint()["fallback"] == Backoff().fingerprint()
    assert algorithm_fingerprint(Sticky()) == Sticky().fingerprint()
    with pytest.raises(ConfigError, match="has no fingerprint"):
        algorithm_fingerprint(type("Custom", (), {"name": "custom", "acquire": None})())


# -- the shared delay function ---------------------------------------------------------------------


def test_backoff_delay_formula_and_jitter() -> None:
    assert [backoff_delay(n, 0.5, 2.0, 3.0, "none") for n in (1, 2, 3, 4)] == [0.5, 1.0, 2.0, 3.0]
    assert backoff_delay(10_000, 1.0, 2.0, 7.0, "none") == 7.0  # no overflow past the cap

    class Fixed(random.Random):
        def random(self) -> float:
            return 0.5

    assert backoff_delay(2, 1.0, 2.0, 10.0, "full", Fixed()) == 1.0
    assert backoff_delay(2, 1.0, 2.0, 10.0, "equal", Fixed()) == 1.5
    draws = [backoff_delay(3, 1.0, 2.0, 10.0, "full", random.Random(7)) for _ in range(3)]
    assert len(set(draws)) == 1 and 0 <= draws[0] <= 4.0
    with pytest.raises(ConfigError):
        backoff_delay(1, 1.0, 2.0, 1.0, "sometimes")


# -- immediate and wait ----------------------------------------------------------------------------


def test_immediate_raises_when_nothing_is_free(clock: VirtualClock, algorithms: Registry) -> None:
    async def scenario() -> None:
        pool = pool_of(clock, algorithms, options={"region": "eu"})
        lease = await pool.acquire(algorithm="immediate")
        assert lease.resource.id == "p0"
        with pytest.raises(ResourceUnavailable, match="pool 'p': no resource free"):
            await pool.acquire(algorithm="immediate")
        with pytest.raises(ResourceUnavailable, match="matching"):
            await pool.acquire(algorithm="immediate", kind="other")
        assert clock.now() == 0

    run(clock, scenario)


def test_wait_blocks_until_release_and_records_the_wait(clock: VirtualClock, algorithms: Registry) -> None:
    async def scenario() -> None:
        pool = pool_of(clock, algorithms)
        held = await pool.acquire()
        release_at(4, held)
        lease = await pool.acquire()
        assert clock.now() == 4 and lease.waited_ms == pytest.approx(4000)
        assert pool.stats().waits_total == 2 and pool.stats().wait_ms_max == pytest.approx(4000)

    run(clock, scenario)


def test_wait_timeout_call_argument_wins(clock: VirtualClock, algorithms: Registry) -> None:
    async def scenario() -> None:
        pool = pool_of(clock, algorithms, algorithm={"name": "wait", "timeout": 10})
        await pool.acquire()
        with pytest.raises(AcquireTimeout):
            await pool.acquire()
        assert clock.now() == 10
        with pytest.raises(AcquireTimeout):
            await pool.acquire(timeout=2)
        assert clock.now() == 12
        assert pool.stats().waiting == 0

    run(clock, scenario)


# -- backoff ---------------------------------------------------------------------------------------


def test_backoff_sleeps_growing_delays_and_emits_events(clock: VirtualClock, algorithms: Registry) -> None:
    async def scenario() -> None:
        pool = pool_of(clock, algorithms)
        held = await pool.acquire()
        release_at(1.0, held)
        ctx = Ctx()
        algo = {"name": "backoff", "base": 0.2, "factor": 2, "cap": 10, "jitter": "none"}
        lease = await pool.acquire(ctx, algorithm=algo)
        # tries at 0, 0.2, 0.6, 1.4 -> the slot freed at 1.0 is taken at 1.4
        assert clock.now() == pytest.approx(1.4)
        assert lease.waited_ms == pytest.approx(1400)
        assert [d["delay_s"] for _, d in ctx.events] == pytest.approx([0.2, 0.4, 0.8])
        kind, data = ctx.events[0]
        assert kind == "acquire.backoff" and data["pool"] == "p" and data["attempt"] == 1
        assert data["selector"] == {}

    run(clock, scenario)


def test_backoff_times_out_before_max_wait_would_be_exceeded(
    clock: VirtualClock, algorithms: Registry
) -> None:
    async def scenario() -> None:
        pool = pool_of(clock, algorithms)
        await pool.acquire()
        algo = Backoff(base=1, factor=2, cap=100, jitter="none", max_wait=5)
        with pytest.raises(AcquireTimeout, match=r"would pass the 5\.0s limit"):
            await pool.acquire(algorithm=algo)
        assert clock.now() == 3  # slept 1 + 2; the next 4 s would end at 7 > 5
        start = clock.now()
        with pytest.raises(AcquireTimeout):
            await pool.acquire(algorithm=algo, timeout=2)  # the tighter limit wins
        assert clock.now() - start == 1

    run(clock, scenario)


def test_backoff_polls_warn_once_when_nothing_in_the_pool_matches(
    clock: VirtualClock, algorithms: Registry
) -> None:
    """``backoff`` never queues on the pool, but it waits all the same: one
    ``acquire.waiting_unmatched`` for the whole request, not one per poll."""

    async def scenario() -> None:
        events: list[Any] = []
        pool = pool_of(clock, algorithms)
        pool.listeners.append(events.append)
        ctx = Ctx(task_name="poll")
        algo = Backoff(base=1, factor=1, cap=1, jitter="none", max_wait=5)
        with pytest.raises(AcquireTimeout):
            await pool.acquire(ctx, algorithm=algo, kind="gpu")
        assert len(ctx.events) == 5  # five sleeps, six tries
        (event,) = [e for e in events if e.kind == "acquire.waiting_unmatched"]
        assert event.data["selector"] == {"kind": "'gpu'"} and event.data["task"] == "poll"

        held = await pool.acquire()
        release_at(2, held)
        await pool.acquire(ctx, algorithm=algo)  # busy, but it matches: nothing said
        assert len([e for e in events if e.kind == "acquire.waiting_unmatched"]) == 1

    run(clock, scenario)


def test_failover_with_no_pool_that_matches_warns_on_the_pool_it_waits_on(
    clock: VirtualClock, algorithms: Registry
) -> None:
    async def scenario() -> None:
        primary, secondary = pool_of(clock, algorithms, name="a"), pool_of(clock, algorithms, name="b")
        events: list[Any] = []
        primary.listeners.append(events.append)
        secondary.listeners.append(events.append)
        ctx = Ctx(pools={"a": primary, "b": secondary})
        with pytest.raises(AcquireTimeout):
            await secondary.acquire(ctx, algorithm=Failover(pools=["a", "b"]), timeout=2, id="c0")
        assert [(e.pool, e.kind) for e in events] == [("a", "acquire.waiting_unmatched")]

    run(clock, scenario)


def test_backoff_jitter_uses_the_context_rng(clock: VirtualClock, algorithms: Registry) -> None:
    def delays(seed: int) -> list[float]:
        async def scenario() -> list[float]:
            pool = pool_of(clock, algorithms)
            await pool.acquire()
            ctx = Ctx(rng=random.Random(seed))
            with pytest.raises(AcquireTimeout):
                await pool.acquire(ctx, algorithm=Backoff(base=1, max_wait=20))
            return [d["delay_s"] for _, d in ctx.events]

        return run(clock, scenario)

    assert delays(1) == delays(1) != delays(2)


# -- least_busy ------------------------------------------------------------------------------------


def test_least_busy_picks_least_loaded_then_falls_back(clock: VirtualClock, algorithms: Registry) -> None:
    async def scenario() -> None:
        pool = pool_of(clock, algorithms, 2, capacity=2)
        a = await pool.acquire(algorithm="least_busy")
        b = await pool.acquire(algorithm="least_busy")
        assert {a.resource.id, b.resource.id} == {"p0", "p1"}
        await pool.acquire(algorithm="least_busy")
        await pool.acquire(algorithm="least_busy")
        release_at(3, a)
        lease = await pool.acquire(algorithm="least_busy")  # the fallback (wait) took over
        assert clock.now() == 3 and lease.resource is a.resource
        with pytest.raises(ResourceUnavailable):
            await pool.acquire(algorithm={"name": "least_busy", "fallback": "immediate"})

    run(clock, scenario)


# -- failover --------------------------------------------------------------------------------------


def test_failover_uses_the_first_pool_with_a_free_slot(clock: VirtualClock, algorithms: Registry) -> None:
    async def scenario() -> None:
        primary, secondary = pool_of(clock, algorithms, name="a"), pool_of(clock, algorithms, name="b")
        ctx = Ctx(pools={"a": primary, "b": secondary})
        algo = Failover(pools=["a", "b"])
        first = await primary.acquire(ctx, algorithm=algo)
        second = await primary.acquire(ctx, algorithm=algo)
        assert (first.pool, second.pool) == ("a", "b")
        second.release_now()
        current = await secondary.acquire(ctx, algorithm=Failover())  # empty list: the current pool
        assert current.pool == "b"

    run(clock, scenario)


def test_failover_waits_only_on_the_first_listed_pool(clock: VirtualClock, algorithms: Registry) -> None:
    async def scenario() -> None:
        primary, secondary = pool_of(clock, algorithms, name="a"), pool_of(clock, algorithms, name="b")
        ctx = Ctx(pools={"a": primary, "b": secondary})
        held_a = await primary.acquire()
        held_b = await secondary.acquire()
        release_at(1, held_b)  # a release in the second pool must not satisfy the wait
        release_at(5, held_a)
        lease = await secondary.acquire(ctx, algorithm=Failover(pools=["a", "b"]))
        assert lease.pool == "a" and clock.now() == 5
        assert secondary.stats().active == 0

    run(clock, scenario)


def test_failover_waits_on_the_first_pool_that_can_serve_the_request(
    clock: VirtualClock, algorithms: Registry
) -> None:
    """When the first listed pool has nothing that matches, or only resources beyond recovery,
    the wait goes to the next pool that can serve: waiting on the first would last for ever."""

    async def scenario() -> None:
        primary = pool_of(clock, algorithms, name="a", degrade_after=1, dead_after=1)
        secondary = pool_of(clock, algorithms, name="b")
        ctx = Ctx(pools={"a": primary, "b": secondary})
        algo = Failover(pools=["a", "b"])
        held_b = await secondary.acquire()
        release_at(3, held_b)
        only_b = await primary.acquire(ctx, algorithm=algo, timeout=50, id="b0")  # no match in a
        assert only_b.pool == "b" and clock.now() == 3
        only_b.release_now()
        dying = await primary.acquire()
        dying.report(ok=False)  # a0 is dead, and nothing held can revive it once returned
        dying.release_now()
        held_b = await secondary.acquire()
        release_at(2, held_b)
        moved = await primary.acquire(ctx, algorithm=algo, timeout=50)
        assert moved.pool == "b" and clock.now() == 5

    run(clock, scenario)


def test_failover_names_every_pool_reason(clock: VirtualClock, algorithms: Registry) -> None:
    async def scenario() -> None:
        primary, secondary = pool_of(clock, algorithms, name="a"), pool_of(clock, algorithms, name="b")
        ctx = Ctx(pools={"a": primary, "b": secondary})
        await primary.acquire()
        await secondary.acquire()
        algo = Failover(pools=["a", "ghost", "b"])
        with pytest.raises(AcquireTimeout) as info:
            await primary.acquire(ctx, algorithm=algo, timeout=2)
        message = str(info.value)
        assert "a: no resource free; then" in message and "within 2" in message
        assert "ghost: unknown pool" in message and "b: no resource free" in message
        with pytest.raises(ResourceUnavailable, match="ghost: unknown pool"):
            await primary.acquire(ctx, algorithm=Failover(pools=["ghost"]))
        immediate = Failover(pools=["a", "b"], fallback="immediate")
        with pytest.raises(ResourceUnavailable, match="failover found no resource"):
            await primary.acquire(ctx, algorithm=immediate)
        # an empty list means the current pool
        with pytest.raises(AcquireTimeout, match="b: no resource free"):
            await secondary.acquire(ctx, algorithm=Failover(), timeout=1)

    run(clock, scenario)


# -- sticky ----------------------------------------------------------------------------------------


def test_sticky_keeps_affinity_for_one_attempt(clock: VirtualClock, algorithms: Registry) -> None:
    async def scenario() -> None:
        pool = pool_of(clock, algorithms, 3)
        attempt = Ctx()
        first = await pool.acquire(attempt, algorithm="sticky")
        first.release_now()
        for _ in range(3):  # round-robin would move on; affinity keeps the same resource
            again = await pool.acquire(attempt, algorithm="sticky")
            assert again.resource is first.resource
            again.release_now()
        assert attempt.meta["sticky"] == {"p": first.resource.id}
        fresh = await pool.acquire(Ctx(), algorithm="sticky")  # a retry starts with no affinity
        assert fresh.resource is not first.resource

    run(clock, scenario)


def test_sticky_waits_for_its_resource_and_drops_a_dead_one(
    clock: VirtualClock, algorithms: Registry
) -> None:
    async def scenario() -> None:
        pool = pool_of(clock, algorithms, 2, degrade_after=1, dead_after=1)
        attempt = Ctx()
        mine = await pool.acquire(attempt, algorithm="sticky")
        release_at(2, mine)
        again = await pool.acquire(attempt, algorithm="sticky")  # the other one is free, but not preferred
        assert again.resource is mine.resource and clock.now() == 2
        again.report(ok=False)
        again.release_now()
        assert mine.resource.state.value == "dead"
        moved = await pool.acquire(attempt, algorithm="sticky")
        assert moved.resource is not mine.resource
        assert attempt.meta["sticky"]["p"] == moved.resource.id
        moved.release_now()
        assert (await pool.acquire(None, algorithm="sticky")) is not None  # no ctx: no affinity

    run(clock, scenario)


@pytest.mark.parametrize("ends", ["dead", "revoked"])
def test_sticky_drops_its_resource_when_it_dies_during_the_wait(
    clock: VirtualClock, algorithms: Registry, ends: str
) -> None:
    """The preferred resource was usable when the wait began and dies (or is revoked) while the
    attempt waits for it: the attempt moves to another resource instead of waiting for ever."""

    async def scenario() -> None:
        pool = pool_of(clock, algorithms, 2, degrade_after=1, dead_after=1)
        attempt = Ctx()
        mine = await pool.acquire(attempt, algorithm="sticky")
        other = pool.try_acquire()  # the other resource is busy when the wait starts
        assert other is not None and other.resource is not mine.resource
        waiting = asyncio.ensure_future(pool.acquire(attempt, algorithm="sticky", timeout=50))
        await asyncio.sleep(1)
        assert not waiting.done()
        if ends == "dead":
            mine.report(ok=False)
            mine.release_now()  # its last lease is back: only re-publishing could revive it now
        else:
            pool.revoke(mine.resource.id)
            mine.release_now()
        other_id = other.resource.id
        release_at(2, other)
        moved = await waiting
        assert moved.resource.id == other_id and clock.now() == 3
        assert attempt.meta["sticky"]["p"] == other_id

    run(clock, scenario)


# -- quota_aware -----------------------------------------------------------------------------------


def _quota_pool(clock: VirtualClock, registry: Registry, **quotas: Any) -> Pool:
    resources = [
        Resource.create("llm", id=rid, capacity=5, options={} if q is None else {"quota": {"tokens": q}})
        for rid, q in quotas.items()
    ]
    return Pool("q", resources, clock=clock, algorithms=registry, algorithm="quota_aware")


def test_quota_aware_prefers_the_largest_remaining_share(clock: VirtualClock, algorithms: Registry) -> None:
    async def scenario() -> None:
        pool = _quota_pool(clock, algorithms, small=100, big=1000, unknown=None)
        lease = await pool.acquire()
        assert lease.resource.id == "big"
        lease.report(usage={"tokens": 950})  # big: 5% left (inside the reserve); small: 100%
        lease.release_now()
        lease = await pool.acquire()
        assert lease.resource.id == "small"
        lease.report(usage={"tokens": 99})  # small: 1% left -> both inside the reserve
        lease.release_now()
        lease = await pool.acquire()
        assert lease.resource.id == "big"  # inside the reserve, more remaining wins
        lease.report(usage={"tokens": 5000})  # every quota is spent now
        lease.release_now()
        algo = QuotaAware()
        unknown, big = pool.resource("unknown"), pool.resource("big")
        assert unknown is not None and big is not None
        assert algo.score(unknown) == (-100.0, 0.0)
        assert algo.score(big)[0] == -10.0
        spent = await pool.acquire()
        assert spent.resource.id == "small"  # preference, not a limit: still handed out

    run(clock, scenario)


def test_quota_aware_falls_back_when_nothing_is_free(clock: VirtualClock, algorithms: Registry) -> None:
    async def scenario() -> None:
        pool = Pool(
            "q",
            [Resource.create("llm", id="r", options={"quota": {"requests": 10}})],
            clock=clock,
            algorithms=algorithms,
        )
        algo = QuotaAware(metric="requests")
        held = await pool.acquire(algorithm=algo)
        release_at(7, held)
        lease = await pool.acquire(algorithm=algo)
        assert clock.now() == 7 and lease.resource.id == "r"

    run(clock, scenario)


# -- pool.acquire plumbing -------------------------------------------------------------------------


def test_per_call_algorithm_beats_pool_default_beats_wait(clock: VirtualClock, algorithms: Registry) -> None:
    async def scenario() -> None:
        pool = pool_of(clock, algorithms, algorithm="immediate")
        assert isinstance(pool.resolve(), Immediate)
        assert isinstance(pool.resolve("wait"), Wait)
        await pool.acquire()
        with pytest.raises(ResourceUnavailable):
            await pool.acquire()
        with pytest.raises(AcquireTimeout):
            await pool.acquire(algorithm="wait", timeout=1)
        plain = pool_of(clock, algorithms, name="plain")
        assert isinstance(plain.resolve(), Wait)
        with pytest.raises(ConfigError, match="did you mean 'sticky'"):
            await plain.acquire(algorithm="stiky")

    run(clock, scenario)


def test_a_resolver_keeps_one_instance_per_name_and_passes_instances_through(algorithms: Registry) -> None:
    resolver = AlgorithmResolver(algorithms)
    backoff = resolver.resolve("backoff")
    assert isinstance(backoff, Backoff) and resolver.resolve("backoff") is backoff
    assert resolver.resolve(None) is resolver.resolve("wait")
    mine = Immediate()
    assert resolver.resolve(mine) is mine
    built = resolver.resolve({"name": "backoff", "cap": 3})
    assert isinstance(built, Backoff) and built.cap == 3
    assert resolver.resolve({"name": "backoff", "cap": 3}) is not built  # a mapping is built each time
    with pytest.raises(ConfigError, match="did you mean 'backoff'"):
        resolver.resolve("bakoff")


def test_nothing_needs_the_plugins_until_an_algorithm_is_resolved(
    clock: VirtualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pool built without an algorithm leases synchronously without any plugin; its
    default (``wait``) is looked up, in the process-wide registry, at its first use."""

    def no_plugins() -> Registry:
        raise LookupError("the process-wide plugins were asked for")

    monkeypatch.setattr(algorithm_module, "_default_registry", no_plugins)
    resolver = AlgorithmResolver()
    pool = Pool("p", [Resource.create("api", id="r")], clock=clock)
    lease = pool.try_acquire()
    assert lease is not None and lease.release_now()
    with pytest.raises(LookupError):
        resolver.resolve("wait")
    with pytest.raises(LookupError):
        pool.algorithm  # noqa: B018


def test_a_pool_resolves_the_algorithm_it_is_given_and_names_itself_when_it_cannot(
    algorithms: Registry,
) -> None:
    pool = Pool("llm", algorithm={"name": "backoff", "cap": 2}, algorithms=algorithms)
    assert isinstance(pool.algorithm, Backoff) and pool.algorithm.cap == 2
    assert pool.resolve() is pool.algorithm
    unknown = r"^pool 'llm': unknown algorithm 'bakoff' \(did you mean 'backoff'\?\)"
    with pytest.raises(ConfigError, match=unknown):
        Pool("llm", algorithm="bakoff", algorithms=algorithms)


def test_pools_given_one_resolver_share_what_it_resolved(algorithms: Registry) -> None:
    resolver = AlgorithmResolver(algorithms)
    first, second = Pool("a", algorithms=resolver), Pool("b", algorithms=resolver)
    assert first.resolver is second.resolver is resolver
    assert first.algorithm is second.algorithm is resolver.resolve("wait")
    assert first.resolve("sticky") is second.resolve("sticky")


def test_custom_algorithm_instance(clock: VirtualClock, algorithms: Registry) -> None:
    class Newest:
        name = "newest"

        async def acquire(self, pool: Pool, *, ctx: Any, where: Any, timeout: Any, selector: Any) -> Lease:
            lease = pool.try_acquire(ctx, where=where, score=lambda r: r.id, **selector)
            if lease is None:
                raise ResourceUnavailable("none")
            return lease

        def fingerprint(self) -> dict[str, Any]:
            return {"name": self.name}

    async def scenario() -> None:
        pool = pool_of(clock, algorithms, 3)
        lease = await pool.acquire(algorithm=Newest())
        assert lease.resource.id == "p2"

    run(clock, scenario)
