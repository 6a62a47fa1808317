"""Two runs side by side, with what changed: ``pyattacker compare`` and the viewer's compare page.

Each side is read from aggregates the store computes (pipeline counts per state, chain
identities, per-task durations, metric summaries, the run row's counters), not from a fold
of every pipeline row. ``rows`` is every number of both sides with its delta (``b - a``), so
"did my change help" is one table.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from pyattacker.errors import ConfigError
from pyattacker.model import RunRecord
from pyattacker.plugins.store_base import StoreBase
from pyattacker.plugins.store_stats import percentile
from pyattacker.views.common import ALL_RUNS, choose_run, read_only_store
from pyattacker.views.runs import run_duration_s

__all__ = ["PERCENTILES", "compare_in_store", "compare_runs", "compare_sides", "number_rows", "read_side"]

#: the latency percentiles compared per task
PERCENTILES = (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))


def read_side(store: StoreBase, run: RunRecord) -> dict[str, Any]:
    """One run's facts for a comparison (JSON-ready)."""
    note = store.run_note(run.run_id)
    counts = store.run_state_counts().get(run.run_id, {})
    stats = run.stats or {}
    return {
        "store": store.location,
        "run_id": run.run_id,
        "label": run.label,
        "status": run.status,
        "started_at": run.started_at,
        "duration_s": run_duration_s(run, time.time()),
        "notes": note.text if note is not None else "",
        "notes_revision": note.revision if note is not None else 0,
        "config": run.config,
        "identities": store.spec_digests(run.run_id),
        "pipelines": {"total": sum(counts.values()), **dict(sorted(counts.items()))},
        "tasks": _tasks(store, run.run_id),
        "attempts": int(stats.get("attempts", store.count_rows("attempts", run.run_id))),
        "retries": int(stats.get("retries", 0)),
        "usage": _usage(store, run.run_id),
        "metrics": store.metric_summary(run.run_id),
    }


def _tasks(store: StoreBase, run_id: str) -> dict[str, dict[str, Any]]:
    """``{task: {state counts..., count, p50_ms, p95_ms, p99_ms, max_ms}}`` of one run."""
    out: dict[str, dict[str, Any]] = {}
    for name, states in store.task_counts(run_id).items():
        out[name] = dict(sorted(states.items()))
    for name, durations in store.task_durations(run_id).items():
        entry = out.setdefault(name, {})
        entry["count"] = len(durations)
        for key, p in PERCENTILES:
            entry[f"{key}_ms"] = percentile(durations, p)
        entry["max_ms"] = percentile(durations, 1.0)
    return dict(sorted(out.items()))


def _usage(store: StoreBase, run_id: str) -> dict[str, float]:
    """Usage counters (``lease.report(usage=...)``: tokens, ...) summed over the run's resources,
    with the leases and failures they served."""
    total: dict[str, float] = {}
    for row in store.resources(run_id):
        counters = dict(row.stats.get("usage") or {})
        counters.update(leases=row.stats.get("leases", 0), failed=row.stats.get("failed", 0))
        for key, value in counters.items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                total[key] = total.get(key, 0) + value
    return dict(sorted(total.items()))


def _numbers(side: Mapping[str, Any]) -> Iterator[tuple[str, Any, bool]]:
    """Every comparable number of a side, by a dotted name, and whether it is a count (absent
    from the other side: 0 there, not unknown)."""
    yield "duration_s", side["duration_s"], False
    for state, n in side["pipelines"].items():
        yield f"pipelines.{state}", n, True
    yield "attempts", side["attempts"], True
    yield "retries", side["retries"], True
    for name, entry in side["tasks"].items():
        for key, value in entry.items():
            yield f"tasks.{name}.{key}", value, not key.endswith("_ms")
    for key, value in side["usage"].items():
        yield f"usage.{key}", value, True
    for name, entry in side["metrics"].items():
        for key, value in entry.items():
            yield f"metrics.{name}.{key}", value, key == "count"


def _delta(a: Any, b: Any) -> float | None:
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (a, b))
    return round(b - a, 6) if numeric else None


def number_rows(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``[{name, a, b, delta}]`` over the numbers of either side, in A's order then B's new
    ones; ``delta`` is ``b - a`` when both are numbers. A count one side lacks is 0 there; any
    other number it lacks is None."""
    left = {name: value for name, value, _ in _numbers(a)}
    right = {name: value for name, value, _ in _numbers(b)}
    counts = {name for side in (a, b) for name, _, is_count in _numbers(side) if is_count}
    names = list(left) + [n for n in right if n not in left]
    rows = []
    for n in names:
        missing = 0 if n in counts else None
        va, vb = left.get(n, missing), right.get(n, missing)
        rows.append({"name": n, "a": va, "b": vb, "delta": _delta(va, vb)})
    return rows


def _flat(value: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, Mapping) and value:
        for key, inner in value.items():
            yield from _flat(inner, f"{prefix}.{key}" if prefix else str(key))
    else:
        yield prefix, value


def config_changes(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``[{key, a, b}]`` of the config fields (dotted) that differ; absent is None."""
    left, right = dict(_flat(a)), dict(_flat(b))
    keys = sorted(set(left) | set(right))
    return [{"key": k, "a": left.get(k), "b": right.get(k)} for k in keys if left.get(k) != right.get(k)]


def _open_side(location: str, run_id: str | None) -> dict[str, Any]:
    if run_id == ALL_RUNS:
        raise ConfigError("compare takes one run per side, not `all` (`pyattacker runs` lists them)")
    with read_only_store(location) as store:
        choice = choose_run(store, run_id)
        if choice.run is None:
            raise ConfigError(f"store {location}: no run to compare (it holds none)")
        return read_side(store, choice.run)


def compare_sides(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The comparison of two sides ``read_side`` read."""
    return {
        "schema_version": 1,
        "a": a,
        "b": b,
        "config_changes": config_changes(a["config"], b["config"]),
        "same_identities": set(a["identities"]) == set(b["identities"]),
        "rows": number_rows(a, b),
    }


def compare_in_store(store: StoreBase, run_a: str, run_b: str) -> dict[str, Any]:
    """Two runs of one open store (``ConfigError`` naming a run it does not have)."""
    sides = []
    for run_id in (run_a, run_b):
        if run_id == ALL_RUNS:
            raise ConfigError("compare takes one run per side, not `all`")
        run = store.get_run(run_id)
        if run is None:
            raise ConfigError(f"store {store.location}: no run {run_id!r}")
        sides.append(read_side(store, run))
    return compare_sides(*sides)


def compare_runs(sides: Sequence[tuple[str, str | None]]) -> dict[str, Any]:
    """Compare two ``(store location, run id or None for its latest run)`` sides."""
    if len(sides) != 2:
        raise ValueError("compare takes exactly two sides")
    a, b = (_open_side(location, run_id) for location, run_id in sides)
    return compare_sides(a, b)
