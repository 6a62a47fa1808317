"""Why a pool hands out no lease right now, in words a user can act on.

Read by a run that has stopped making progress (``pyattacker.engine.stall``), never per lease:
each call walks the pool's resources and waiters once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pyattacker.resources.resource import DEAD, DEGRADED, READY, REVOKED

if TYPE_CHECKING:
    from pyattacker.resources.pool import Pool

__all__ = ["blockage"]


def blockage(pool: Pool) -> list[str]:
    """What keeps ``pool`` from serving its waiters, each with what to change (empty: nothing
    found; a pool nobody waits on says nothing)."""
    waiters = [w for w in pool._waiters if not w.fut.done()]
    if not waiters:
        return []
    reasons: list[str] = []
    unmatched = sum(1 for w in waiters if not any(r.matches(w.selector, w.where) for r in pool._slots))
    if unmatched:
        reasons.append(
            f"{unmatched} lease request(s) of pool {pool.name!r} wait on a selector that no resource"
            " matches: check the task's selector, or publish a matching resource"
        )
    health = _health_problem(pool)
    if health is not None:
        reasons.append(health)
    spent = _spent_quotas(pool)
    if spent:
        reasons.append(
            f"pool {pool.name!r}: the quota of every resource is spent ({', '.join(spent)}):"
            " raise options.quota, or add resources"
        )
    return reasons


def _health_problem(pool: Pool) -> str | None:
    """Every resource of the pool dead, revoked or cooling down after failures, or None."""
    now = pool.clock.now()
    for r in pool._slots:
        pool._health.refresh(r, now)
    live = [r for r in pool._slots if r.state is not REVOKED]
    if not live or any(r.state is READY and r.blocked_until is None for r in live):
        return None
    cooling = [r for r in live if r.state is DEGRADED or (r.state is READY and r.blocked_until)]
    dead = [r for r in live if r.state is DEAD]
    parts = []
    if cooling:
        soonest = max(0.0, min((r.blocked_until or now) - now for r in cooling))
        parts.append(f"{_ids(cooling)} cooling down after failures, the first back in {soonest:.0f}s")
    if dead:
        parts.append(f"{_ids(dead)} dead")
    return (
        f"pool {pool.name!r} has no usable resource ({'; '.join(parts)}): check the endpoint"
        " (pyattacker report --errors shows what failed); each resource's cooldown_s,"
        " degrade_after and dead_after set how soon and how long a failing one is held back"
    )


def _ids(resources: list[Any]) -> str:
    """The first few resource ids, for a line of text."""
    shown = ", ".join(r.id for r in resources[:3])
    return shown + (f" and {len(resources) - 3} more" if len(resources) > 3 else "")


def _spent_quotas(pool: Pool) -> list[str]:
    """The metrics whose declared quota (``options.quota``) every resource has used up."""
    spent: set[str] | None = None
    for r in pool._slots:
        quotas: Any = r.options.get("quota")
        if not isinstance(quotas, Mapping):
            return []
        mine = {
            str(m)
            for m, q in quotas.items()
            if isinstance(q, int | float) and not isinstance(q, bool) and r.usage.get(str(m), 0) >= q
        }
        spent = mine if spent is None else spent & mine
        if not spent:
            return []
    return sorted(spent or ())
