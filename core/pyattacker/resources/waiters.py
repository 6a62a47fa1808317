"""The wait queue: acquirers blocked on a pool until a slot they want may be free.

Waiting and waking are one object (the shape of trio's ``ParkingLot``). A waiter parks with what
it wants (a selector, a ``where``). A returned slot wakes one waiter that wants its resource; a
published or revived resource wakes up to its capacity of them; a change that concerns no one
slot (a cooldown's end, a death, a revocation) wakes every waiter. A wake-up is a hint, never a
reservation: the woken waiter tries again and may lose the race. Two rules keep a hint from
being lost:

- a waiter cancelled after it was woken passes its wake-up on to the next that wants the slot;
- after every try made while somebody waits, each free slot that no woken waiter is on its way
  to take is handed to a waiter that wants it (``settle``).

While anybody waits, one timer is kept on the earliest future cooldown of the pool's resources,
so that a pool whose every resource is cooling down wakes its waiters when the first one ends;
in a pool with rate-limited resources the same timer also covers the earliest time a waiting
request fits the budget of a resource with a free slot (``refill_at``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pyattacker.clock import Clock
from pyattacker.resources.limits import request_tokens
from pyattacker.resources.resource import DEAD, READY, REVOKED, Resource

__all__ = ["WaitQueue"]


class _Waiter:
    """One blocked acquirer: its future, and what it is waiting for."""

    __slots__ = ("fut", "selector", "tokens", "where", "woken_by")

    def __init__(self, fut: asyncio.Future[bool], selector: Mapping[str, Any] | None, where: Any) -> None:
        self.fut = fut
        self.selector = selector
        self.where = where
        self.woken_by: Resource | None = None
        #: the request's token estimate (a rate-limited resource must have budget for it)
        self.tokens = request_tokens(selector)

    def wants(self, resource: Resource, clock: Clock | None) -> bool:
        """Whether the waiter would take ``resource``: it matches and, unless ``clock`` is None,
        has budget for the waiter's tokens."""
        if self.tokens and clock is not None:
            limits = resource.limits
            if limits is not None and not limits.allows(clock.now(), self.tokens):
                return False  # woken, it would find no budget and wake the next: a busy loop
        if self.selector is None and self.where is None:
            return True
        try:
            return resource.matches(self.selector, self.where)
        except Exception:
            return True  # a broken where() must not break a release: the waiter re-checks and raises


def _free_slot(resource: Resource) -> bool:
    """Ready, not blocked, with a slot free (whatever its rate budget says)."""
    return resource.state is READY and resource.blocked_until is None and resource.active < resource.capacity


def _wake_for(resource: Resource, slots: int, waiters: Iterable[_Waiter], clock: Clock | None) -> None:
    """Wake up to ``slots`` of ``waiters`` that are still asleep and want ``resource``."""
    for waiter in waiters:
        if slots <= 0:
            return
        if not waiter.fut.done() and waiter.wants(resource, clock):
            waiter.woken_by = resource
            waiter.fut.set_result(True)
            slots -= 1


def _expire(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(False)


class WaitQueue:
    """The waiters of one pool, in arrival order, and the cooldown timer that wakes them.

    It reads the pool's resources (the pool's own list) and asks the pool two questions:
    ``pick(where, selector, None, None)`` (the index of a free matching resource, or -1) and
    ``leasable(resource)``; ``end_cooldowns(now)`` ends the cooldowns that are over (True when
    there was one). The pool assigns ``clock`` when its own clock changes.
    """

    __slots__ = (
        "_cooldown_at",
        "_cooldown_handle",
        "_end_cooldowns",
        "_leasable",
        "_loop",
        "_pick",
        "_resources",
        "clock",
        "refill_at",
        "waiters",
    )

    def __init__(
        self,
        resources: list[Resource],
        *,
        pick: Callable[[Any, Mapping[str, Any] | None, Any, Any], int],
        leasable: Callable[[Resource], bool],
        end_cooldowns: Callable[[float], bool],
        clock: Clock,
    ) -> None:
        self._resources = resources
        self._pick = pick
        self._leasable = leasable
        self._end_cooldowns = end_cooldowns
        self.clock = clock
        #: the parked waiters, oldest first (a dict: ordered, with O(1) removal)
        self.waiters: dict[_Waiter, None] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._cooldown_handle: asyncio.TimerHandle | None = None
        self._cooldown_at = 0.0
        #: ``refill_at(now, asks)``: when a waiting request next fits a resource that only its
        #: rate budget holds back (set by the pool's budget gate; None: no resource is limited)
        self.refill_at: Callable[[float, Iterable[float]], float | None] | None = None

    @property
    def waiting(self) -> int:
        """How many waiters are still asleep."""
        return sum(1 for w in self.waiters if not w.fut.done())

    # -- waiting ---------------------------------------------------------------------------
    async def wait_slot(
        self,
        *,
        where: Any = None,
        selector: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> bool:
        """Block until a matching candidate may be free (True) or ``timeout`` passes (False).

        True is a hint, not a reservation: the caller must still ``try_acquire``.
        """
        if self._pick(where, selector, None, None) >= 0:
            return True
        if timeout is not None and timeout <= 0:
            return False
        loop = asyncio.get_running_loop()
        self._loop = loop
        waiter = _Waiter(loop.create_future(), selector or None, where)
        self.waiters[waiter] = None
        self._arm_cooldown()
        handle = loop.call_later(timeout, _expire, waiter.fut) if timeout is not None else None
        try:
            return await waiter.fut
        except BaseException:
            fut = waiter.fut
            if fut.done() and not fut.cancelled() and fut.result():
                self._pass_on(waiter)  # woken, but it will not take the slot: wake someone else
            raise
        finally:
            del self.waiters[waiter]
            if handle is not None:
                handle.cancel()
            if not self.waiters:
                self._disarm_cooldown()

    def reset(self) -> None:
        """Release every blocked waiter with False and drop the timer (shutdown, loop change)."""
        for waiter in list(self.waiters):
            if not waiter.fut.done() and not waiter.fut.get_loop().is_closed():
                waiter.fut.set_result(False)
        self._disarm_cooldown()

    # -- waking ----------------------------------------------------------------------------
    def wake_slot(self, resource: Resource, slots: int) -> None:
        """A slot of ``resource`` may be free: wake up to ``slots`` waiters that want it."""
        if not self._leasable(resource):
            if resource.state is DEAD and resource.active == 0:
                self.wake_all()  # its last lease is back: nothing held can revive it now
            elif self.refill_at is not None and self.waiters and _free_slot(resource):
                # a free slot without budget: its waiters now wait for budget (woken, they find
                # out and park again, which arms the timer on the refill)
                _wake_for(resource, slots, self.waiters, None)
                self._arm_cooldown()
            return  # e.g. a degraded resource's lease came back: nothing usable was freed
        _wake_for(resource, slots, self.waiters, self.clock)

    def wake_all(self) -> None:
        """Wake every waiter: a change that concerns no one slot, each waiter re-checks."""
        for waiter in self.waiters:
            if not waiter.fut.done():
                waiter.fut.set_result(True)

    def _pass_on(self, waiter: _Waiter) -> None:
        if waiter.woken_by is None:
            self.wake_all()
        else:
            self.wake_slot(waiter.woken_by, 1)

    def settle(self) -> None:
        """Wake pending waiters for the free slots that no woken waiter is on its way to take.

        Runs after every try made while somebody waits. A targeted wake-up is a hint: the
        waiter it wakes may take another slot than the one it was woken for, find that its
        filter no longer wants it, or raise from its ``where``. Each of those leaves a free
        slot that nobody will come for; this hands it to a waiter that wants it. When nothing
        is free (the usual case under contention) it costs one pass over the resources.
        """
        free: dict[str, int] = {}
        leasable = self._leasable
        for r in self._resources:
            if leasable(r):
                free[r.id] = r.capacity - r.active
        if not free:
            return
        pending: list[_Waiter] = []
        for w in self.waiters:
            fut = w.fut
            if not fut.done():
                pending.append(w)
            elif w.woken_by is not None and w.woken_by.id in free and not fut.cancelled() and fut.result():
                free[w.woken_by.id] -= 1
        if not pending:
            return
        for r in self._resources:
            if free.get(r.id, 0) > 0:
                _wake_for(r, free[r.id], pending, self.clock)

    # -- the cooldown timer ----------------------------------------------------------------
    def blocked(self, until: float) -> None:
        """A new cooldown appeared: re-arm when it ends before the armed one."""
        if self.waiters and (self._cooldown_handle is None or until < self._cooldown_at):
            self._arm_cooldown()

    def _earliest_cooldown(self, now: float) -> float | None:
        earliest: float | None = None
        for r in self._resources:
            until = r.blocked_until
            if until is None or until <= now or r.state is DEAD or r.state is REVOKED:
                continue
            if earliest is None or until < earliest:
                earliest = until
        if self.refill_at is not None:
            asks = (w.tokens for w in self.waiters if not w.fut.done())
            refill = self.refill_at(now, asks)
            if refill is not None and (earliest is None or refill < earliest):
                earliest = refill
        return earliest

    def _arm_cooldown(self) -> None:
        """Keep one timer on the earliest future cooldown while anybody waits.

        A cooldown that has ended by now but is still recorded is ended here, and the waiters
        are woken: no timer will see it end. That happens when a waiter checked the pool just
        before the cooldown ended and registered just after, or when a timer fired a little
        early (uvloop truncates delays to whole milliseconds) and the waiters it woke found the
        resource still blocked. Without this, every worker could wait for a timer never armed.
        """
        if not self.waiters or self._loop is None or self._loop.is_closed():
            return
        now = self.clock.now()
        if self._end_cooldowns(now):
            self.wake_all()
        earliest = self._earliest_cooldown(now)
        if earliest is None:
            self._disarm_cooldown()
            return
        if self._cooldown_handle is not None and self._cooldown_at <= earliest:
            return
        self._disarm_cooldown()
        self._cooldown_at = earliest
        self._cooldown_handle = self._loop.call_later(earliest - now, self._cooldown_fired)

    def _disarm_cooldown(self) -> None:
        if self._cooldown_handle is not None:
            self._cooldown_handle.cancel()
            self._cooldown_handle = None

    def _cooldown_fired(self) -> None:
        self._cooldown_handle = None
        self._end_cooldowns(self.clock.now())
        self.wake_all()
        self._arm_cooldown()
