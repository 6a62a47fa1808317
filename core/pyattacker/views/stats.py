"""Run statistics: one shape for every store, with a generic path and a fast path.

``compute_stats`` works on any store through paged reads (memory stays flat, cost is a full
scan). Stores that can aggregate natively (SQLite) offer ``store.stats(run_id)`` with the same
shape; ``store_stats`` picks whichever is available so callers never care.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pyattacker.store.base import Store, iter_rows

__all__ = [
    "compute_stats",
    "count_rows",
    "dataset_standing",
    "duration_summary",
    "percentile",
    "store_stats",
]


def percentile(sorted_values: Sequence[float], p: float) -> float | None:
    """Sorted value at index ``min(n-1, int(p*(n-1)))`` rounded to 3 dp; None when empty."""
    n = len(sorted_values)
    if n == 0:
        return None
    return round(float(sorted_values[min(n - 1, int(p * (n - 1)))]), 3)


def duration_summary(sorted_ms: Sequence[float]) -> dict[str, float | None]:
    """``{"p50", "p95", "max"}`` of already sorted durations in milliseconds."""
    return {
        "p50": percentile(sorted_ms, 0.5),
        "p95": percentile(sorted_ms, 0.95),
        "max": percentile(sorted_ms, 1.0),
    }


def count_rows(store: Store, kind: str, run_id: str | None = None) -> int:
    """How many rows of ``kind`` ``page`` would return for ``run_id``: the store's optional
    ``count_rows`` when it has one (a count in the store), else by paging through them."""
    fast = getattr(store, "count_rows", None)
    if callable(fast):
        return int(fast(kind, run_id))
    return sum(1 for _ in iter_rows(store, kind, run_id=run_id))


def count_handoffs(store: Store, run_id: str | None = None) -> int:
    """Handoffs (``forward`` ledger rows) committed by ``run_id`` (None: by every run); 0 for a
    store without a control ledger."""
    count = getattr(store, "count_handoffs", None)
    return int(count(run_id)) if callable(count) else 0


def compute_stats(store: Store, run_id: str | None = None) -> dict[str, Any]:
    """Stats by scanning every row (for stores without a native ``stats``)."""
    by_state: dict[str, int] = {}
    durations: list[float] = []
    total = 0
    for p in iter_rows(store, "pipelines", run_id=run_id):
        total += 1
        by_state[p.state] = by_state.get(p.state, 0) + 1
        if p.finished_at is not None and p.started_at is not None:
            durations.append((p.finished_at - p.started_at) * 1000.0)
    by_name: dict[str, dict[str, int]] = {}
    for t in iter_rows(store, "tasks", run_id=run_id):
        states = by_name.setdefault(t.name, {})
        states[t.state] = states.get(t.state, 0) + 1
    durations.sort()
    return {
        "pipelines": {
            "total": total,
            "by_state": dict(sorted(by_state.items())),
            "duration_ms": duration_summary(durations),
        },
        "tasks": {"by_name": {name: dict(sorted(s.items())) for name, s in sorted(by_name.items())}},
        "attempts_total": count_rows(store, "attempts", run_id),
        "events_total": count_rows(store, "events", run_id),
        "handoffs_total": count_handoffs(store, run_id),
    }


def store_stats(store: Store, run_id: str | None = None) -> dict[str, Any]:
    """The store's native ``stats`` when it has one, else ``compute_stats``."""
    fast = getattr(store, "stats", None)
    if callable(fast):
        result: dict[str, Any] = fast(run_id)
        return result
    return compute_stats(store, run_id)


def dataset_standing(store: Store) -> dict[str, Any]:
    """``{"total", "by_state"}`` of every pipeline row of the store, whichever run wrote it: where
    the dataset stands (a store holds each pipeline once, in its current state). From the
    store's ``pipeline_totals`` when it has them, else by paging through the rows."""
    totals = getattr(store, "pipeline_totals", None)
    by_state: dict[str, int] = {}
    if callable(totals):
        by_state = dict(totals(None)[0])
    else:
        for p in iter_rows(store, "pipelines"):
            by_state[p.state] = by_state.get(p.state, 0) + 1
    return {"total": sum(by_state.values()), "by_state": dict(sorted(by_state.items()))}
