"""Views over a suite directory: the side-by-side comparison of its experiments.

A suite directory (``manifest.json`` + the ``combined`` layout's ``state.db``, or the
``by_experiment`` layout's stores) is read like a store; each pipeline row belongs to the
experiment whose id prefix it carries (``SuiteManifest.experiment_of``).
``compare_experiments`` folds the pipeline rows and the application metrics in one pass each
into one row per experiment: states, p50/p95 latency, token and cost totals when tasks report
them as metrics, and every other metric's mean.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from typing import Any

from pyattacker.errors import ConfigError
from pyattacker.plugins.store_stats import percentile
from pyattacker.store.suite_dir import SuiteManifest, is_suite_dir, read_manifest
from pyattacker.views.common import ALL_RUNS, read_only_store

__all__ = [
    "SUM_METRICS",
    "compare_experiments",
    "comparison_lines",
    "experiment_filter",
    "open_suite",
    "suite_catalog",
]

#: metrics that are totals (usage): summed per experiment; every other number is averaged
SUM_METRICS = ("tokens", "cost")


def open_suite(location: str) -> tuple[SuiteManifest, str] | None:
    """``(manifest, the store location a view opens)`` of a suite directory, or None for
    anything else: the ``combined`` layout's ``state.db``; for ``by_experiment`` the directory
    itself, which opens as one store over every member's (``SuiteStore``)."""
    if not is_suite_dir(location):
        return None
    manifest = read_manifest(location)
    catalog = os.path.join(location, manifest.catalog)
    if not os.path.exists(catalog):
        raise ConfigError(f"{location}: suite directory without its store {manifest.catalog} (never run?)")
    return manifest, (catalog if manifest.layout == "combined" else location)


def suite_catalog(location: str) -> str:
    """The store a view of ``location`` reads: a suite directory's catalog, else ``location``."""
    suite = open_suite(location)
    return location if suite is None else suite[1]


def experiment_filter(manifest: SuiteManifest, experiments: Sequence[str]) -> Callable[[str], bool] | None:
    """A test of pipeline ids for ``--experiment`` (None: every experiment, no test at all)."""
    if not experiments:
        return None
    prefixes = tuple(manifest.experiments[e]["prefix"] for e in manifest.select(experiments))
    return lambda pipeline_id: pipeline_id.startswith(prefixes)


def _blank(manifest: SuiteManifest, exp_id: str) -> dict[str, Any]:
    entry = manifest.experiments[exp_id]
    return {
        "experiment_id": exp_id,
        "label": entry.get("label", ""),
        "source_error": entry.get("source_error"),
        "total": 0,
        "by_state": {},
        "_ms": [],
    }


def _fold_metrics(
    rows: dict[str, dict[str, Any]], manifest: SuiteManifest, store: Any, run: str | None
) -> None:
    """Each experiment's pipeline-scope metrics: the latest value per (pipeline, name), then
    summed (usage) or averaged (anything else numeric) per experiment."""
    latest: dict[tuple[str, str], tuple[float, Any]] = {}
    for m in store.metrics(run_id=run):
        if not m.pipeline_id:
            continue
        known = latest.get((m.pipeline_id, m.name))
        if known is None or m.updated_at >= known[0]:
            latest[(m.pipeline_id, m.name)] = (m.updated_at, m.value)
    sums: dict[tuple[str, str], list[float]] = {}
    for (pid, name), (_ts, value) in latest.items():
        exp_id = manifest.experiment_of(pid)
        if exp_id not in rows or isinstance(value, bool) or not isinstance(value, int | float):
            continue
        if not math.isfinite(value):
            continue
        sums.setdefault((exp_id, name), []).append(float(value))
    for (exp_id, name), values in sorted(sums.items()):
        total = sum(values)
        value = total if name in SUM_METRICS else total / len(values)
        rows[exp_id]["metrics"][name] = round(value, 6)


def compare_experiments(
    location: str, *, run_id: str | None = None, experiments: Sequence[str] = ()
) -> tuple[SuiteManifest, list[dict[str, Any]]]:
    """One row per experiment of the suite directory ``location`` (``run_id`` None or ``all``:
    every run, the cumulative view): ``experiment_id, label, total, succeeded, failed,
    by_state, p50_ms, p95_ms, metrics``."""
    suite = open_suite(location)
    if suite is None:
        raise ConfigError(f"{location}: not a suite directory (no manifest.json)")
    manifest, catalog = suite
    wanted = manifest.select(experiments)
    rows = {e: _blank(manifest, e) for e in wanted}
    run = None if run_id in (None, ALL_RUNS) else run_id
    with read_only_store(catalog) as store:
        if run is not None and store.get_run(run) is None:
            raise ConfigError(f"--run-id: no run {run!r} in {location}")
        for pid, state, started, finished, _tries in store.pipeline_summaries(run):
            row = rows.get(manifest.experiment_of(pid) or "")
            if row is None:
                continue
            row["total"] += 1
            row["by_state"][state] = row["by_state"].get(state, 0) + 1
            if started is not None and finished is not None:
                row["_ms"].append((finished - started) * 1000.0)
        for row in rows.values():
            row["metrics"] = {}
        _fold_metrics(rows, manifest, store, run)
    out = []
    for row in rows.values():
        durations = sorted(row.pop("_ms"))
        row["succeeded"] = row["by_state"].get("succeeded", 0)
        row["failed"] = row["by_state"].get("failed", 0)
        row["p50_ms"] = percentile(durations, 0.5)
        row["p95_ms"] = percentile(durations, 0.95)
        out.append(row)
    return manifest, out


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}ms"


def comparison_lines(manifest: SuiteManifest, rows: list[dict[str, Any]]) -> list[str]:
    """The experiments side by side, one line each, columns aligned."""
    names = sorted({name for row in rows for name in row["metrics"]})
    header = ["experiment", "total", "succeeded", "failed", "p50", "p95", *names, "label"]
    table = [header]
    for row in rows:
        table.append(
            [
                row["experiment_id"],
                str(row["total"]),
                str(row["succeeded"]),
                str(row["failed"]),
                _ms(row["p50_ms"]),
                _ms(row["p95_ms"]),
                *(_metric(row["metrics"].get(name)) for name in names),
                row["label"] + (f" [source failed: {row['source_error']}]" if row["source_error"] else ""),
            ]
        )
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    lines = [f"suite {manifest.suite_id} ({len(rows)} experiment(s))"]
    for r in table:
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(r, widths, strict=True)).rstrip())
    return lines


def _metric(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:.4g}"
    return str(int(value)) if isinstance(value, float) else str(value)
