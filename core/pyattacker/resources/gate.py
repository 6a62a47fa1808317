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

With a shared budget (``share``: the shards of one machine, see ``shared_budget.py``), each
grant holds the budget's lock, first adds what the other processes granted to the windows,
then decides, and records its own grant before letting go: the processes together never pass
a limit. Settlements are recorded too, and so are a server's Retry-After holds of a limited
resource: the next grant attempt of every other process finds the resource held until the same
time (and its wait queue keeps its timer on the hold's end).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from pyattacker.resources.limits import Charge, request_tokens
from pyattacker.resources.resource import READY, Resource
from pyattacker.resources.shared_budget import CHARGE, HOLD, SETTLE, BudgetEntry, SharedBudget, budget_key

if TYPE_CHECKING:
    from pyattacker.resources.lease import Lease
    from pyattacker.resources.pool import Pool

__all__ = ["BudgetGate", "short_of_budget"]


class BudgetGate:
    """Slots and rate budget together, for one pool (see the module docstring)."""

    __slots__ = (
        "_asking",
        "_base_leasable",
        "_base_pick",
        "_base_try",
        "_foreign",
        "_keys",
        "_pool",
        "shared",
    )

    def __init__(self, pool: Pool) -> None:
        self._pool = pool
        #: the token estimate of the pick in progress (picks are synchronous); 0 between picks
        self._asking = 0.0
        # the pool's own grant path, which the gate wraps
        self._base_leasable = pool._leasable
        self._base_pick = pool._pick
        self._base_try = pool._try_general
        #: the budget shared with other processes (None: this process's alone)
        self.shared: SharedBudget | None = None
        #: the other processes' token charges still in a window, by ref (to apply settlements)
        self._foreign: dict[int, Charge] = {}
        #: the limited resources by their name in the shared log
        self._keys: dict[bytes, Resource] = {}

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
        shared = self.shared
        if shared is not None:
            with shared.hold():
                self._pull(shared)
                lease = self._base_try(ctx, where, score, waited_ms, selector)
                if lease is not None and lease.resource.limits is not None:
                    self._charge_shared(shared, lease, request_tokens(selector))
            return lease
        lease = self._base_try(ctx, where, score, waited_ms, selector)
        if lease is not None:
            limits = lease.resource.limits
            if limits is not None:
                lease.charge = limits.charge(pool.clock.now(), request_tokens(selector))
        return lease

    # -- a budget shared with other processes ----------------------------------------------------
    def share(self, budget: SharedBudget) -> None:
        """Count every grant of ``budget``'s other processes too (see the module docstring)."""
        self.shared = budget

    def _charge_shared(self, shared: SharedBudget, lease: Lease, tokens: float) -> None:
        resource = lease.resource
        assert resource.limits is not None
        now = self._pool.clock.now()
        ref = shared.new_ref()
        charge = lease.charge = resource.limits.charge(now, tokens)
        if charge is not None:
            charge.ref = ref
        shared.push(BudgetEntry(self._key(resource), CHARGE, ref, now, tokens))

    def _key(self, resource: Resource) -> bytes:
        key = budget_key(self._pool.name, resource.id)
        self._keys[key] = resource
        return key

    def _pull(self, shared: SharedBudget) -> None:
        """Add the other processes' grants and settlements to the windows."""
        entries = shared.pull()
        if not entries:
            return
        keys = self._keys
        if len(keys) < len(self._pool._slots):
            for r in self._pool._slots:
                if r.limits is not None:
                    self._key(r)
        now = self._pool.clock.now()
        foreign = self._foreign
        for entry in entries:
            resource = keys.get(entry.key)
            limits = None if resource is None else resource.limits
            if limits is None:
                continue  # another pool's resource, or one this process does not have
            if entry.kind == CHARGE:
                charge = limits.charge(entry.at, entry.tokens)
                if charge is not None:
                    foreign[entry.ref] = charge
            elif entry.kind == SETTLE:
                held = foreign.get(entry.ref)
                if held is not None:
                    limits.adjust(held, entry.tokens, now)
            elif entry.kind == HOLD and entry.at > now:
                assert resource is not None
                self._pool._health.hold_until(resource, entry.at, entry.tokens, "retry_after_shared")
        self._forget(now)

    def _forget(self, now: float) -> None:
        """Drop foreign charges no window holds any more (the dict is in grant order)."""
        foreign = self._foreign
        if not foreign:
            return
        span = max(r.limits.longest_span for r in self._keys.values() if r.limits is not None)
        while foreign:
            ref, charge = next(iter(foreign.items()))
            if charge.at + span > now:
                return
            del foreign[ref]

    def settled(self, resource: Resource, charge: Charge, delta: float) -> None:
        """Record a settlement of this process's grant in the shared budget (when there is one)."""
        shared = self.shared
        if shared is None or not charge.ref:
            return
        with shared.hold():
            shared.push(BudgetEntry(self._key(resource), SETTLE, charge.ref, charge.at, delta))

    def held(self, resource: Resource, until: float) -> None:
        """Record a server's hold of ``resource`` until ``until`` in the shared budget (when
        there is one, and the resource is limited: only those share a budget)."""
        shared = self.shared
        if shared is None or resource.limits is None:
            return
        seconds = until - self._pool.clock.now()
        with shared.hold():
            shared.push(BudgetEntry(self._key(resource), HOLD, shared.new_ref(), until, seconds))

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
