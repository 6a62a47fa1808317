"""The dashboard's query parameters and its time series (``/timeline``).

``/pipelines`` takes filters (``state``, ``task``, ``error_class``, ``q``) and an order
(``sort``, ``order``) that become one ``PipelineQuery``; its ``after`` cursor is the keyset
``(sort value, pipeline_id)`` of the previous page's last row, so every page is one bounded read
however deep. ``/timeline`` buckets the run's attempts by when they ended, over the run's whole
span (a bucket width from ``WIDTHS`` giving at most ``MAX_BUCKETS`` buckets, so a run of half a
second gets as many points as a run of a day), counted by the store (in SQL for SQLite).
"""

from __future__ import annotations

import time
from typing import Any

from pyattacker.model import PIPELINE_STATES
from pyattacker.plugins.store_base import StoreBase
from pyattacker.plugins.store_queries import PIPELINE_SORTS, PipelineQuery, pipeline_sort_value, sample_step
from pyattacker.views.common import RunChoice

__all__ = ["MAX_BUCKETS", "WIDTHS", "bucket_width", "pipeline_query", "sort_key", "timeline"]

MAX_BUCKETS = 120
#: bucket widths (seconds) a timeline picks from: the smallest that fits the span
WIDTHS = (
    0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0,
    120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0, 21600.0, 43200.0, 86400.0,
)  # fmt: skip
#: the longest ``q`` (text) filter: longer text is a mistake, not a search
MAX_TEXT = 200
_ORDERS = ("asc", "desc")


class ParamError(ValueError):
    """A query parameter that cannot be used: the message names it (the API answers 400)."""


def _choice(params: dict[str, str], name: str, allowed: tuple[str, ...], default: str) -> str:
    raw = params.get(name) or default
    if raw not in allowed:
        raise ParamError(f"parameter {name!r} must be one of {', '.join(allowed)}")
    return raw


def _text(params: dict[str, str], name: str) -> str | None:
    raw = params.get(name) or None
    if raw is not None and len(raw) > MAX_TEXT:
        raise ParamError(f"parameter {name!r} must be at most {MAX_TEXT} characters")
    return raw


def pipeline_query(params: dict[str, str], run_id: str | None) -> PipelineQuery:
    """The ``/pipelines`` filters and order; a bad value is a ``ParamError`` naming it."""
    state = params.get("state") or None
    if state is not None and state not in PIPELINE_STATES:
        raise ParamError(f"parameter 'state' must be one of {', '.join(PIPELINE_STATES)}")
    return PipelineQuery(
        run_id=run_id,
        state=state,
        task=_text(params, "task"),
        error_class=_text(params, "error_class"),
        text=_text(params, "q"),
        sort=_choice(params, "sort", PIPELINE_SORTS, "created"),
        descending=_choice(params, "order", _ORDERS, "asc") == "desc",
    )


def sort_key(p: Any, query: PipelineQuery) -> list[Any]:
    """The cursor values of ``p`` (its keyset in ``query``'s order)."""
    return [pipeline_sort_value(p, query.sort), p.pipeline_id]


def bucket_width(span_s: float) -> float:
    """The smallest of ``WIDTHS`` that cuts ``span_s`` into at most ``MAX_BUCKETS`` buckets."""
    for width in WIDTHS:
        if span_s / width <= MAX_BUCKETS:
            return width
    return span_s / MAX_BUCKETS


def _span(store: StoreBase, choice: RunChoice) -> tuple[float, float] | None:
    """``(start, end)`` of the run (every run for ``all``); a running one ends now."""
    runs = [choice.run] if choice.run is not None else store.runs()
    if not runs:
        return None
    now = time.time()
    start = min(r.started_at for r in runs)
    end = max(now if r.status == "running" else (r.ended_at or r.heartbeat_at or r.started_at) for r in runs)
    return start, max(end, start)


def timeline(store: StoreBase, choice: RunChoice) -> dict[str, Any]:
    """Throughput, error rate and latency percentiles per time bucket over the run's span; every
    bucket of the span is listed (an empty one has no attempts and no percentiles)."""
    span = _span(store, choice)
    if span is None:
        return {
            "run_id": choice.run_id,
            "start": None,
            "end": None,
            "width_s": None,
            "buckets": [],
            "percentiles_of_one_in": 1,
            "counts_of_one_in": 1,
        }
    start, end = span
    width = bucket_width(end - start)
    found = {b.index: b for b in store.attempt_timeline(choice.run_id, start, width)}
    counted = max((b.counted_one_in for b in found.values()), default=1)
    step = counted if counted > 1 else sample_step(sum(b.attempts for b in found.values()))
    # every bucket of the span, and any attempt outside it (a clock that stepped) as it is
    indices = sorted(set(range(int((end - start) / width) + 1)) | set(found))
    buckets = []
    for i in indices:
        b = found.get(i)
        row: dict[str, Any] = {"t": start + i * width, "attempts": 0, "failed": 0, "per_s": 0.0}
        row.update(error_rate=None, p50_ms=None, p95_ms=None, p99_ms=None, max_ms=None)
        if b is not None:
            row.update(attempts=b.attempts, failed=b.failed, per_s=b.attempts / width)
            row.update(error_rate=b.failed / b.attempts, p50_ms=b.p50_ms, p95_ms=b.p95_ms)
            row.update(p99_ms=b.p99_ms, max_ms=b.max_ms)
        buckets.append(row)
    return {
        "run_id": choice.run_id,
        "start": start,
        "end": end,
        "width_s": width,
        "percentiles_of_one_in": step,
        "counts_of_one_in": counted,
        "buckets": buckets,
    }
