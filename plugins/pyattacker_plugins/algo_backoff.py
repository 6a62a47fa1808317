"""The ``backoff`` acquisition algorithm: poll the pool with growing, jittered sleeps.

Unlike ``wait`` it does not queue on the pool, which suits endpoints whose capacity comes back
on a timer (rate limits) rather than on a release. Its sleeps count as waits in the resource
stats: for budget when, as the sleep began, a matching resource had a free slot but no budget
(its rate limits or a Retry-After), else for a slot. Jitter draws from ``ctx.rng`` when the
context has one, so a replayed attempt sleeps the same amounts.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyattacker import AcquireTimeout, Lease, Pool, hookimpl
from pyattacker.plugins.hookspecs import Register
from pyattacker.resources.algorithm import (
    JITTERS,
    ParameterError,
    backoff_delay,
    beyond_recovery_error,
    ctx_emit,
    ctx_rng,
    number_param,
    optional_number_param,
)
from pyattacker.resources.gate import short_of_budget


class Backoff:
    """Try; else sleep ``min(cap, base*factor**(n-1))`` jittered, until a limit would be passed."""

    name = "backoff"

    def __init__(
        self,
        base: float = 0.2,
        factor: float = 2.0,
        cap: float = 10.0,
        jitter: str = "full",
        max_wait: float | None = None,
    ) -> None:
        self.base = number_param("base", base)
        self.factor = number_param("factor", factor, minimum=1.0)
        self.cap = number_param("cap", cap)
        self.max_wait = optional_number_param("max_wait", max_wait)
        if jitter not in JITTERS:
            raise ParameterError(
                "jitter", f"parameter 'jitter' must be one of {', '.join(JITTERS)}, got {jitter!r}"
            )
        self.jitter = jitter

    async def acquire(
        self, pool: Pool, *, ctx: Any, where: Any, timeout: float | None, selector: Mapping[str, Any]
    ) -> Lease:
        limit = _tightest(timeout, self.max_wait)
        clock = pool.clock
        start = clock.now()
        attempt = 0
        warned = False
        budget_s = 0.0  # of the sleeps, those taken while a matching resource lacked only budget
        while True:
            waited = (clock.now() - start) * 1000.0
            lease = pool.try_acquire(ctx, where=where, waited_ms=waited, **selector)
            if lease is not None:
                pool.note_wait(waited, selector, lease.resource.id)
                if attempt:  # it slept: split the sleeps into budget and slot waits
                    lease.resource.waited_budget_ms += budget_s * 1000.0
                    lease.resource.waited_slot_ms += waited - budget_s * 1000.0
                return lease
            beyond = pool.beyond_recovery(where, selector)
            if beyond is not None:  # polling would go on for ever
                raise beyond_recovery_error(pool, selector, where, beyond)
            if not warned:  # once per request: nothing in the pool matches (see Pool.warn_unmatched)
                warned = pool.warn_unmatched(ctx, where, selector)
            attempt += 1
            delay = backoff_delay(attempt, self.base, self.factor, self.cap, self.jitter, ctx_rng(ctx))
            elapsed = clock.now() - start
            if limit is not None and elapsed + delay > limit:
                raise AcquireTimeout(
                    f"pool {pool.name!r}: no resource free after {attempt} tries;"
                    f" the next backoff of {delay:.3f}s would pass the {limit}s limit"
                )
            ctx_emit(
                ctx,
                "acquire.backoff",
                pool=pool.name,
                attempt=attempt,
                delay_s=delay,
                selector=dict(selector),
            )
            for_budget = pool.rate_limited and short_of_budget(pool, where, selector)
            slept = clock.now()
            await clock.sleep(delay)
            if for_budget:
                budget_s += clock.now() - slept

    def fingerprint(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "base": self.base,
            "factor": self.factor,
            "cap": self.cap,
            "jitter": self.jitter,
            "max_wait": self.max_wait,
        }

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.fingerprint().items() if k != "name")
        return f"Backoff({params})"


def _tightest(*limits: float | None) -> float | None:
    given = [x for x in limits if x is not None]
    return min(given) if given else None


@hookimpl
def pyattacker_algorithms(register: Register) -> None:
    register("backoff", Backoff)
