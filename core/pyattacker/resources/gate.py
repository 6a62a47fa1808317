"""The budget gate: a pool's grant path once one of its resources has rate limits.

A pool without limited resources never builds one, so its picks and leases do no extra work.
When the first limited resource is published, the gate takes over the pool's ``_leasable``,
``_pick`` and ``_try_general`` (and the wait queue's references to them): a resource is then a
candidate only when it has a free slot *and* budget for the request's estimated tokens (the
reserved ``tokens`` key of the selector), and a grant is charged to its windows. Every
algorithm goes through these, so every algorithm respects the limits.

While anybody waits, the wait queue asks ``refill_at`` for the earliest time a waiting request
fits one of the resources held back only by budget, and keeps its one timer on it: a wait for
budget is a timed wait, never a polling loop.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from pyattacker.resources.limits import request_tokens
from pyattacker.resources.resource import READY, Resource

if TYPE_CHECKING:
    from pyattacker.resources.lease import Lease
    from pyattacker.resources.pool import Pool

__all__ = ["BudgetGate", "short_of_budget"]


class BudgetGate:
    """Slots and rate budget together, for one pool (see the module docstring)."""

    __slots__ = ("_asking", "_base_leasable", "_base_pick", "_base_try", "_pool")

    def __init__(self, pool: Pool) -> None:
        self._pool = pool
        #: the token estimate of the pick in progress (picks are synchronous); 0 between picks
        self._asking = 0.0
        # the pool's own grant path, which the gate wraps
        self._base_leasable = pool._leasable
        self._base_pick = pool._pick
        self._base_try = pool._try_general

    def install(self) -> None:
        """Route the pool's grant path (and its wait queue's) through the gate."""
        pool = self._pool
        pool._leasable = self.leasable  # type: ignore[method-assign]
        pool._pick = self.pick  # type: ignore[method-assign]
        pool._try_general = self.try_general  # type: ignore[method-assign]
        queue = pool._queue
        queue._leasable = self.leasable
        queue._pick = self.pick
        queue.refill_at = self.refill_at

    # -- the grant path ------------------------------------------------------------------------
    def leasable(self, resource: Resource) -> bool:
        """A free slot (``Pool._leasable``) and, for a limited resource, budget for the request."""
        if not self._base_leasable(resource):
            return False
        limits = resource.limits
        return limits is None or limits.allows(self._pool.clock.now(), self._asking)

    def pick(
        self,
        where: Any,
        selector: Mapping[str, Any] | None,
        score: Callable[[Resource], Any] | None,
        excluded: set[str] | None,
    ) -> int:
        self._asking = request_tokens(selector)
        try:
            return self._base_pick(where, selector, score, excluded)
        finally:
            self._asking = 0.0

    def try_general(
        self,
        ctx: Any,
        where: Any,
        score: Callable[[Resource], Any] | None,
        waited_ms: float,
        selector: Mapping[str, Any],
    ) -> Lease | None:
        """``Pool._try_general``, then the grant charged to the leased resource's windows."""
        pool = self._pool
        lease = self._base_try(ctx, where, score, waited_ms, selector)
        if lease is not None:
            limits = lease.resource.limits
            if limits is not None:
                lease.charge = limits.charge(pool.clock.now(), request_tokens(selector))
        return lease

    # -- waiting -------------------------------------------------------------------------------
    def refill_at(self, now: float, asks: Iterable[float]) -> float | None:
        """The earliest future time a request of ``asks`` (the waiters' estimates) fits a
        resource that only its budget holds back, or None."""
        needs = sorted(set(asks))
        earliest: float | None = None
        for r in self._pool._slots:
            limits = r.limits
            if limits is None or r.state is not READY or r.blocked_until is not None:
                continue
            if r.active >= r.capacity:
                continue  # a returned slot wakes its waiters
            for tokens in needs:
                at = limits.ready_at(now, tokens)
                if at > now and (earliest is None or at < earliest):
                    earliest = at
        return earliest


def short_of_budget(pool: Pool, where: Any, selector: Mapping[str, Any] | None) -> bool:
    """Whether a matching resource has a free slot but no budget (its rate limits, or a
    server's Retry-After): a wait that follows is a wait for budget, not for a slot."""
    now = pool.clock.now()
    tokens = request_tokens(selector)
    for r in pool._slots:
        if r.state is not READY or r.active >= r.capacity:
            continue
        if (selector or where is not None) and not r.matches(selector, where):
            continue
        if r.blocked_until is not None and r.factory_error is None and r.blocked_until > now:
            return True  # held for a server's Retry-After
        if r.limits is not None and not r.limits.allows(now, tokens):
            return True
    return False
