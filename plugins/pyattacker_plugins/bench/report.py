"""A ``BenchReport`` as a text table (stdout), a JSON document and a markdown file.

The three say the same thing: per metric, each algorithm's mean ± stdev (min/max) over the
seeds, the winners marked ``*``, and the notes that explain a missing winner. JSON also holds
every run's raw numbers, including those of algorithms the table shows as N/A.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from .api import BenchReport, default_algorithms
from .driver import RunResult
from .metrics import METRICS, NEUTRAL, Metric
from .scenario import EndpointSpec, Scenario
from .winners import ELIGIBLE_SHARE, Summary
from .world import outage_windows

__all__ = ["to_json", "to_markdown", "to_table"]

GATED = "†"


def fmt(value: float | None, unit: str = "") -> str:
    """A number short enough for a table cell: ratios with 3 decimals, milliseconds whole,
    anything else with about four significant digits (no exponent, no trailing zeros)."""
    if value is None:
        return "-"
    if unit == "ratio":
        return f"{value:.3f}"
    if unit == "ms":
        return f"{value:.0f}"
    size = abs(value)
    if size >= 100:
        return f"{value:.0f}"
    text = f"{value:.1f}" if size >= 10 else f"{value:.2f}" if size >= 1 else f"{value:.3f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _cell(summary: Summary, unit: str) -> str:
    if summary.mean is None:
        return "-"
    if summary.n == 1:
        return fmt(summary.mean, unit)
    return (
        f"{fmt(summary.mean, unit)} ± {fmt(summary.stdev, unit)}"
        f" ({fmt(summary.min, unit)}/{fmt(summary.max, unit)})"
    )


def _better(metric: Metric) -> str:
    return metric.direction + (GATED if metric.needs_completion else "")


def _rows(report: BenchReport) -> tuple[list[str], list[list[str]]]:
    names = list(report.algorithms)
    head = ["metric", "unit", "better", *names]
    rows = []
    for metric in METRICS:
        verdict = report.verdicts[metric.name]
        row = [metric.name, metric.unit, _better(metric)]
        for name in names:
            result = report.algorithms[name]
            if not result.suited:
                row.append("N/A")
                continue
            mark = " *" if name in verdict.winners else ""
            row.append(_cell(result.summary[metric.name], metric.unit) + mark)
        rows.append(row)
    return head, rows


def _settings(report: BenchReport) -> str:
    plan = report.plan
    s = plan.scenario
    clock = "virtual" if plan.clock == "virtual" else f"real x{plan.speedup:g}"
    seeds = ", ".join(str(x) for x in plan.seeds)
    return (
        f"scenario {s.name}: {s.jobs} jobs x {s.steps} steps x {s.calls} calls, {s.concurrency} workers,"
        f" horizon {s.horizon_s:g}s, clock {clock}, seeds {seeds}"
    )


def _notes(report: BenchReport) -> list[str]:
    notes = [
        f"mean ± stdev (min/max) over {len(report.plan.seeds)} seed(s); * = winner: the best mean, and"
        " every mean within max(1% of it, 2 x SE of the paired per-seed differences); no composite score",
    ]
    suited = [a for a, r in report.algorithms.items() if r.suited]
    if report.baseline is not None:
        leader = max(suited, key=lambda a: report.algorithms[a].summary["completion"].mean or 0.0)
        out = [a for a in suited if a not in report.eligible]
        eligible = ", ".join(report.eligible) or "none"
        line = (
            f"{GATED} compared only among algorithms completing at least {ELIGIBLE_SHARE:.0%} of the best"
            f" mean completion ({fmt(report.baseline, 'ratio')}, {leader}): {eligible}"
        )
        if out:
            shown = ", ".join(
                f"{a} ({fmt(report.algorithms[a].summary['completion'].mean, 'ratio')})" for a in out
            )
            line += f"; not eligible: {shown}"
        notes.append(line)
    quiet: dict[str, list[str]] = {}
    for metric in METRICS:
        verdict = report.verdicts[metric.name]
        if metric.direction != NEUTRAL and verdict.note and not verdict.winners:
            quiet.setdefault(verdict.note, []).append(metric.name)
    for note, metrics in quiet.items():
        notes.append(f"no winner for {', '.join(metrics)}: {note}")
    if len(report.plan.seeds) == 1:
        notes.append("one seed: the best mean wins outright (no measure of noise; use --seeds 3 or more)")
    for name, result in report.algorithms.items():
        if not result.suited:
            notes.append(f"N/A {name}: {result.reason} (its raw numbers are in --json)")
    for name, why in report.plan.skipped.items():
        notes.append(f"skipped {name}: {why}")
    held = [
        f"{name} seed {run.seed}: {run.leases_active_at_end}"
        for name, result in report.algorithms.items()
        for run in result.runs
        if run.leases_active_at_end
    ]
    if held:
        notes.append(f"WARNING: leases still held at the end ({'; '.join(held)}): a lease-safety bug")
    return notes


def _aligned(head: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    return [line(head), line(["-" * w for w in widths]), *(line(r) for r in rows)]


def _stacked(head: list[str], rows: list[list[str]]) -> list[str]:
    """The table as one block per metric (its unit and direction, then one line per algorithm):
    as narrow as its longest cell, for a terminal or pipe too narrow for the table."""
    names = head[3:]
    pad = max(len(n) for n in names) if names else 0
    out: list[str] = []
    for metric, unit, better, *cells in rows:
        out.append(f"{metric} ({unit}, better: {better})")
        out.extend(f"  {name.ljust(pad)}  {cell}".rstrip() for name, cell in zip(names, cells, strict=True))
    return out


def _wrapped(lines: list[str], width: int) -> list[str]:
    """Prose lines wrapped at spaces only: a name or number is never split."""
    import textwrap  # here: only a narrow table wraps its notes

    out: list[str] = []
    for line in lines:
        out.extend(
            textwrap.wrap(line, width, break_long_words=False, break_on_hyphens=False, subsequent_indent="  ")
            or [""]
        )
    return out


def to_table(report: BenchReport, width: int | None = None) -> str:
    """The text table printed on stdout. With ``width`` (the terminal's, or 80 in a pipe), a
    table wider than that is printed one metric at a time and the notes are wrapped, so nothing
    is cut or folded mid-number (``--json`` has every figure, unrounded)."""
    head, rows = _rows(report)
    table = _aligned(head, rows)
    if width is None or max(len(line) for line in table) <= width:
        lines = [_settings(report), "", *table, "", *_notes(report)]
        return "\n".join(lines) + "\n"
    lines = [*_wrapped([_settings(report)], width), "", *_stacked(head, rows), ""]
    lines += _wrapped(_notes(report), width)
    return "\n".join(lines) + "\n"


def _summary_dict(summary: Summary) -> dict[str, Any]:
    return dataclasses.asdict(summary)


def _plain(value: Any) -> Any:
    """Tuples and read-only mappings as JSON lists and objects."""
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


def _scenario_json(s: Scenario) -> dict[str, Any]:
    """The scenario's settings; ``pools``, ``outages``, ``warm_factor`` and ``algorithm_params``
    only when the scenario uses them (a one-pool world keeps its plain shape)."""
    data: dict[str, Any] = {
        "name": s.name,
        "description": s.description,
        "jobs": s.jobs,
        "steps": s.steps,
        "calls": s.calls,
        "concurrency": s.concurrency,
        "horizon_s": s.horizon_s,
        "retry": s.retry.fingerprint(),
        "endpoints": [dataclasses.asdict(e) for e in s.endpoints],
        "unsuited": dict(s.unsuited),
    }
    if s.pools:
        data["pools"] = [_plain(dataclasses.asdict(p)) for p in s.pools]
    if s.outages:
        data["outages"] = [_plain(dataclasses.asdict(o)) for o in s.outages]
    if s.warm_factor != 1.0:
        data["warm_factor"] = s.warm_factor
    if s.algorithm_params:
        data["algorithm_params"] = _plain(s.algorithm_params)
    return data


def _run_json(s: Scenario, run: RunResult, metrics: dict[str, float | None]) -> dict[str, Any]:
    data: dict[str, Any] = {
        "seed": run.seed,
        "metrics": metrics,
        "endpoints": run.endpoints,
        "retry_decisions": run.decisions,
        "error_classes": run.error_classes,
    }
    if s.outages:  # when each outage happened on this seed
        data["outages"] = [[start, end] for _, start, end in outage_windows(s, run.seed)]
    return data


def to_json(report: BenchReport) -> dict[str, Any]:
    """The full report as plain JSON values (every number; ``wall_s`` is the only real-time one)."""
    plan = report.plan
    s = plan.scenario
    return {
        "scenario": _scenario_json(s),
        "seeds": list(plan.seeds),
        "clock": plan.clock,
        "speedup": plan.speedup,
        "wall_budget_s": plan.wall_budget_s,
        "metrics": [dataclasses.asdict(m) for m in METRICS],
        "completion_baseline": report.baseline,
        "eligible": list(report.eligible),
        "algorithms": {
            name: {
                "suited": result.suited,
                "unsuited_reason": result.reason,
                "summary": {k: _summary_dict(v) for k, v in result.summary.items()},
                "runs": [
                    _run_json(s, run, metrics)
                    for run, metrics in zip(result.runs, result.metrics, strict=True)
                ],
            }
            for name, result in report.algorithms.items()
        },
        "winners": {
            name: {
                "winners": list(v.winners),
                "best": v.best,
                "competitors": list(v.competitors),
                "note": v.note,
            }
            for name, v in report.verdicts.items()
        },
        "skipped": dict(plan.skipped),
        "wall_s": report.wall_s,
    }


def _md(cells: list[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def _md_table(head: list[str], rows: list[list[str]]) -> list[str]:
    return [_md(head), _md(["---"] * len(head)), *(_md(r) for r in rows)]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _pct(part: float, whole: float | None) -> str:
    return f"{part / whole:.1%}" if whole else "-"


def _admission_row(
    endpoint: EndpointSpec, runs: list[RunResult], total: float, s: Scenario, pools: dict[str, str]
) -> list[str]:
    def avg(key: str) -> float:
        return _mean([float(run.endpoints[endpoint.name][key]) for run in runs])

    requests = avg("requests")
    admitted = avg("admitted")
    extra = []
    if s.outages:
        extra.append(_pct(avg("down"), requests))
    if s.warm_factor != 1.0:
        extra.append(_pct(avg("warm"), admitted))
    name = f"{endpoint.name} ({pools[endpoint.name]})" if s.pools else endpoint.name
    return [
        name,
        fmt(requests),
        _pct(requests, total),
        _pct(admitted, requests),
        _pct(avg("refused"), requests),
        _pct(avg("errors"), admitted),
        fmt(avg("timeouts")),
        _pct(avg("overloaded"), admitted),
        fmt(avg("tokens_used")),
        _pct(avg("tokens_used"), endpoint.quota_tokens),
        *extra,
    ]


def _admission(report: BenchReport) -> list[str]:
    s = report.plan.scenario
    explain = (
        "Means per run over the seeds. share: of all requests; admitted and refused: of the"
        " endpoint's requests; errors and overloaded (served beyond the endpoint's current"
        " capacity, so slower): of its admitted requests; of quota: tokens spent / declared quota."
    )
    if s.outages:
        explain += " down: of the endpoint's requests, those that met an outage (a 503, not admitted)."
    if s.warm_factor != 1.0:
        explain += (
            " warm: of its admitted requests, those that found their job's session there"
            f" (served at x{s.warm_factor:g} of its latency)."
        )
    lines = ["## Per-endpoint admission", "", explain]
    head = [
        "endpoint (pool)" if s.pools else "endpoint",
        "requests",
        "share",
        "admitted",
        "refused (429)",
        "errors",
        "timeouts",
        "overloaded",
        "tokens",
        "of quota",
    ]
    if s.outages:
        head.append("down")
    if s.warm_factor != 1.0:
        head.append("warm")
    pools = {e: p.name for p in s.pool_layout() for e in p.endpoints}
    for name, result in report.algorithms.items():
        if not result.runs:
            continue
        tag = "" if result.suited else " (N/A: unsuited)"
        lines += ["", f"### {name}{tag}", ""]
        total = _mean([float(sum(e["requests"] for e in run.endpoints.values())) for run in result.runs])
        rows = [_admission_row(endpoint, result.runs, total, s, pools) for endpoint in s.endpoints]
        lines += _md_table(head, rows)
    return lines


def to_markdown(report: BenchReport) -> str:
    """The report as markdown: the table, the notes and each endpoint's admission."""
    head, rows = _rows(report)
    s = report.plan.scenario
    lines = [f"# bench: {s.name}", "", _settings(report) + ".", "", s.description + ".", ""]
    lines += _md_table(head, rows)
    lines += ["", *(f"- {note}" for note in _notes(report)), ""]
    lines += _admission(report)
    return "\n".join(lines) + "\n"


def listing(registry_names: list[str]) -> str:
    """``--list``: every scenario, every installed algorithm, every metric with unit and direction."""
    from .scenario import get_scenario, scenario_names  # only for --list

    lines = ["scenarios:"]
    for name in scenario_names():
        s = get_scenario(name)
        lines.append(f"  {name}: {s.description}")
        if s.pools:
            where = "pools: " + "; ".join(f"{p.name} ({', '.join(p.endpoints)})" for p in s.pools)
        else:
            where = f"endpoints: {', '.join(e.name for e in s.endpoints)}"
        lines.append(
            f"    {s.jobs} jobs x {s.steps} steps x {s.calls} calls, {s.concurrency} workers,"
            f" horizon {s.horizon_s:g}s, seeds from {s.seed}; {where}"
        )
        for outage in s.outages:
            jitter = f" (+ up to {outage.start_jitter_s:g}s by seed)" if outage.start_jitter_s else ""
            lines.append(
                f"    outage: {', '.join(outage.endpoints)} down for {outage.duration_s:g}s"
                f" from t={outage.start_s:g}s{jitter}"
            )
        if s.warm_factor != 1.0:
            lines.append(
                f"    session cache: a request to the endpoint holding its job's session takes"
                f" x{s.warm_factor:g} of its latency"
            )
        for algo, params in s.algorithm_params.items():
            shown = ", ".join(f"{k}={json.dumps(_plain(v))}" for k, v in params.items())
            lines.append(f"    {algo} runs with {shown}")
        suited = default_algorithms(s, registry_names)
        lines.append(f"    suited: {', '.join(suited) or 'none of the installed algorithms'}")
        for algo, why in s.unsuited.items():
            lines.append(f"    unsuited: {algo} ({why})")
    lines += ["", "algorithms (installed):"]
    lines += [f"  {name}" for name in registry_names]
    lines += ["", f"metrics (better: higher, lower or neutral; {GATED}: only among comparable completion):"]
    width = max(len(m.name) for m in METRICS)
    unit_width = max(len(m.unit) for m in METRICS)
    for m in METRICS:
        better = _better(m).ljust(8)
        lines.append(f"  {m.name.ljust(width)}  {m.unit.ljust(unit_width)}  {better}  {m.meaning}")
    return "\n".join(lines) + "\n"
