"""The wait queue on its own: who is woken, in which order, and what a lost wake-up becomes.

The queue is driven here without a pool: a list of resources and the two questions it asks
the pool (``pick``: is a matching slot free now; ``leasable``: is this one free), so each
test states one rule of waking. The pool-level behaviour is in test_pool.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from pyattacker import Resource, VirtualClock
from pyattacker.resources.resource import DEAD, DEGRADED, READY
from pyattacker.resources.waiters import WaitQueue
from tests.support.pools import clock_fixture, run

__all__ = ["clock_fixture"]  # fixtures used by name below


def _leasable(resource: Resource) -> bool:
    return resource.state is READY and resource.blocked_until is None and resource.active < resource.capacity


class _Lot:
    """A wait queue over ``resources``; ``ended`` records each ``end_cooldowns(now)`` call."""

    def __init__(self, clock: VirtualClock, *resources: Resource) -> None:
        self.resources = list(resources)
        self.ended: list[float] = []
        self.queue = WaitQueue(
            self.resources,
            pick=self._pick,
            leasable=_leasable,
            end_cooldowns=self._end_cooldowns,
            clock=clock,
        )

    def _pick(self, where: Any, selector: Mapping[str, Any] | None, score: Any, excluded: Any) -> int:
        for i, r in enumerate(self.resources):
            if _leasable(r) and r.matches(selector, where):
                return i
        return -1

    def _end_cooldowns(self, now: float) -> bool:
        self.ended.append(now)
        ended = False
        for r in self.resources:
            if r.blocked_until is not None and r.blocked_until <= now:
                r.blocked_until = None
                r.state = READY
                ended = True
        return ended

    def park(
        self, selector: Mapping[str, Any] | None = None, timeout: float | None = None
    ) -> asyncio.Task[bool]:
        return asyncio.ensure_future(self.queue.wait_slot(selector=selector, timeout=timeout))


def _busy(kind: str, id: str, capacity: int = 1) -> Resource:
    resource = Resource.create(kind, id=id, capacity=capacity)
    resource.active = capacity
    return resource


def test_a_freed_slot_wakes_the_oldest_waiter_that_wants_it(clock: VirtualClock) -> None:
    async def scenario() -> None:
        a = _busy("a", "a")
        lot = _Lot(clock, a, _busy("b", "b"))
        wants_b = lot.park({"kind": "b"})
        first = lot.park()
        second = lot.park()
        await asyncio.sleep(0)
        assert lot.queue.waiting == 3
        a.active = 0
        lot.queue.wake_slot(a, 1)
        await asyncio.sleep(0)
        assert first.done() and first.result() is True
        assert not second.done() and not wants_b.done()
        lot.queue.wake_slot(a, 1)
        assert await second is True
        assert not wants_b.done() and lot.queue.waiting == 1
        wants_b.cancel()

    run(clock, scenario)


def test_a_resource_with_room_for_two_wakes_the_two_oldest(clock: VirtualClock) -> None:
    async def scenario() -> None:
        r = _busy("api", "r", capacity=2)
        lot = _Lot(clock, r)
        waiters = [lot.park() for _ in range(3)]
        await asyncio.sleep(0)
        r.active = 0
        lot.queue.wake_slot(r, r.capacity)
        await asyncio.sleep(0)
        assert [w.done() for w in waiters] == [True, True, False]
        waiters[2].cancel()

    run(clock, scenario)


def test_a_slot_that_is_not_free_wakes_nobody(clock: VirtualClock) -> None:
    async def scenario() -> None:
        r = _busy("api", "r")
        r.state = DEGRADED  # its lease came back, but it cools down: nothing usable was freed
        r.active = 0
        lot = _Lot(clock, r)
        waiter = lot.park()
        await asyncio.sleep(0)
        lot.queue.wake_slot(r, 1)
        await asyncio.sleep(0)
        assert not waiter.done()
        waiter.cancel()

    run(clock, scenario)


def test_the_last_lease_of_a_dead_resource_wakes_every_waiter(clock: VirtualClock) -> None:
    """Nothing held can revive it any more: every waiter must wake to find that out."""

    async def scenario() -> None:
        r = _busy("api", "r")
        lot = _Lot(clock, r)
        waiters = [lot.park({"kind": "api"}), lot.park({"kind": "other"})]
        await asyncio.sleep(0)
        r.state = DEAD
        r.active = 0
        lot.queue.wake_slot(r, 1)
        assert await asyncio.gather(*waiters) == [True, True]

    run(clock, scenario)


def test_a_waiter_cancelled_after_its_wake_up_passes_it_to_the_next(clock: VirtualClock) -> None:
    async def scenario() -> None:
        r = _busy("api", "r")
        lot = _Lot(clock, r)
        woken = lot.park()
        next_in_line = lot.park()
        await asyncio.sleep(0)
        r.active = 0
        lot.queue.wake_slot(r, 1)
        woken.cancel()  # woken, but it will never come for the slot
        await asyncio.sleep(0)
        assert woken.cancelled()
        assert await next_in_line is True
        assert not lot.queue.waiters

    run(clock, scenario)


def test_settle_hands_on_a_free_slot_only_when_no_woken_waiter_is_coming_for_it(clock: VirtualClock) -> None:
    async def scenario() -> None:
        r = _busy("api", "r")
        lot = _Lot(clock, r)
        woken = lot.park()
        later = lot.park()
        await asyncio.sleep(0)
        r.active = 0
        lot.queue.wake_slot(r, 1)
        lot.queue.settle()  # ``woken`` is on its way to the free slot: nobody else is woken
        await asyncio.sleep(0)
        assert woken.result() is True and not later.done()
        lot.queue.settle()  # ``woken`` came back without the slot (it leased another): hand it on
        assert await later is True

    run(clock, scenario)


def test_wait_slot_answers_at_once_when_a_slot_is_free_or_the_timeout_is_spent(clock: VirtualClock) -> None:
    async def scenario() -> None:
        free = Resource.create("api", id="free")
        lot = _Lot(clock, free, _busy("b", "busy"))
        assert await lot.queue.wait_slot(selector={"kind": "api"}) is True
        assert await lot.queue.wait_slot(selector={"kind": "b"}, timeout=0) is False
        assert await lot.queue.wait_slot(selector={"kind": "b"}, timeout=2) is False
        assert clock.now() == 2 and not lot.queue.waiters

    run(clock, scenario)


def test_reset_releases_every_waiter_with_false(clock: VirtualClock) -> None:
    async def scenario() -> None:
        lot = _Lot(clock, _busy("api", "r"))
        waiters = [lot.park(), lot.park()]
        await asyncio.sleep(0)
        lot.queue.reset()
        assert await asyncio.gather(*waiters) == [False, False]

    run(clock, scenario)


def test_the_cooldown_timer_wakes_every_waiter_when_the_earliest_cooldown_ends(clock: VirtualClock) -> None:
    async def scenario() -> None:
        slow, quick = Resource.create("api", id="slow"), Resource.create("api", id="quick")
        for r, until in ((slow, 50.0), (quick, 30.0)):
            r.state, r.blocked_until = DEGRADED, until
        lot = _Lot(clock, slow, quick)
        waiters = [lot.park({"id": "slow"}), lot.park({"id": "quick"})]
        assert await asyncio.gather(*waiters) == [True, True]  # both: a cooldown's end is no one slot's
        assert clock.now() == 30.0 and 30.0 in lot.ended
        assert quick.blocked_until is None and slow.blocked_until == 50.0

    run(clock, scenario)


def test_a_cooldown_that_appears_earlier_moves_the_timer(clock: VirtualClock) -> None:
    async def scenario() -> None:
        late, soon = Resource.create("api", id="late"), Resource.create("api", id="soon")
        late.state, late.blocked_until = DEGRADED, 60.0
        soon.active = 1
        lot = _Lot(clock, late, soon)
        waiter = lot.park()
        await asyncio.sleep(1)  # the timer is armed for t=60
        soon.active, soon.state, soon.blocked_until = 0, DEGRADED, 6.0
        lot.queue.blocked(6.0)
        assert await waiter is True and clock.now() == 6.0

    run(clock, scenario)
