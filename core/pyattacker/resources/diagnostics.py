"""What a pool tells about itself: wait records and hints, counters, per-resource rows.

These are functions of a pool, bound on ``Pool`` as its methods (``pool.stats()``,
``pool.note_wait(...)``), so calling one costs what a method defined there would: the wait
records and hints run once per lease or per wait.

- ``note_wait``: how long an acquisition waited (the percentiles of ``stats``); a wait over
  ``SLOW_WAIT_MS`` emits ``acquire.slow_wait``.
- ``watch_deadlock``: a task that holds a lease of the pool and waits for another gets
  ``acquire.suspected_deadlock`` after ``deadlock_warn_s``.
- ``warn_unmatched``: a wait that no resource of the pool could ever serve emits
  ``acquire.waiting_unmatched`` (such a wait only ends with a publish, and looks like a hang).
- ``stats`` (a ``PoolStats``) and ``snapshot`` (one row per resource, secrets masked).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from pyattacker.resources.redact import mask_secrets, shown
from pyattacker.resources.resource import DEAD, DEGRADED, READY, REVOKED, ResourceState

if TYPE_CHECKING:
    from pyattacker.resources.pool import Pool

__all__ = [
    "SLOW_WAIT_MS",
    "WAIT_WINDOW",
    "PoolStats",
    "add_usage",
    "note_wait",
    "selector_text",
    "snapshot",
    "stats",
    "warn_unmatched",
    "watch_deadlock",
]

#: A wait longer than this emits ``acquire.slow_wait``.
SLOW_WAIT_MS = 1000.0
#: How many recent wait samples ``stats()`` computes percentiles over.
WAIT_WINDOW = 512
#: Longest selector value text in an event (a selector may hold a large list).
_SELECTOR_TEXT_MAX = 200


class PoolStats(msgspec.Struct, kw_only=True):
    """Counters of one pool (optionally of the resources matching a selector)."""

    name: str
    kind: str | None
    total: int
    ready: int
    degraded: int
    dead: int
    revoked: int
    active: int
    capacity: int
    waiting: int
    leases_total: int
    ok_total: int
    failed_total: int
    leaked_total: int
    usage: dict[str, float]
    waits_total: int
    wait_ms_avg: float
    wait_ms_p50: float
    wait_ms_p95: float
    wait_ms_max: float

    @property
    def utilization(self) -> float:
        return round(self.active / self.capacity, 4) if self.capacity else 0.0


# -- waits -------------------------------------------------------------------------------------


def note_wait(
    pool: Pool, ms: float, selector: Mapping[str, Any] | None = None, resource_id: str | None = None
) -> None:
    """Record how long an acquisition waited (feeds ``stats()``; > 1 s emits ``acquire.slow_wait``)."""
    pool.waits_total += 1
    pool._waits.append(ms)
    if ms > SLOW_WAIT_MS and pool._listened():
        pool._emit("acquire.slow_wait", resource_id, {"waited_ms": ms, "selector": dict(selector or {})})


def watch_deadlock(
    pool: Pool, ctx: Any, selector: Mapping[str, Any] | None = None
) -> asyncio.TimerHandle | None:
    """Arm the deadlock hint when ``ctx`` already holds a lease from this pool and must wait.

    The caller cancels the returned handle when its wait ends.
    """
    warn_s = pool.deadlock_warn_s
    if ctx is None or not warn_s or warn_s <= 0:
        return None
    held = [
        lease.resource.id
        for lease in getattr(ctx, "held_leases", None) or ()
        if getattr(lease, "pool", None) == pool.name and not getattr(lease, "released", True)
    ]
    if not held:
        return None
    data = {
        "task": getattr(ctx, "task_name", None),
        "pipeline_id": getattr(ctx, "pipeline_id", None),
        "held": held,
        "selector": dict(selector or {}),
        "hint": (
            f"this task already holds {len(held)} lease(s) from pool {pool.name!r} and waits for"
            " another; if every holder does the same, nobody can proceed"
            " (release the first lease, or raise the pool's capacity)"
        ),
    }
    loop = asyncio.get_running_loop()
    return loop.call_later(warn_s, pool._emit, "acquire.suspected_deadlock", None, data)


def warn_unmatched(
    pool: Pool, ctx: Any = None, where: Any = None, selector: Mapping[str, Any] | None = None
) -> bool:
    """Emit ``acquire.waiting_unmatched`` when no resource of the pool matches the request.

    Such a wait ends only when a matching resource is published (dynamic pools start
    empty), which from outside looks like a hang; the event says what is being waited for.
    A waiting loop calls this before each wait until it returns True (the event was
    emitted), so a request gets at most one event, and a request leased at once never
    gets here. Whether a resource is free, busy, cooling down or dead does not matter:
    only a resource that could never serve the request counts as no match.
    """
    if not pool._listened() or _matches_any(pool, where, selector):
        return False
    pool._emit("acquire.waiting_unmatched", None, _unmatched_data(pool, ctx, where, selector))
    return True


def _matches_any(pool: Pool, where: Any, selector: Mapping[str, Any] | None) -> bool:
    """Whether any resource, in any state, matches; stops at the first (O(1) unfiltered)."""
    if not selector and where is None:
        return bool(pool._slots)
    return any(r.matches(selector, where) for r in pool._slots)


def _unmatched_data(pool: Pool, ctx: Any, where: Any, selector: Mapping[str, Any] | None) -> dict[str, Any]:
    """The ``acquire.waiting_unmatched`` data: plain text only, so any store can keep it."""
    text = selector_text(selector)
    asked = [", ".join(f"{key}={value}" for key, value in text.items())] if text else []
    if where is not None:
        asked.append("the where filter")
    n = len(pool._slots)
    found = (
        f"none of the {n} resource(s) of pool {pool.name!r} matches {' and '.join(asked)}"
        if n
        else f"pool {pool.name!r} has no resource yet"
    )
    return {
        "pool": pool.name,
        "selector": text,
        "where": where is not None,
        "resources": n,
        "task": getattr(ctx, "task_name", None),
        "pipeline_id": getattr(ctx, "pipeline_id", None),
        "hint": (
            f"{found}: this lease waits until a matching resource is published"
            " (check the selector, or publish such a resource)"
        ),
    }


def selector_text(selector: Mapping[str, Any] | None) -> dict[str, str]:
    """A selector as ``{key: repr(value)}``, secrets masked, long values cut.

    ``repr`` keeps ``1`` and ``'1'`` apart: a number in the selector where the resource has
    text (or the reverse) is a common reason for a selector to match nothing.
    """
    text: dict[str, str] = {}
    for key, value in (selector or {}).items():
        told = repr(value)
        if len(told) > _SELECTOR_TEXT_MAX:
            told = told[: _SELECTOR_TEXT_MAX - 1] + "…"
        text[str(key)] = told
    masked: dict[str, str] = mask_secrets(text)
    return masked


# -- counters ----------------------------------------------------------------------------------


def stats(pool: Pool, /, **selector: Any) -> PoolStats:
    """Counters over every resource (or those matching ``selector``) and recent waits."""
    now = pool.clock.now()
    refresh = pool._health.refresh
    chosen = [r for r in pool._slots if not selector or r.matches(selector)]
    counts: dict[ResourceState, int] = dict.fromkeys(ResourceState, 0)
    usage: dict[str, float] = {}
    for r in chosen:
        refresh(r, now)
        counts[r.state] += 1
        add_usage(usage, r.usage)
    waits = sorted(pool._waits)
    kinds = {r.kind for r in chosen}
    health = pool._health
    return PoolStats(
        name=pool.name,
        kind=pool.kind or (next(iter(kinds)) if len(kinds) == 1 else None),
        total=len(chosen),
        ready=counts[READY],
        degraded=counts[DEGRADED],
        dead=counts[DEAD],
        revoked=counts[REVOKED],
        active=sum(r.active for r in chosen),
        capacity=sum(r.capacity for r in chosen if r.state is not REVOKED),
        waiting=pool.waiting,
        leases_total=sum(r.leases_total for r in chosen) if selector else pool.leases_total,
        ok_total=sum(r.ok_total for r in chosen) if selector else health.ok_total,
        failed_total=sum(r.failed_total for r in chosen) if selector else health.failed_total,
        leaked_total=pool.leaked_total,
        usage=usage,
        waits_total=pool.waits_total,
        wait_ms_avg=round(sum(waits) / len(waits), 3) if waits else 0.0,
        wait_ms_p50=_percentile(waits, 50),
        wait_ms_p95=_percentile(waits, 95),
        wait_ms_max=waits[-1] if waits else 0.0,
    )


def snapshot(pool: Pool) -> list[dict[str, Any]]:
    """One row per resource for monitoring and the store (secrets masked)."""
    now = pool.clock.now()
    refresh = pool._health.refresh
    rows = []
    for r in pool._slots:
        refresh(r, now)
        rows.append(
            {
                "id": r.id,
                "kind": r.kind,
                "state": r.state.value,
                "active": r.active,
                "capacity": r.capacity,
                "consecutive_failures": r.consecutive_failures,
                "leases": r.leases_total,
                "failed": r.failed_total,
                "latency_ms_ema": None if r.latency_ms_ema is None else round(r.latency_ms_ema, 3),
                "blocked_until": r.blocked_until,
                "options": shown(r.options),
                "tags": shown(r.tags) if isinstance(r.tags, dict) else list(r.tags),
                "waited_budget_ms": round(r.waited_budget_ms, 3),
                "waited_slot_ms": round(r.waited_slot_ms, 3),
            }
        )
        if r.limits is not None:
            rows[-1]["limits"] = r.limits.view(now)
    return rows


def _percentile(ordered: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not ordered:
        return 0.0
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def add_usage(into: dict[str, float], usage: Mapping[str, float]) -> None:
    """Add ``usage`` counters into ``into``; a counter that is not a number is a ValueError."""
    for key, value in usage.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"usage counter {key!r} must be a number, got {value!r}")
        into[key] = into.get(key, 0) + value
