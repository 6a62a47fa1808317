"""The ``sticky`` acquisition algorithm: reuse the resource this attempt already used.

Affinity helps when an endpoint keeps per-client state (a warm cache, a session). It lives in
the attempt's context (``ctx.meta["sticky"][pool]``), never in the pool, so a retry or the
next task starts afresh and a broken endpoint cannot capture a pipeline forever.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyattacker import Lease, Pool, ResourceUnavailable, hookimpl
from pyattacker.plugins.hookspecs import Register
from pyattacker.resources.algorithm import FallbackRef
from pyattacker.resources.resource import DEAD, REVOKED

META_KEY = "sticky"


class Sticky:
    """Prefer the attempt's earlier resource (waiting for it through the fallback), else pick and remember."""

    name = "sticky"

    def __init__(self, fallback: Any = None) -> None:
        self.fallback = FallbackRef(fallback)

    async def acquire(
        self, pool: Pool, *, ctx: Any, where: Any, timeout: float | None, selector: Mapping[str, Any]
    ) -> Lease:
        memory = _memory(ctx)
        preferred = memory.get(pool.name) if memory is not None else None
        if preferred is not None and _usable(pool, preferred, where, selector):
            pinned = {**selector, "id": preferred}
            clock = pool.clock
            start = clock.now()
            try:
                return await self.fallback.acquire(
                    pool, ctx=ctx, where=where, timeout=timeout, selector=pinned
                )
            except ResourceUnavailable:
                # the resource died or was revoked during the wait: affinity ends, as it would
                # have before the wait; anything else (a timeout) is the caller's
                if _usable(pool, preferred, where, selector):
                    raise
            if timeout is not None:
                timeout = max(0.0, timeout - (clock.now() - start))
        lease = await self.fallback.acquire(pool, ctx=ctx, where=where, timeout=timeout, selector=selector)
        if memory is not None:
            memory[pool.name] = lease.resource.id
        return lease

    def fingerprint(self) -> dict[str, Any]:
        return {"name": self.name, "fallback": self.fallback.fingerprint()}

    def __repr__(self) -> str:
        return f"Sticky(fallback={self.fallback.spec!r})"


def _memory(ctx: Any) -> dict[str, str] | None:
    meta = getattr(ctx, "meta", None) if ctx is not None else None
    if not isinstance(meta, dict):
        return None
    memory = meta.setdefault(META_KEY, {})
    return memory if isinstance(memory, dict) else None


def _usable(pool: Pool, resource_id: str, where: Any, selector: Mapping[str, Any]) -> bool:
    """Affinity only applies to a resource that still exists, can recover, and matches the ask."""
    resource = pool.resource(resource_id)
    if resource is None or resource.state is DEAD or resource.state is REVOKED:
        return False
    return resource.matches(selector, where)


@hookimpl
def pyattacker_algorithms(register: Register) -> None:
    register("sticky", Sticky)
