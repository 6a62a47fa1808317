"""The ``failover`` acquisition algorithm: try several pools in order, then wait on one.

Each listed pool gets one immediate try, so a healthy secondary serves while the primary is
saturated. When none has a free slot the fallback waits on one pool only (waiting on all of
them would need a lease race across pools): the first listed pool that can serve the request,
that is, one with a matching resource that is not beyond recovery. Waiting on the first pool
regardless would wait for ever when only a later pool has what the selector asks for.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyattacker import Lease, Pool, ResourceUnavailable, hookimpl
from pyattacker.plugins.hookspecs import Register
from pyattacker.resources.algorithm import FallbackRef, ParameterError


class Failover:
    """Try each of ``pools`` (names in ``ctx.pools``; empty = the current pool) once, then fall back."""

    name = "failover"

    def __init__(self, pools: Any = (), fallback: Any = None) -> None:
        if isinstance(pools, str):
            pools = (pools,)
        problem = f"parameter 'pools' must be a list of pool names, got {pools!r}"
        try:
            names = list(pools)
        except TypeError:
            raise ParameterError("pools", problem) from None
        if not all(isinstance(n, str) and n for n in names):
            raise ParameterError("pools", problem)
        self.pools: tuple[str, ...] = tuple(names)
        self.fallback = FallbackRef(fallback)

    def referenced_pools(self) -> tuple[str, ...]:
        """The pools named in ``pools``: ``validate`` checks that the config declares them (an
        undeclared one is only looked up when a lease is asked for, failing every pipeline)."""
        return self.pools

    def _lookup(self, pool: Pool, ctx: Any, name: str) -> Pool | None:
        if name == pool.name:
            return pool
        known = getattr(ctx, "pools", None) if ctx is not None else None
        found = known.get(name) if known is not None else None
        return found if found is not None else None

    async def acquire(
        self, pool: Pool, *, ctx: Any, where: Any, timeout: float | None, selector: Mapping[str, Any]
    ) -> Lease:
        names = self.pools or (pool.name,)
        reasons: dict[str, str] = {}
        first: Pool | None = None
        known: list[Pool] = []
        for index, name in enumerate(names):
            target = self._lookup(pool, ctx, name)
            if target is None:
                reasons[name] = "unknown pool"
                continue
            known.append(target)
            if index == 0:
                first = target
            try:
                lease = target.try_acquire(ctx, where=where, **selector)
            except ResourceUnavailable as exc:
                reasons[name] = str(exc)
                continue
            if lease is not None:
                target.note_wait(0.0, selector, lease.resource.id)
                return lease
            reasons[name] = "no resource free"
        # the first pool that can serve the request; when none can, the first listed pool (a
        # publish may still bring it a match)
        wait_on = next((t for t in known if _can_serve(t, where, selector)), first)
        if wait_on is not None:
            try:
                return await self.fallback.acquire(
                    wait_on, ctx=ctx, where=where, timeout=timeout, selector=selector
                )
            except ResourceUnavailable as exc:
                reasons[wait_on.name] = f"{reasons.get(wait_on.name, 'no resource free')}; then {exc}"
                raise _combined(type(exc), reasons) from exc
        raise _combined(ResourceUnavailable, reasons)

    def fingerprint(self) -> dict[str, Any]:
        return {"name": self.name, "pools": list(self.pools), "fallback": self.fallback.fingerprint()}

    def __repr__(self) -> str:
        return f"Failover(pools={list(self.pools)!r}, fallback={self.fallback.spec!r})"


def _can_serve(pool: Pool, where: Any, selector: Mapping[str, Any]) -> bool:
    """A resource of ``pool`` matches, and the matching ones are not beyond recovery."""
    if not any(r.matches(selector, where) for r in pool.resources()):
        return False
    return pool.beyond_recovery(where, selector) is None


def _combined(cls: type[ResourceUnavailable], reasons: Mapping[str, str]) -> ResourceUnavailable:
    detail = "; ".join(f"{name}: {why}" for name, why in reasons.items())
    return cls(f"failover found no resource in any pool ({detail})")


@hookimpl
def pyattacker_algorithms(register: Register) -> None:
    register("failover", Failover)
