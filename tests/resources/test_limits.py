"""Rate limits (rpm, tpm, rpd, tpd) checked at acquisition, and a server's Retry-After honoured.

Everything runs on the virtual clock: a minute of rate-limited traffic takes no real time, and
the grant timestamps are exact, so "at most N in any window" is checked over every window.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from typing import Any

import pytest

from pyattacker import Pool, Resource, RetryableError, VirtualClock
from pyattacker.errors import ConfigError
from pyattacker.plugins.registry import Registry
from tests.support.pools import Recorder, algorithms_fixture, clock_fixture, run

__all__ = ["algorithms_fixture", "clock_fixture"]  # fixtures used by name below


def _most_in_any_window(times: Sequence[float], span: float, weights: Sequence[float] | None = None) -> float:
    """The largest total of ``weights`` (1 each by default) in any half-open window
    ``[t, t + span)``; only windows starting at a grant matter (sliding check)."""
    weights = weights or [1.0] * len(times)
    pairs = sorted(zip(times, weights, strict=True))
    most = 0.0
    for i, (start, _) in enumerate(pairs):
        total = sum(w for t, w in pairs[i:] if t < start + span)
        most = max(most, total)
    return most


async def _workers(pool: Pool, n: int, until: float, body: Any, algorithm: Any = None) -> None:
    """``n`` workers leasing from ``pool`` until the clock passes ``until``."""

    async def worker() -> None:
        while pool.clock.now() < until:
            await body(pool, algorithm)

    await asyncio.gather(*(worker() for _ in range(n)))


# -- requests per minute -------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["wait", "least_busy", "quota_aware", "backoff", "sticky"])
def test_a_60_rpm_resource_grants_at_most_60_leases_in_any_60_s_window(
    clock: VirtualClock, algorithms: Registry, algorithm: str
) -> None:
    grants: list[float] = []

    async def body(pool: Pool, alg: Any) -> None:
        async with await pool.acquire(algorithm=alg) as lease:
            grants.append(pool.clock.now())
            await pool.clock.sleep(0.05)
            lease.report(ok=True)

    async def main() -> Pool:
        pool = Pool("llm", [Resource("llm", id="k", capacity=8, limits={"rpm": 60})], clock=clock)
        await _workers(pool, 8, 300.0, body, algorithm)
        return pool

    pool = run(clock, main)
    assert len(grants) >= 5 * 60 - 1  # the limit is used, not wasted (about 60 a minute)
    assert _most_in_any_window(grants, 60.0) <= 60
    row = pool.snapshot()[0]
    assert row["limits"]["rpm"]["limit"] == 60.0


def test_limits_hold_across_resources_each_on_its_own(clock: VirtualClock, algorithms: Registry) -> None:
    grants: dict[str, list[float]] = {"a": [], "b": []}

    async def body(pool: Pool, alg: Any) -> None:
        async with await pool.acquire(algorithm=alg) as lease:
            grants[lease.resource.id].append(pool.clock.now())
            await pool.clock.sleep(0.01)

    async def main() -> None:
        pool = Pool(
            "llm",
            [
                Resource("llm", id="a", capacity=4, limits={"rpm": 30}),
                Resource("llm", id="b", capacity=4, limits={"rpm": 90}),
            ],
            clock=clock,
        )
        await _workers(pool, 6, 120.0, body, "least_busy")

    run(clock, main)
    assert _most_in_any_window(grants["a"], 60.0) <= 30
    assert _most_in_any_window(grants["b"], 60.0) <= 90
    assert len(grants["a"]) + len(grants["b"]) >= 2 * 120 - 2


# -- tokens --------------------------------------------------------------------------------------


def test_token_estimates_and_settlements_keep_each_window_within_tpm(
    clock: VirtualClock, algorithms: Registry
) -> None:
    used: list[tuple[float, float]] = []
    counter = iter(range(10**6))

    async def body(pool: Pool, alg: Any) -> None:
        i = next(counter)
        estimate = 1000.0
        real = 400.0 + (i % 7) * 100.0  # at most the estimate: what the request really spends
        async with await pool.acquire(tokens=estimate) as lease:
            used.append((pool.clock.now(), real))
            await pool.clock.sleep(0.2)
            lease.report(ok=True, usage={"tokens": real})

    async def main() -> Pool:
        pool = Pool("llm", [Resource("llm", id="k", capacity=16, limits={"tpm": 20_000})], clock=clock)
        await _workers(pool, 16, 240.0, body)
        return pool

    pool = run(clock, main)
    times = [t for t, _ in used]
    tokens = [n for _, n in used]
    assert _most_in_any_window(times, 60.0, tokens) <= 20_000
    # settlement frees what the estimate over-reserved: more requests than estimates alone allow
    assert len(used) > 4 * 20_000 / 1000
    assert pool.resource("k").usage["tokens"] == sum(tokens)


def test_an_under_estimate_is_settled_and_later_grants_wait_for_it(clock: VirtualClock) -> None:
    async def main() -> list[float]:
        pool = Pool("llm", [Resource("llm", id="k", capacity=4, limits={"tpm": 1000})], clock=clock)
        times = []
        async with await pool.acquire(tokens=100) as lease:
            lease.report(usage={"tokens": 1000})  # the real count fills the window
        for _ in range(2):
            async with await pool.acquire(tokens=100):
                times.append(pool.clock.now())
        return times

    assert run(clock, main) == [60.0, 60.0]


def test_a_request_larger_than_the_limit_waits_for_an_empty_window(clock: VirtualClock) -> None:
    async def main() -> list[float]:
        pool = Pool("llm", [Resource("llm", capacity=4, limits={"tpm": 1000})], clock=clock)
        times = []
        for tokens in (600, 5000, 10):
            async with await pool.acquire(tokens=tokens):
                times.append(pool.clock.now())
        return times

    assert run(clock, main) == [0.0, 60.0, 120.0]


def test_a_wait_for_budget_is_one_timed_wait_not_a_poll(clock: VirtualClock) -> None:
    """Two grants fill a 2-rpm window; the third waits, woken once, exactly when a grant
    leaves the window (60 s after the first), and the wait is counted as a wait for budget."""

    async def main() -> tuple[float, Pool, int]:
        pool = Pool("llm", [Resource("llm", id="k", capacity=4, limits={"rpm": 2})], clock=clock)
        for _ in range(2):
            (await pool.acquire()).release_now()
        await pool.clock.sleep(10)
        wakes = 0
        wait_slot = pool.wait_slot

        async def counted(**kw: Any) -> bool:
            nonlocal wakes
            wakes += 1
            return await wait_slot(**kw)

        pool.wait_slot = counted  # type: ignore[method-assign]
        lease = await pool.acquire()
        lease.release_now()
        return pool.clock.now(), pool, wakes

    at, pool, wakes = run(clock, main)
    assert at == 60.0
    assert wakes == 1
    row = pool.snapshot()[0]
    assert row["waited_budget_ms"] == pytest.approx(50_000.0)
    assert row["waited_slot_ms"] == 0.0
    # the two first grants left the window at 60 s, the third entered it
    assert row["limits"]["rpm"] == {"limit": 2.0, "used": 1.0, "left": 1.0, "refill_s": 60.0}


def test_a_wait_for_a_slot_is_counted_apart_from_a_wait_for_budget(clock: VirtualClock) -> None:
    async def main() -> Pool:
        pool = Pool("llm", [Resource("llm", id="k", capacity=1, limits={"rpm": 100})], clock=clock)
        held = await pool.acquire()

        async def give_back() -> None:
            await pool.clock.sleep(3)
            held.release_now()

        giver = asyncio.ensure_future(give_back())
        (await pool.acquire()).release_now()
        await giver
        return pool

    row = run(clock, main).snapshot()[0]
    assert row["waited_slot_ms"] == pytest.approx(3000.0)
    assert row["waited_budget_ms"] == 0.0
    assert row["limits"]["rpm"]["used"] == 2.0
    assert row["limits"]["rpm"]["left"] == 98.0
    assert row["limits"]["rpm"]["refill_s"] == pytest.approx(57.0)


# -- a server's Retry-After ----------------------------------------------------------------------


class _Response:
    status_code = 429
    headers = {"Retry-After": "2.5"}


class _TooMany(Exception):
    response = _Response()


@pytest.mark.parametrize(
    "error",
    [RetryableError("slow down", error_class="rate_limit", retry_after=1.237), _TooMany("429")],
    ids=["retry_after", "header"],
)
def test_a_429_holds_the_resource_exactly_as_long_as_the_server_asked(
    clock: VirtualClock, error: BaseException
) -> None:
    asked = 1.237 if isinstance(error, RetryableError) else 2.5

    async def main() -> tuple[float, list[str]]:
        rec = Recorder()
        pool = Pool("llm", [Resource("llm", capacity=4, limits={"rpm": 1000})], clock=clock, on_event=rec)
        await pool.clock.sleep(5)
        with pytest.raises(type(error)):
            async with await pool.acquire():
                raise error
        async with await pool.acquire():
            return pool.clock.now(), rec.kinds()

    at, kinds = run(clock, main)
    assert round((at - 5) * 1000) == round(asked * 1000)  # to the millisecond
    assert "resource.rate_limited" in kinds


def test_a_failed_report_with_retry_after_holds_an_unlimited_resource_too(clock: VirtualClock) -> None:
    async def main() -> tuple[float, str]:
        pool = Pool("llm", [Resource("llm", id="k", capacity=2)], clock=clock)
        lease = await pool.acquire()
        lease.report(ok=False, error=RetryableError("429", retry_after=0.75))
        lease.release_now()
        state = pool.snapshot()[0]["state"]
        async with await pool.acquire():
            return pool.clock.now(), state

    at, state = run(clock, main)
    assert at == pytest.approx(0.75, abs=1e-9)
    assert state == "ready"  # a hold is not a failure of the endpoint's health


# -- algorithms prefer budget --------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["quota_aware", "least_busy"])
def test_budget_aware_algorithms_pick_the_resource_with_most_budget_left(
    clock: VirtualClock, algorithms: Registry, algorithm: str
) -> None:
    async def main() -> list[str]:
        pool = Pool(
            "llm",
            [
                Resource("llm", id="a", capacity=4, limits={"tpm": 10_000}),
                Resource("llm", id="b", capacity=4, limits={"tpm": 10_000}),
            ],
            clock=clock,
        )
        first = await pool.acquire(tokens=6000, where={"id": "a"})
        first.release_now()
        picks = []
        for _ in range(3):
            lease = await pool.acquire(algorithm=algorithm, tokens=100)
            picks.append(lease.resource.id)
            lease.release_now()
        return picks

    assert run(clock, main) == ["b", "b", "b"]


# -- validation ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"rmp": 5}, "unknown limit 'rmp' (did you mean 'rpm'?)"),
        ({"rpm": 0}, "limits.rpm must be a positive number, got 0"),
        ({"tpm": -3}, "limits.tpm must be a positive number"),
        ({"tpd": float("nan")}, "limits.tpd must be a positive number"),
        ({"rpd": True}, "limits.rpd must be a positive number"),
        ([60], "resource limits must be a mapping"),
    ],
)
def test_bad_limits_are_config_errors(limits: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        Resource("llm", limits=limits)


def test_a_bad_token_estimate_is_refused(clock: VirtualClock) -> None:
    async def main() -> None:
        pool = Pool("llm", [Resource("llm", limits={"rpm": 5})], clock=clock)
        with pytest.raises(ValueError, match="tokens= must be a non-negative number"):
            await pool.acquire(tokens=-1)

    run(clock, main)


def test_an_unlimited_pool_keeps_its_fast_path_and_builds_no_gate() -> None:
    pool = Pool("p", [Resource("p", capacity=2)])
    assert not pool.rate_limited
    assert "_pick" not in vars(pool) and "_leasable" not in vars(pool) and "_try_general" not in vars(pool)
    limited = Pool("q", [Resource("q", capacity=2, limits={"rpm": 10})])
    assert limited.rate_limited and "_pick" in vars(limited)
    assert limited.resource(limited.resources()[0].id)._quick is False


def test_backoff_sleeps_are_split_into_budget_and_slot_waits(
    clock: VirtualClock, algorithms: Registry
) -> None:
    """A ``backoff`` request that sleeps while its resource lacks only budget counts a budget
    wait; one that sleeps while every slot is held counts a slot wait."""

    async def budget_case() -> Pool:
        pool = Pool("llm", [Resource("llm", id="k", capacity=2, limits={"rpm": 1})], clock=clock)
        (await pool.acquire(algorithm="backoff")).release_now()
        (await pool.acquire(algorithm={"name": "backoff", "cap": 5.0})).release_now()
        return pool

    row = run(clock, budget_case).snapshot()[0]
    assert row["waited_budget_ms"] >= 60_000.0 - 1.0  # the second lease slept a window out
    assert row["waited_slot_ms"] == pytest.approx(0.0, abs=1e-6)

    async def slot_case() -> Pool:
        pool = Pool("llm", [Resource("llm", id="k", capacity=1, limits={"rpm": 100})], clock=clock)
        held = await pool.acquire(algorithm="backoff")

        async def give_back() -> None:
            await pool.clock.sleep(3)
            held.release_now()

        giver = asyncio.ensure_future(give_back())
        (await pool.acquire(algorithm="backoff")).release_now()
        await giver
        return pool

    row = run(clock, slot_case).snapshot()[0]
    assert row["waited_slot_ms"] >= 3000.0
    assert row["waited_budget_ms"] == 0.0
