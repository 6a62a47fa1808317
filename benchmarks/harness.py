"""The benchmark harness: fresh processes, round-robin variants, per-round ratios.

The machine is shared and noisy (absolute numbers drift 10-40 % between sessions), so every
comparison is a ratio of two runs from the *same round*, and the reported value is the median
of the per-round ratios. Each run is a fresh child process (no warm caches, no shared heap),
with a fresh temporary store; peak RSS comes from the child itself (``ru_maxrss``) and is
cross-checked with the harness's own ``wait4`` accounting.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .machine import calibrate, core_shares, core_times, describe

REPO = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO / "benchmarks" / "results"
DOCS = REPO / "docs" / "performance.md"
BEGIN = "<!-- BEGIN GENERATED: benchmarks (python -m benchmarks rewrites this section) -->"
END = "<!-- END GENERATED: benchmarks -->"
SCHEMA = 1
#: scenario order in tables and for ``--scenario all``
ORDER = (
    "overhead",
    "latency",
    "lognormal",
    "resume",
    "memory",
    "store",
    "durability",
    "shards",
    "handoff",
    "demo",
)

#: metrics summarised (median/min/max) for every variant when present in its runs
METRICS = (
    "pipelines_per_s",
    "skipped_per_s",
    "wall_s",
    "peak_rss_mb",
    "cpu_us_per_task",
    "sys_us_per_task",
    "fraction_of_ideal",
    "bytes_per_pipeline",
    "store_bytes",
    "start_s",
    "tail_s",
    "spread_s",
    # where the machine's cores spent the run (``machine.core_shares``, Linux): the run's own
    # processes (and their CPU seconds), everything else, the hypervisor, nothing
    "run_cpu_s",
    "run_share",
    "other_share",
    "steal_share",
    "idle_share",
)


# ------------------------------------------------------------------------------- model
@dataclass
class Cmd:
    """One child process: argv, extra environment, and where its stdout goes."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Variant:
    """One thing measured in every round. ``build(tmp)`` returns the commands of one run.

    Several commands run concurrently (shards); ``combine`` merges their summaries into one.
    """

    name: str
    build: Callable[[Path], list[Cmd]]
    combine: Callable[[list[dict[str, Any]]], dict[str, Any]] | None = None
    ok_codes: tuple[int, ...] = (0,)
    note: str = ""


@dataclass
class Ratio:
    """A per-round ratio ``num.metric / den.metric`` (or ``/ const``), checked against a target."""

    name: str
    num: str
    metric: str
    den: str | None = None
    const: float | None = None
    target: float | None = None
    op: str = ">="
    note: str = ""


@dataclass
class Check:
    """A target on the median of one variant's metric (an absolute goal, not a ratio)."""

    name: str
    variant: str
    metric: str
    target: float
    op: str = ">="


@dataclass
class Scenario:
    """A named set of variants measured round-robin, with its ratios and checks."""

    name: str
    workload: str
    params: dict[str, Any]
    variants: list[Variant]
    ratios: list[Ratio] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    prepare: Callable[[Path], list[Cmd]] | None = None
    reported: list[tuple[str, str]] = field(default_factory=list)  # (variant, metric) shown as-is
    #: rounds this scenario runs at least when ``--rounds`` is not given (short, noisy scenarios)
    min_rounds: int = 1


def scenario_rounds(sc: Scenario, rounds: int, *, explicit: bool) -> int:
    """``--rounds`` (or ``--quick``) decides; otherwise a short scenario may ask for more."""
    return rounds if explicit else max(rounds, sc.min_rounds)


# ------------------------------------------------------------------------------- children
@dataclass
class RunResult:
    """What one run gave: the child's JSON summary plus the harness's own measurements."""

    data: dict[str, Any] | None
    error: str | None


def _spawn(cmd: Cmd, tmp: Path, tag: str) -> tuple[subprocess.Popen[bytes], Path, Path, float]:
    out, err = tmp / f"{tag}.stdout", tmp / f"{tag}.stderr"
    env = {**os.environ, **cmd.env}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    with open(out, "wb") as fo, open(err, "wb") as fe:
        proc = subprocess.Popen(cmd.argv, stdout=fo, stderr=fe, cwd=REPO, env=env)
    return proc, out, err, time.perf_counter()


def _reap(proc: subprocess.Popen[bytes], deadline: float) -> tuple[int, float]:
    """Wait for ``proc`` with ``wait4`` (its own peak RSS), killing it at the deadline."""
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            code = os.waitstatus_to_exitcode(status)
            proc.returncode = code
            return code, usage.ru_maxrss / 1024
        if time.perf_counter() > deadline:
            proc.send_signal(signal.SIGKILL)
        time.sleep(0.02)


def _parse(text: str) -> dict[str, Any] | None:
    text = text.strip()
    if not text:
        return None
    try:
        obj = json.loads(text)
        return obj if isinstance(obj, dict) else None
    except json.JSONDecodeError:
        pass
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            return obj if isinstance(obj, dict) else None
    return None


def _normalise(data: dict[str, Any]) -> dict[str, Any]:
    """Give baseline summaries the product's field names (wall_s, skipped_per_s)."""
    if "wall_s" not in data and "elapsed_s" in data:
        data["wall_s"] = data["elapsed_s"]
    if data.get("skipped_per_s") is None and data.get("pipelines_run") == 0 and data.get("wall_s"):
        skipped = data.get("pipelines_skipped", (data.get("n") or 0) - data.get("pipelines_run", 0))
        data["skipped_per_s"] = skipped / data["wall_s"] if skipped else None
    return data


def run_cmds(
    cmds: list[Cmd], tmp: Path, tag: str, timeout: float, ok_codes: Sequence[int]
) -> list[RunResult]:
    """Start every command at once, wait for all, parse one JSON summary from each."""
    started = [_spawn(c, tmp, f"{tag}-{i}") for i, c in enumerate(cmds)]
    results: list[RunResult] = []
    for proc, out, err, t0 in started:
        code, maxrss = _reap(proc, t0 + timeout)
        wall = time.perf_counter() - t0
        data = _parse(out.read_text(errors="replace"))
        error = None
        if code not in ok_codes or data is None:
            tail = err.read_text(errors="replace").strip().splitlines()[-15:]
            error = f"exit {code}" + (" (no JSON summary)" if data is None else "") + ": " + "\n".join(tail)
        if data is not None:
            data = _normalise(data)
            data["harness_wall_s"] = wall
            data["harness_maxrss_mb"] = maxrss
            data["exit_code"] = code
        results.append(RunResult(data, error))
    return results


# ------------------------------------------------------------------------------- statistics
def summary(values: Sequence[float | None]) -> dict[str, Any] | None:
    vals = [v for v in values if isinstance(v, int | float)]
    if not vals:
        return None
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals), "n": len(vals)}


def _met(value: float | None, target: float | None, op: str) -> bool | None:
    if value is None or target is None:
        return None
    return {">=": value >= target, "<=": value <= target, "<": value < target, ">": value > target}[op]


def _metric(run: dict[str, Any] | None, metric: str) -> float | None:
    if not run:
        return None
    v = run.get(metric)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def per_round_ratio(
    ratio: Ratio, runs: dict[str, list[dict[str, Any] | None]], rounds: int
) -> list[float | None]:
    out: list[float | None] = []
    for r in range(rounds):
        num = _metric(runs.get(ratio.num, [None] * rounds)[r], ratio.metric)
        den = (
            ratio.const
            if ratio.den is None
            else _metric(runs.get(ratio.den, [None] * rounds)[r], ratio.metric)
        )
        out.append(num / den if num is not None and den else None)
    return out


# ------------------------------------------------------------------------------- running
def settle() -> None:
    """Write back what earlier runs left dirty in the page cache, before the next run's clock
    starts. The kernel writes dirty pages back some 30 s after they were written, so without this
    a run paid, on its CPUs, for the stores of the runs before it (a run on two cores most: the
    one-process variants had a spare core for it)."""
    if hasattr(os, "sync"):
        os.sync()


def run_scenario(
    sc: Scenario,
    rounds: int,
    root: Path,
    timeout: float,
    log: Callable[[str], None],
    keep: bool = False,
) -> dict[str, Any]:
    """Prepare once, then ``rounds`` rounds; within a round every variant once, order rotated.
    Each run starts settled (``settle``); its files are removed once read unless ``keep``
    (removing a file also drops its dirty pages, which then are never written back)."""
    base = root / sc.name
    base.mkdir(parents=True, exist_ok=True)
    errors: list[str] = []
    if sc.prepare is not None:
        prep = base / "prepared"
        prep.mkdir(exist_ok=True)
        t0 = time.perf_counter()
        for i, cmd in enumerate(sc.prepare(prep)):
            for res in run_cmds([cmd], prep, f"prepare{i}", timeout, (0,)):
                if res.error:
                    errors.append(f"prepare: {res.error}")
        log(f"  prepared in {time.perf_counter() - t0:.1f}s")
    runs: dict[str, list[dict[str, Any] | None]] = {v.name: [] for v in sc.variants}
    for r in range(rounds):
        k = r % len(sc.variants)
        order = sc.variants[k:] + sc.variants[:k]
        for v in order:
            tmp = base / f"round{r}" / v.name
            tmp.mkdir(parents=True, exist_ok=True)
            cmds = v.build(tmp)
            settle()
            before = core_times()
            results = run_cmds(cmds, tmp, "run", timeout, v.ok_codes)
            shares = core_shares(before, core_times())
            if not keep:
                shutil.rmtree(tmp, ignore_errors=True)
            bad = [res.error for res in results if res.error]
            if bad:
                errors.extend(f"round {r} {v.name}: {e}" for e in bad)
                runs[v.name].append(None)
                log(f"  round {r + 1} {v.name}: FAILED {bad[0][:300]}")
                continue
            datas = [res.data for res in results if res.data is not None]
            data = v.combine(datas) if v.combine else datas[0]
            data.update(shares)
            runs[v.name].append(data)
            shown = data.get("pipelines_per_s") or data.get("skipped_per_s")
            log(
                f"  round {r + 1} {v.name}: {_fmt(shown)}/s wall {_fmt(data.get('wall_s'))}s"
                f" rss {_fmt(data.get('peak_rss_mb'))}MB"
            )
    return assemble(sc, rounds, runs, errors)


def assemble(
    sc: Scenario, rounds: int, runs: dict[str, list[dict[str, Any] | None]], errors: list[str]
) -> dict[str, Any]:
    """Turn raw runs into the scenario's result: summaries, per-round ratios, checks."""
    variants: dict[str, Any] = {}
    for v in sc.variants:
        vr = runs.get(v.name, [])
        variants[v.name] = {
            "note": v.note,
            "runs": vr,
            "summary": {m: s for m in METRICS if (s := summary([_metric(x, m) for x in vr])) is not None},
        }
    ratios = []
    for ra in sc.ratios:
        per = per_round_ratio(ra, runs, rounds)
        s = summary(per)
        med = s["median"] if s else None
        ratios.append(
            {
                "name": ra.name,
                "num": ra.num,
                "den": ra.den,
                "const": ra.const,
                "metric": ra.metric,
                "per_round": per,
                "median": med,
                "min": s["min"] if s else None,
                "max": s["max"] if s else None,
                "target": ra.target,
                "op": ra.op,
                "met": _met(med, ra.target, ra.op),
                "note": ra.note,
            }
        )
    checks = []
    for ch in sc.checks:
        s = variants.get(ch.variant, {}).get("summary", {}).get(ch.metric)
        med = s["median"] if s else None
        checks.append(
            {
                "name": ch.name,
                "variant": ch.variant,
                "metric": ch.metric,
                "median": med,
                "min": s["min"] if s else None,
                "max": s["max"] if s else None,
                "target": ch.target,
                "op": ch.op,
                "met": _met(med, ch.target, ch.op),
            }
        )
    reported = []
    for vname, metric in sc.reported:
        s = variants.get(vname, {}).get("summary", {}).get(metric)
        reported.append({"variant": vname, "metric": metric, **(s or {"median": None})})
    return {
        "workload": sc.workload,
        "params": sc.params,
        "rounds": rounds,
        "variants": variants,
        "ratios": ratios,
        "checks": checks,
        "reported": reported,
        "errors": errors,
    }


def _fmt(v: Any, digits: int = 2) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        if abs(v) >= 1000:
            return f"{v:,.0f}"
        if abs(v) >= 100:
            return f"{v:.0f}"
        return f"{v:.{digits}f}"
    return str(v)


# ------------------------------------------------------------------------------- output
def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg_start": os.getloadavg(),
    }
    try:
        import sqlite3

        info["sqlite"] = sqlite3.sqlite_version
    except ImportError:  # pragma: no cover
        pass
    try:
        import uvloop

        info["uvloop"] = uvloop.__version__  # the product's default loop when installed
    except ImportError:
        info["uvloop"] = None
    try:
        info["git_commit"] = (
            subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10
            ).stdout.strip()
            or None
        )
    except (OSError, subprocess.SubprocessError):
        info["git_commit"] = None
    return info


def merge_results(path: Path, new: dict[str, Any]) -> dict[str, Any]:
    """Scenarios run separately the same day accumulate in one file (a re-run replaces one)."""
    if path.exists():
        try:
            old = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            old = {}
        if old.get("schema") == SCHEMA and old.get("quick") == new.get("quick"):
            scenarios = {**old.get("scenarios", {}), **new["scenarios"]}
            new = {**new, "scenarios": scenarios}
    return new


#: the per-day results files (``--out`` files and hand-named copies are not read back)
_DAY_FILE = re.compile(r"^\d{4}-\d{2}-\d{2}\.json$")


def latest_scenarios(results_dir: Path, current: dict[str, Any]) -> dict[str, Any]:
    """``current`` with every scenario it lacks taken from the newest per-day file that has it.

    The generated docs table shows the latest measurement of every scenario: a scenario re-run
    after midnight starts a new day's file, which must not drop the others from the table.
    Each scenario carried over names its file (``from_file``); files of another schema or of
    the other kind (quick vs full) are skipped.
    """
    scenarios = dict(current.get("scenarios", {}))
    for path in sorted((p for p in results_dir.glob("*.json") if _DAY_FILE.match(p.name)), reverse=True):
        try:
            old = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if old.get("schema") != SCHEMA or old.get("quick") != current.get("quick"):
            continue
        for name, sc in old.get("scenarios", {}).items():
            if name not in scenarios:
                scenarios[name] = {**sc, "from_file": path.name}
    return {**current, "scenarios": scenarios}


def _provenance(sc: dict[str, Any]) -> str:
    """When and from which commit a scenario's numbers are (older results lack the fields)."""
    parts = []
    if sc.get("measured_at"):
        parts.append(f"measured {sc['measured_at']}")
    if sc.get("git_commit"):
        parts.append(f"git {sc['git_commit']}")
    if sc.get("from_file"):
        parts.append(f"from `benchmarks/results/{sc['from_file']}`")
    return f" [{', '.join(parts)}]" if parts else ""


def _cell(s: dict[str, Any] | None, key: str = "median", digits: int = 2) -> str:
    return _fmt(s.get(key), digits) if s else "n/a"


def _cpu(s: dict[str, Any]) -> str:
    """CPU µs per task, with the kernel's share in parentheses when the run reported it."""
    cpu = _cell(s.get("cpu_us_per_task"), digits=1)
    system = s.get("sys_us_per_task")
    return f"{cpu} ({_cell(system, digits=1)})" if system and cpu != "n/a" else cpu


def _range(s: dict[str, Any] | None, digits: int = 2) -> str:
    if not s or s.get("median") is None:
        return "n/a"
    return f"{_fmt(s['median'], digits)} ({_fmt(s['min'], digits)} - {_fmt(s['max'], digits)})"


#: metrics the Variants table has a column for: a reported one of these is not repeated above it
_VARIANT_COLUMNS = frozenset(
    {"wall_s", "peak_rss_mb", "cpu_us_per_task", "sys_us_per_task", "bytes_per_pipeline"}
)


def _reported_lines(scen: dict[str, Any]) -> list[str]:
    """Reported metrics without a Variants column, one line per scenario (medians)."""
    lines = []
    for name, sc in scen.items():
        by_variant: dict[str, list[str]] = {}
        for rep in sc.get("reported", []):
            if rep["metric"] not in _VARIANT_COLUMNS and rep.get("median") is not None:
                by_variant.setdefault(rep["variant"], []).append(f"{rep['metric']} {_fmt(rep['median'])}")
        if by_variant:
            shown = "; ".join(f"{variant} {', '.join(values)}" for variant, values in by_variant.items())
            lines.append(f"- {name}, reported (medians): {shown}")
    return ["", *lines] if lines else []


def render_markdown(results: dict[str, Any]) -> str:
    """The generated tables: variants (median, min-max) and targets (per-round ratio medians)."""
    m = results.get("machine", {})
    quick = " - QUICK smoke run, not a measurement" if results.get("quick") else ""
    lines = [
        f"Generated {results.get('generated_at', '?')} by `python -m benchmarks`"
        f" (git {m.get('git_commit') or '?'}, Python {m.get('python', '?')}, SQLite {m.get('sqlite', '?')},"
        f" {m.get('cpus', '?')} CPUs){quick}.",
        *_machine_lines(m),
        "",
        "### Targets",
        "",
        "| scenario | check | median of per-round values (min - max) | target | met |",
        "|---|---|---:|---:|:---:|",
    ]
    raw = results.get("scenarios", {})
    scen = {k: raw[k] for k in sorted(raw, key=lambda k: ORDER.index(k) if k in ORDER else len(ORDER))}
    for name, sc in scen.items():
        for ra in sc.get("ratios", []):
            val = _range({"median": ra["median"], "min": ra["min"], "max": ra["max"]}, 3)
            tgt = f"{ra['op']} {ra['target']:g}" if ra.get("target") is not None else "(reference)"
            met = {True: "yes", False: "**NO**", None: "-"}[ra.get("met")]
            lines.append(f"| {name} | {ra['name']} | {val} | {tgt} | {met} |")
        for ch in sc.get("checks", []):
            val = _range({"median": ch["median"], "min": ch["min"], "max": ch["max"]})
            met = {True: "yes", False: "**NO**", None: "-"}[ch.get("met")]
            lines.append(f"| {name} | {ch['name']} | {val} | {ch['op']} {ch['target']:,g} | {met} |")
    lines += _reported_lines(scen)
    lines += [
        "",
        "### Variants",
        "",
        "| scenario | variant | rounds | pipelines/s median (min - max) | wall s median | peak RSS MB median"
        " | CPU µs/task (system) | bytes/pipeline |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, sc in scen.items():
        for vname, v in sc.get("variants", {}).items():
            s = v.get("summary", {})
            rate = s.get("pipelines_per_s") or s.get("skipped_per_s")
            label = vname + (" (skipped/s)" if "pipelines_per_s" not in s and "skipped_per_s" in s else "")
            ok = sum(1 for r in v.get("runs", []) if r)
            done = (
                f"{ok}/{sc.get('rounds')}" if not sc.get("derived_from") else f"(from {sc['derived_from']})"
            )
            lines.append(
                f"| {name} | {label} | {done} | {_range(rate, 0)} | {_cell(s.get('wall_s'))}"
                f" | {_cell(s.get('peak_rss_mb'), digits=1)} | {_cpu(s)}"
                f" | {_cell(s.get('bytes_per_pipeline'), digits=0)} |"
            )
    lines += ["", "Workloads and parameters:", ""]
    for name, sc in scen.items():
        params = ", ".join(f"{k}={v}" for k, v in sc.get("params", {}).items())
        lines.append(f"- **{name}**: {sc.get('workload', '')} ({params}).{_provenance(sc)}")
        for err in sc.get("errors", [])[:3]:
            lines.append(f"  - error: `{err.splitlines()[0][:200]}`")
    return "\n".join(lines) + "\n"


def update_docs(markdown: str, path: Path = DOCS) -> None:
    """Replace the generated section between the markers; the prose around it is kept."""
    block = f"{BEGIN}\n{markdown}{END}"
    if path.exists():
        text = path.read_text()
        if BEGIN in text and END in text:
            head, rest = text.split(BEGIN, 1)
            _, tail = rest.split(END, 1)
            path.write_text(head + block + tail)
            return
        path.write_text(text.rstrip() + "\n\n## Latest results\n\n" + block + "\n")
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# Performance\n\n## Latest results\n\n" + block + "\n")


def _machine_lines(machine: dict[str, Any]) -> list[str]:
    """The machine's speed and steadiness at the start and the end of the suite (``machine``)."""
    lines = []
    for when in ("start", "end"):
        text = describe(machine.get(f"calibration_{when}"))
        if text:
            lines.append(f"Machine at the {when}: {text}.")
    return ["", " ".join(lines)] if lines else []


def print_table(results: dict[str, Any]) -> None:
    for line in _machine_lines(results.get("machine", {})):
        if line:
            print(line)
    for name, sc in results["scenarios"].items():
        print(f"\n== {name}: {sc['workload']}")
        for vname, v in sc["variants"].items():
            s = v["summary"]
            rate = s.get("pipelines_per_s") or s.get("skipped_per_s")
            print(
                f"  {vname:<22} rate {_range(rate, 0):<32} wall {_cell(s.get('wall_s'))}s"
                f"  rss {_cell(s.get('peak_rss_mb'), digits=1)}MB"
            )
        for ra in sc["ratios"]:
            per = ", ".join(_fmt(x, 3) for x in ra["per_round"])
            tgt = f"target {ra['op']} {ra['target']:g}" if ra["target"] is not None else "reference"
            print(
                f"  ratio {ra['name']:<36} median {_fmt(ra['median'], 3):<8} per round [{per}]  {tgt}"
                f"  met={ra['met']}"
            )
        for ch in sc["checks"]:
            print(
                f"  check {ch['name']:<36} median {_fmt(ch['median'])}  target {ch['op']} {ch['target']:,g}"
                f"  met={ch['met']}"
            )
        for rep in sc["reported"]:
            shown = _range(rep if rep.get("median") is not None else None)
            print(f"  reported {rep['variant']} {rep['metric']}: {shown}")
        for err in sc["errors"]:
            print(f"  ERROR {err.splitlines()[0][:300]}")


# ------------------------------------------------------------------------------- CLI
def warm_bytecode() -> bool:
    """Write the ``.pyc`` files of the product, its plugins and these runners, as an install does.

    Every child process is timed from its start, so its imports count. An installed package has
    its bytecode already; a checkout under ``PYTHONDONTWRITEBYTECODE=1`` (as in CI) would
    otherwise recompile every module in every child, which no user pays. True if all compiled.
    """
    import compileall

    ok = True
    folders = (REPO / "core" / "pyattacker", REPO / "plugins" / "pyattacker_plugins", REPO / "benchmarks")
    for folder in folders:
        ok = bool(compileall.compile_dir(str(folder), quiet=1)) and ok
    return ok


def build_parser() -> argparse.ArgumentParser:
    """The command line (the docs' example commands are parsed with it by a test)."""
    from . import scenarios as catalog

    ap = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Benchmark pyattacker against the baseline peer and the floor runner.",
    )
    ap.add_argument(
        "--quick", action="store_true", help="small smoke version (CI): tiny N, 1 round by default"
    )
    ap.add_argument("--rounds", type=int, default=None, help="rounds per scenario (default 3, quick 1)")
    ap.add_argument("--scenario", default="all", help=f"comma list of: {', '.join(catalog.NAMES)} (or all)")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every N (not the demo's) by this")
    ap.add_argument(
        "--out", type=Path, default=None, help="results JSON (default benchmarks/results/<date>.json)"
    )
    ap.add_argument(
        "--docs",
        type=Path,
        default=None,
        help="markdown file whose generated section is rewritten (default docs/performance.md"
        " for full runs without --out; 'none' to skip)",
    )
    ap.add_argument(
        "--baselines", type=Path, default=None, help="folder with baseline_peer.py and floor_runner.py"
    )
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds before a child run is killed")
    ap.add_argument("--keep-tmp", action="store_true", help="keep the temporary stores")
    return ap


def main(argv: list[str] | None = None) -> int:
    from . import scenarios as catalog

    ap = build_parser()
    args = ap.parse_args(argv)

    names = (
        catalog.NAMES
        if args.scenario == "all"
        else [s.strip() for s in args.scenario.split(",") if s.strip()]
    )
    unknown = [n for n in names if n not in catalog.NAMES]
    if unknown:
        ap.error(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(catalog.NAMES)}")
    rounds = args.rounds or (1 if args.quick else 3)
    baselines = catalog.find_baselines(args.baselines)
    out = args.out or RESULTS_DIR / f"{_dt.date.today().isoformat()}.json"
    docs: Path | None
    if args.docs is not None:
        docs = None if str(args.docs) == "none" else args.docs
    else:
        docs = DOCS if (args.out is None and not args.quick) else None

    root = Path(tempfile.mkdtemp(prefix="pyattacker-bench-"))
    log = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    log(
        f"benchmarks: rounds={rounds} quick={args.quick} scale={args.scale} tmp={root}"
        f" baselines={baselines or 'NOT FOUND (baseline variants skipped)'}"
    )
    results: dict[str, Any] = {
        "schema": SCHEMA,
        "generated_at": _dt.datetime.now().isoformat(timespec="seconds"),
        "quick": args.quick,
        "machine": machine_info(),
        "scenarios": {},
    }
    results["machine"]["bytecode_warmed"] = warm_bytecode()
    if not args.quick:  # (a smoke run is not a measurement: no reading of the machine either)
        results["machine"]["calibration_start"] = calibrate(root)
    failed = False
    try:
        built: dict[str, Any] = {}
        for name in names:
            sc = catalog.build(name, quick=args.quick, scale=args.scale, baselines=baselines, previous=built)
            if sc is None:
                continue
            if isinstance(sc, dict):  # derived from a scenario already measured in this invocation
                results["scenarios"][name] = built[name] = sc
                log(f"scenario {name}: derived from {sc.get('derived_from')}")
                continue
            log(f"scenario {name}: {sc.workload} {sc.params}")
            t0 = time.perf_counter()
            res = run_scenario(
                sc,
                scenario_rounds(sc, rounds, explicit=bool(args.rounds or args.quick)),
                root,
                args.timeout,
                log,
                keep=args.keep_tmp,
            )
            res["params"]["scale"] = args.scale
            res["elapsed_s"] = round(time.perf_counter() - t0, 1)
            res["measured_at"] = _dt.datetime.now().isoformat(timespec="seconds")
            res["git_commit"] = results["machine"].get("git_commit")
            results["scenarios"][name] = built[name] = res
            failed = failed or bool(res["errors"])
        if not args.quick:
            results["machine"]["calibration_end"] = calibrate(root)
    finally:
        if not args.keep_tmp:
            shutil.rmtree(root, ignore_errors=True)
    results["machine"]["loadavg_end"] = os.getloadavg()
    merged = merge_results(out, results) if args.out is None else results
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(merged, indent=1, default=str) + "\n")
    print_table(results)
    log(f"\nresults: {out}")
    if docs is not None:
        shown = latest_scenarios(RESULTS_DIR, merged) if args.out is None else merged
        update_docs(render_markdown(shown), docs)
        log(f"docs: {docs}")
    return 1 if failed else 0
