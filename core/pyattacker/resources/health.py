"""The health of a pool's resources: a small state machine moved by what happens to them.

::

    READY     --degrade_after consecutive failures, or lease.degrade()-->  DEGRADED, blocked
                                                                           for one cooldown
    DEGRADED  --its cooldown ends, or an ok report-->  READY  (the failure count stays until an ok)
    READY, DEGRADED  --dead_after consecutive failures-->  DEAD  (until an ok report on a held
                                                                  lease, or a re-publish)
    a failing factory: the resource is blocked for one cooldown, and it counts as a failure
    REVOKED (``Pool.revoke``) is final; publishing a resource again resets it to READY

Nothing runs in the background: a cooldown that is over is noticed when the resource is next
read (``refresh``), or by the wait queue's cooldown timer while somebody waits. Each transition
is announced as a pool event and wakes the waiters it may concern.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pyattacker.errors import retry_after_of
from pyattacker.resources.diagnostics import add_usage
from pyattacker.resources.limits import Charge
from pyattacker.resources.resource import DEAD, DEGRADED, READY, REVOKED, Resource, ResourceState

if TYPE_CHECKING:
    from pyattacker.resources.pool import Pool

__all__ = ["Health", "describe_error"]

#: Weights of the previous average and of the new sample in a resource's latency average.
_EMA_OLD, _EMA_NEW = 0.7, 0.3


def describe_error(error: BaseException | str) -> str:
    """``"Type: message"`` of an exception (just the type when it has no message), or the text."""
    if isinstance(error, BaseException):
        text = str(error)
        return f"{type(error).__name__}: {text}" if text else type(error).__name__
    return str(error)


class Health:
    """The health transitions of one pool's resources, and the pool's ok/failed report counts.

    It announces through the pool's events and wakes through the pool's wait queue.
    """

    __slots__ = ("_pool", "failed_total", "ok_total")

    def __init__(self, pool: Pool) -> None:
        self._pool = pool
        self.ok_total = 0
        self.failed_total = 0

    # -- time --------------------------------------------------------------------------------
    def refresh(self, resource: Resource, now: float) -> None:
        """End the resource's cooldown when it is over by ``now`` (the failure count stays)."""
        until = resource.blocked_until
        if until is None or now < until:
            return
        resource.blocked_until = None
        resource.factory_error = None
        resource._factory_exc = None
        pool = self._pool
        if resource.state is DEGRADED:
            resource.state = READY
            if pool._listened():
                pool._emit("resource.recovered", resource.id, {"reason": "cooldown_elapsed"})
        if pool._waiters:
            # seen ended by a pick or a wake-up before the cooldown timer fired: the waiters
            # the timer would have woken are woken here (the timer may be disarmed next)
            pool._queue.wake_all()

    def end_cooldowns(self, now: float) -> bool:
        """End every cooldown of the pool that is over by ``now``; whether there was one."""
        ended = False
        for resource in self._pool._slots:
            until = resource.blocked_until
            if until is not None and until <= now:
                self.refresh(resource, now)
                ended = True
        return ended

    # -- reports -----------------------------------------------------------------------------
    def report(
        self,
        resource: Resource,
        ok: bool,
        latency_ms: float | None,
        usage: Mapping[str, float] | None,
        error: BaseException | str | None,
        charge: Charge | None = None,
    ) -> None:
        """How a call on a lease went (``Lease.report``): the only way health changes by use."""
        if latency_ms is not None:
            ema = resource.latency_ms_ema
            latency = float(latency_ms)
            resource.latency_ms_ema = latency if ema is None else _EMA_OLD * ema + _EMA_NEW * latency
        if usage:
            add_usage(resource.usage, usage)
            if charge is not None and "tokens" in usage:
                self.settle(resource, charge, usage["tokens"])
        if ok:
            self.succeeded(resource)
        else:
            if isinstance(error, BaseException):
                after = retry_after_of(error)
                if after is not None:
                    self.hold(resource, after, "retry_after")
            self.failed(resource, None if error is None else describe_error(error))

    def settle(self, resource: Resource, charge: Charge, tokens: float) -> None:
        """The real token count of a grant replaces its estimate; budget freed wakes waiters."""
        limits = resource.limits
        if limits is None:
            return
        pool = self._pool
        delta = limits.settle(charge, float(tokens), pool.clock.now())
        if delta and charge.ref and pool._gate is not None:
            pool._gate.settled(resource, charge, delta)
        if delta < 0 and pool._waiters:
            pool._queue.wake_slot(resource, resource.capacity)

    def hold(self, resource: Resource, seconds: float, reason: str) -> None:
        """Not leasable for exactly ``seconds`` from now, its state unchanged (a server's
        Retry-After: its budget is spent until then). A longer hold already set stays."""
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 <= seconds < math.inf:
            raise ValueError(f"a hold must be a non-negative number of seconds, got {seconds!r}")
        if seconds == 0:
            return
        pool = self._pool
        until = pool.clock.now() + seconds
        gate = pool._gate
        if self.hold_until(resource, until, seconds, reason) and gate is not None:
            gate.held(resource, until)  # the other shards sharing its budget hold too

    def hold_until(self, resource: Resource, until: float, seconds: float, reason: str) -> bool:
        """Not leasable until ``until``; whether that changed anything (a longer hold, or a
        revoked or dead resource, stays as it is)."""
        if resource.state is REVOKED or resource.state is DEAD:
            return False
        if resource.blocked_until is not None and resource.blocked_until >= until:
            return False
        resource.blocked_until = until
        pool = self._pool
        if pool._listened():
            pool._emit("resource.rate_limited", resource.id, {"retry_after_s": seconds, "reason": reason})
        pool._queue.blocked(until)
        return True

    def succeeded(self, resource: Resource) -> None:
        """An ok call: the failure count restarts, and a DEGRADED or DEAD resource is READY."""
        resource.ok_total += 1
        self.ok_total += 1
        resource.consecutive_failures = 0
        if resource.state is DEGRADED or resource.state is DEAD:
            resource.state = READY
            resource.blocked_until = None
            resource.factory_error = None
            pool = self._pool
            if pool._listened():
                pool._emit("resource.recovered", resource.id, {})
            if pool._waiters:
                pool._queue.wake_slot(resource, resource.capacity)

    def failed(self, resource: Resource, error: str | None) -> None:
        """A failed call: DEGRADED at ``degrade_after`` in a row, DEAD at ``dead_after``."""
        resource.failed_total += 1
        self.failed_total += 1
        resource.consecutive_failures += 1
        count = resource.consecutive_failures
        if resource.state is REVOKED or resource.state is DEAD:
            return
        pool = self._pool
        if count >= resource.dead_after:
            resource.state = DEAD
            resource.blocked_until = None
            if pool._listened():
                pool._emit("resource.dead", resource.id, {"consecutive_failures": count, "error": error})
            if pool._waiters and resource.active == 0:
                pool._queue.wake_all()  # see Pool.beyond_recovery(): the waiters re-check
        elif count >= resource.degrade_after:
            was = resource.state
            self._block(resource, DEGRADED)
            if was is READY and pool._listened():
                pool._emit(
                    "resource.degraded",
                    resource.id,
                    {"consecutive_failures": count, "cooldown_s": resource.cooldown_s, "error": error},
                )

    def degrade(self, resource: Resource, reason: str) -> None:
        """Out of rotation for one cooldown (``Lease.degrade``: the server said "slow down")."""
        if resource.state is REVOKED or resource.state is DEAD:
            return
        self._block(resource, DEGRADED)
        pool = self._pool
        if pool._listened():
            pool._emit("resource.degraded", resource.id, {"reason": reason})

    def factory_failed(self, resource: Resource, exc: BaseException) -> None:
        """A failing factory refuses the lease and blocks the resource for one cooldown."""
        text = describe_error(exc)
        resource.factory_error = text
        resource._factory_exc = exc
        if resource.state is READY:
            self._block(resource, READY)
        pool = self._pool
        if pool._listened():
            pool._emit("resource.factory_failed", resource.id, {"error": text})
        self.failed(resource, text)

    def _block(self, resource: Resource, state: ResourceState) -> None:
        """Blocked for one cooldown from now (a longer block already set stays)."""
        pool = self._pool
        until = pool.clock.now() + resource.cooldown_s
        if resource.blocked_until is None or until > resource.blocked_until:
            resource.blocked_until = until
        resource.state = state
        pool._queue.blocked(resource.blocked_until)
