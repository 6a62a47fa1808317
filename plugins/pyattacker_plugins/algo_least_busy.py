"""The ``least_busy`` acquisition algorithm: take the least-loaded free slot now, else fall back.

The pool's own choice is already least-loaded with round-robin on ties, so on a single pool
this behaves like ``wait``; it exists so a config can say what it means, and to pair the
immediate pick with a different fallback (``backoff``, say).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyattacker import Lease, Pool, hookimpl
from pyattacker.plugins.hookspecs import Register
from pyattacker.resources.algorithm import FallbackRef


class LeastBusy:
    """One try with the pool's least-loaded choice; nothing free → the fallback (``wait``)."""

    name = "least_busy"

    def __init__(self, fallback: Any = None) -> None:
        self.fallback = FallbackRef(fallback)

    async def acquire(
        self, pool: Pool, *, ctx: Any, where: Any, timeout: float | None, selector: Mapping[str, Any]
    ) -> Lease:
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
