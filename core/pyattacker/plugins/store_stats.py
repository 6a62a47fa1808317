"""Run statistics computed from any store's paged reads: ``StoreBase.stats``'s default.

A store that can aggregate natively (SQLite) overrides ``stats`` with the same shape; the
contract suite in ``pyattacker.testing`` checks the two agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pyattacker.plugins.paging import iter_rows

if TYPE_CHECKING:
    from pyattacker.plugins.store_base import StoreBase

__all__ = ["compute_stats", "duration_summary", "percentile"]


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


def compute_stats(store: StoreBase, run_id: str | None = None) -> dict[str, Any]:
    """Stats by scanning every row (memory stays flat: keyset pages; cost: a full scan)."""
    by_state, durations, _attempts = store.pipeline_totals(run_id)
    by_name: dict[str, dict[str, int]] = {}
    for t in iter_rows(store, "tasks", run_id=run_id):  # every task row of the run
        states = by_name.setdefault(t.name, {})
        states[t.state] = states.get(t.state, 0) + 1
    return {
        "pipelines": {
            "total": sum(by_state.values()),
            "by_state": dict(sorted(by_state.items())),
            "duration_ms": duration_summary(durations),
        },
        "tasks": {"by_name": {name: dict(sorted(s.items())) for name, s in sorted(by_name.items())}},
        "attempts_total": store.count_rows("attempts", run_id),
        "events_total": store.count_rows("events", run_id),
        "handoffs_total": store.count_handoffs(run_id),
    }
