"""The ``quota_aware`` acquisition algorithm: prefer the resource with the most quota left.

Quota is declared per resource (``options: {quota: {tokens: 100000}}``) and spending is what
tasks report (``lease.report(usage={"tokens": n})``); a resource with rate limits
(``limits: {tpm: ...}``) is scored by the live share of its budget left instead. Quota is a
preference, never a limit: when everything is spent it still hands out the best slot, because
only the endpoint knows its real limit and refusing locally would turn an estimate into an
outage. Rate limits are enforced by the pool itself, for every algorithm.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyattacker import Lease, Pool, Resource, hookimpl
from pyattacker.plugins.hookspecs import Register
from pyattacker.resources.algorithm import FallbackRef, ParameterError, number_param

#: Score of a resource that declares no usable quota for the metric.
UNKNOWN_SCORE = -100.0
#: Score of a resource whose remaining share is inside the reserve (still usable).
RESERVE_SCORE = -10.0


class QuotaAware:
    """Highest ``(remaining/quota, remaining)`` wins; nothing free → the fallback (``wait``)."""

    name = "quota_aware"

    def __init__(self, metric: str = "tokens", reserve: float = 0.05, fallback: Any = None) -> None:
        if not isinstance(metric, str) or not metric:
            raise ParameterError("metric", f"parameter 'metric' must be a non-empty string, got {metric!r}")
        self.metric = metric
        self.reserve = number_param("reserve", reserve)
        if self.reserve > 1:
            raise ParameterError("reserve", f"parameter 'reserve' must be between 0 and 1, got {reserve!r}")
        self.fallback = FallbackRef(fallback)

    def score(self, resource: Resource, now: float | None = None) -> tuple[float, float]:
        limits = resource.limits
        if limits is not None and now is not None:
            # a rate-limited resource: the live share of its budget left, tokens or requests
            unit = "tokens" if self.metric == "tokens" else "requests"
            share = limits.share_left(now, unit)
            return (RESERVE_SCORE if share <= self.reserve else share, share)
        quotas = resource.options.get("quota")
        quota = quotas.get(self.metric) if isinstance(quotas, Mapping) else None
        if isinstance(quota, bool) or not isinstance(quota, int | float) or quota <= 0:
            return (UNKNOWN_SCORE, 0.0)
        remaining = quota - resource.usage.get(self.metric, 0)
        share = remaining / quota
        if share <= self.reserve:
            return (RESERVE_SCORE, float(remaining))
        return (share, float(remaining))

    async def acquire(
        self, pool: Pool, *, ctx: Any, where: Any, timeout: float | None, selector: Mapping[str, Any]
    ) -> Lease:
        if pool.rate_limited:
            now = pool.clock.now()
            lease = pool.try_acquire(ctx, where=where, score=lambda r: self.score(r, now), **selector)
        else:
            lease = pool.try_acquire(ctx, where=where, score=self.score, **selector)
        if lease is not None:
            pool.note_wait(0.0, selector, lease.resource.id)
            return lease
        return await self.fallback.acquire(pool, ctx=ctx, where=where, timeout=timeout, selector=selector)

    def fingerprint(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "metric": self.metric,
            "reserve": self.reserve,
            "fallback": self.fallback.fingerprint(),
        }

    def __repr__(self) -> str:
        return f"QuotaAware(metric={self.metric!r}, reserve={self.reserve}, fallback={self.fallback.spec!r})"


@hookimpl
def pyattacker_algorithms(register: Register) -> None:
    register("quota_aware", QuotaAware)
