"""The ``least_busy`` acquisition algorithm: take the least-loaded free slot now, else fall back.

The pool's own choice is already least-loaded with round-robin on ties, so on a single pool
this behaves like ``wait``; it exists so a config can say what it means, and to pair the
immediate pick with a different fallback (``backoff``, say). In a pool with rate-limited
resources it prefers the resource with the largest share of its budget left, then the least
loaded.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyattacker import Lease, Pool, Resource, hookimpl
from pyattacker.plugins.hookspecs import Register
from pyattacker.resources.algorithm import FallbackRef


def _budget_left(resource: Resource, now: float) -> float:
    """The smallest share of any of the resource's rate windows still free (1.0 unlimited)."""
    limits = resource.limits
    return 1.0 if limits is None else limits.share_left(now)


class LeastBusy:
    """One try with the pool's least-loaded choice; nothing free → the fallback (``wait``)."""

    name = "least_busy"

    def __init__(self, fallback: Any = None) -> None:
        self.fallback = FallbackRef(fallback)

    async def acquire(
        self, pool: Pool, *, ctx: Any, where: Any, timeout: float | None, selector: Mapping[str, Any]
    ) -> Lease:
        if pool.rate_limited:
            # the least busy is also the one with the most budget left: prefer it, then the load
            now = pool.clock.now()
            lease = pool.try_acquire(ctx, where=where, score=lambda r: _budget_left(r, now), **selector)
        else:
            lease = pool.try_acquire(ctx, where=where, **selector)
        if lease is not None:
            pool.note_wait(0.0, selector, lease.resource.id)
            return lease
        return await self.fallback.acquire(pool, ctx=ctx, where=where, timeout=timeout, selector=selector)

    def fingerprint(self) -> dict[str, Any]:
        return {"name": self.name, "fallback": self.fallback.fingerprint()}

    def __repr__(self) -> str:
        return f"LeastBusy(fallback={self.fallback.spec!r})"


@hookimpl
def pyattacker_algorithms(register: Register) -> None:
    register("least_busy", LeastBusy)
