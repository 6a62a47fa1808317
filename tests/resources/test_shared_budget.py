"""One rate budget shared by several pools (the shards of one run): the sum never passes a limit.

The pools here stand for shard processes: each opens the budget file on its own, exactly as a
shard does, and all run on one virtual clock, so a minute of traffic takes no real time and
every window is checked. ``tests/shard/test_shared_budget_shards.py`` runs real shard processes.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from pyattacker import Pool, Resource, VirtualClock
from pyattacker.errors import ConfigError, RetryableError
from pyattacker.resources.shared_budget import (
    BudgetEntry,
    FileBudget,
    SharedBudget,
    budget_key,
    compact_budget_file,
    open_shared_budget,
)
from tests.resources.test_limits import _most_in_any_window
from tests.support.pools import clock_fixture, run

__all__ = ["clock_fixture"]  # a fixture used by name below


def _shards(
    clock: VirtualClock, path: Path, n: int, limits: dict[str, float], capacity: int = 4
) -> list[Pool]:
    pools = []
    for _ in range(n):
        pool = Pool("llm", [Resource("llm", id="k", capacity=capacity, limits=limits)], clock=clock)
        assert pool.share_budget(FileBudget(str(path)))
        pools.append(pool)
    return pools


async def _drive(pools: list[Pool], workers: int, until: float, body: Any) -> None:
    async def worker(pool: Pool) -> None:
        while pool.clock.now() < until:
            await body(pool)

    await asyncio.gather(*(worker(pool) for pool in pools for _ in range(workers)))


def test_four_shards_grant_at_most_60_in_any_window_of_a_60_rpm_resource(
    clock: VirtualClock, tmp_path: Path
) -> None:
    grants: list[tuple[float, int]] = []

    async def body(pool: Pool) -> None:
        async with await pool.acquire() as lease:
            grants.append((pool.clock.now(), id(pool)))
            await pool.clock.sleep(0.05)
            lease.report(ok=True)

    async def main() -> None:
        await _drive(_shards(clock, tmp_path / "b.budget", 4, {"rpm": 60}), 4, 300.0, body)

    run(clock, main)
    times = [t for t, _ in grants]
    assert _most_in_any_window(times, 60.0) <= 60  # the sum of the four, not 4 x 60
    assert len(times) >= 5 * 60 - 1  # and the budget is used, not wasted
    assert len({shard for _, shard in grants}) == 4  # every shard got some of it


def test_shards_share_token_estimates_and_settlements(clock: VirtualClock, tmp_path: Path) -> None:
    used: list[tuple[float, float]] = []
    counter = iter(range(10**6))

    async def body(pool: Pool) -> None:
        real = 400.0 + (next(counter) % 7) * 100.0
        async with await pool.acquire(tokens=1000.0) as lease:
            used.append((pool.clock.now(), real))
            await pool.clock.sleep(0.2)
            lease.report(ok=True, usage={"tokens": real})

    async def main() -> None:
        await _drive(_shards(clock, tmp_path / "b.budget", 3, {"tpm": 20_000}), 4, 240.0, body)

    run(clock, main)
    times, tokens = [t for t, _ in used], [n for _, n in used]
    assert _most_in_any_window(times, 60.0, tokens) <= 20_000
    # settlements made in one shard free budget in the others: more than estimates alone allow
    assert len(used) > 4 * 20_000 / 1000


def test_a_retry_after_in_one_shard_holds_the_resource_in_every_shard(
    clock: VirtualClock, tmp_path: Path
) -> None:
    """A 429 with Retry-After in one shard: the others' next grant of that resource waits until
    exactly the same time (to the millisecond on the virtual clock), budget left or not."""
    one, two = _shards(clock, tmp_path / "b.budget", 2, {"rpm": 1000})

    async def main() -> tuple[float, float]:
        async with await two.acquire():  # the other shard has leased before: it knows the key
            pass
        await clock.sleep(5)
        with pytest.raises(RetryableError):
            async with await one.acquire():
                raise RetryableError("429", error_class="rate_limit", retry_after=1.237)
        async with await two.acquire():
            there = clock.now()
        async with await one.acquire():
            return there, clock.now()

    there, here = run(clock, main)
    assert round((there - 5) * 1000) == 1237  # the other shard held exactly as long
    assert round((here - 5) * 1000) == 1237
    snapshot = two.snapshot()[0]
    assert snapshot["state"] == "ready"


def test_an_unlimited_pool_shares_nothing(tmp_path: Path) -> None:
    pool = Pool("plain", [Resource("plain", id="a", capacity=2)])
    assert not pool.share_budget(FileBudget(str(tmp_path / "b.budget")))
    assert not pool.rate_limited


def test_a_budget_reader_sees_only_the_others_records_in_order(tmp_path: Path) -> None:
    path = str(tmp_path / "b.budget")
    one, two = FileBudget(path), FileBudget(path)
    assert isinstance(one, SharedBudget)
    key = budget_key("llm", "k")
    with one.hold():
        one.push(BudgetEntry(key, 0, one.new_ref(), 1.0, 5.0))
        one.push(BudgetEntry(key, 0, one.new_ref(), 2.0, 6.0))
    assert one.pull() == []
    assert [(e.at, e.tokens) for e in two.pull()] == [(1.0, 5.0), (2.0, 6.0)]
    assert two.pull() == []  # read once
    compact_budget_file(path, since=1.5)
    assert [e.at for e in FileBudget(path).pull()] == [2.0]


def test_a_bad_budget_spec_is_a_config_error_naming_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="PYATTACKER_SHARED_BUDGET"):
        open_shared_budget("nfs:/x", "llm")
    with pytest.raises(ConfigError, match="cannot load"):
        open_shared_budget("py:no_such_module_here:make", "llm")
    assert isinstance(open_shared_budget(f"file:{tmp_path / 'b'}", "llm"), FileBudget)
