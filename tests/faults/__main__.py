"""``python -m tests.faults [--soak N] [--report PATH]``: the CI matrix, or a randomized soak.

Without ``--soak`` it runs the representative CI matrix once. With ``--soak N`` it runs N
random scenarios (random fault, occurrence, store, backend and seed), two at a time, and
writes a JSON report with the counts that matter: crashes injected, resumes, pipelines
checked, tasks executed, replays found (the goal is zero), breaches and undetermined verdicts.
Exit status: 1 if any criterion was breached, else 0.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .harness import Outcome, Scenario, ci_matrix, random_scenario, run_scenario


def summarise(outcomes: list[Outcome], *, seed: int | None, wall_s: float) -> dict[str, Any]:
    """The report: totals, per-fault counts, and every breach / undetermined verdict with evidence."""
    status = Counter(v.status for o in outcomes for v in o.verdicts)
    by_fault: dict[str, Counter[str]] = {}
    for o in outcomes:
        key = o.scenario.fault + (f":{o.scenario.kind}" if o.scenario.fault == "crash" else "")
        c = by_fault.setdefault(key, Counter())
        c["scenarios"] += 1
        c["crashes"] += o.crashes
        c["stops"] += o.stops
        c["breached"] += len(o.breaches)
        c["undetermined"] += len(o.undetermined)
    undetermined = Counter(f"{v.name}" for o in outcomes for v in o.undetermined)
    return {
        "scenarios": len(outcomes),
        "random_seed": seed,
        "wall_s": round(wall_s, 1),
        "crashes_injected": sum(o.crashes for o in outcomes),
        "stops_injected": sum(o.stops for o in outcomes),
        "resumes": sum(o.resumes for o in outcomes),
        "pipelines_checked": sum(o.pipelines_checked for o in outcomes),
        "tasks_executed": sum(o.tasks_executed for o in outcomes),
        "replays_found": sum(o.replays for o in outcomes),
        "verdicts": dict(status),
        "by_fault": {k: dict(v) for k, v in sorted(by_fault.items())},
        "stores": dict(Counter(o.scenario.store for o in outcomes)),
        "backends": dict(Counter(o.scenario.backend for o in outcomes)),
        "undetermined_by_criterion": dict(undetermined),
        "breaches": [
            {"scenario": o.scenario.name, "criterion": v.name, "evidence": v.evidence}
            for o in outcomes
            for v in o.breaches
        ],
        "undetermined": [
            {"scenario": o.scenario.name, "criterion": v.name, "evidence": v.evidence}
            for o in outcomes
            for v in o.undetermined
        ],
    }


def run_all(
    scenarios: list[Scenario], workdir: Path, jobs: int, deadline: float | None, verbose: bool
) -> list[Outcome]:
    outcomes: list[Outcome] = []

    def one(item: tuple[int, Scenario]) -> Outcome | None:
        i, sc = item
        if deadline is not None and time.monotonic() > deadline:
            return None
        outcome = run_scenario(sc, workdir / f"s{i:04d}")
        shutil.rmtree(workdir / f"s{i:04d}", ignore_errors=True)
        return outcome

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        for outcome in pool.map(one, enumerate(scenarios)):
            if outcome is None:
                continue
            outcomes.append(outcome)
            mark = "BREACH" if outcome.breaches else ("?" if outcome.undetermined else "ok")
            print(f"[{len(outcomes):4d}/{len(scenarios)}] {mark:6s} {outcome.scenario.name}", flush=True)
            if verbose or outcome.breaches:
                print(outcome.render(), flush=True)
    return outcomes


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.faults", description=__doc__)
    p.add_argument(
        "--soak", type=int, metavar="N", help="run N randomized scenarios instead of the CI matrix"
    )
    p.add_argument("--report", type=Path, help="write the JSON report here")
    p.add_argument(
        "--seed", type=int, help="random seed of the soak (default: random, recorded in the report)"
    )
    p.add_argument("--pipelines", type=int, default=100, help="pipelines per soak scenario")
    p.add_argument("--jobs", type=int, default=2, help="scenarios run at once")
    p.add_argument("--max-minutes", type=float, help="stop starting new scenarios after this long")
    p.add_argument("--workdir", type=Path, help="scratch directory (default: a temp dir, removed)")
    p.add_argument("-v", "--verbose", action="store_true", help="print every verdict")
    args = p.parse_args(argv)
    seed = None
    if args.soak:
        seed = args.seed if args.seed is not None else random.randrange(1 << 30)
        rnd = random.Random(seed)
        scenarios = [random_scenario(rnd, args.pipelines) for _ in range(args.soak)]
    else:
        scenarios = ci_matrix()
    scratch = args.workdir or Path(tempfile.mkdtemp(prefix="pyattacker-faults-"))
    start = time.monotonic()
    deadline = start + args.max_minutes * 60 if args.max_minutes else None
    try:
        outcomes = run_all(scenarios, scratch, args.jobs, deadline, args.verbose)
    finally:
        if args.workdir is None:
            shutil.rmtree(scratch, ignore_errors=True)
    report = summarise(outcomes, seed=seed, wall_s=time.monotonic() - start)
    text = json.dumps(report, indent=2)
    if args.report:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(text + "\n")
    brief = {k: v for k, v in report.items() if k not in ("undetermined", "breaches")}
    print(json.dumps(brief, indent=2))
    for item in report["breaches"]:
        print(f"BREACH {item['scenario']} {item['criterion']}: {item['evidence']}")
    return 1 if report["breaches"] else 0


if __name__ == "__main__":
    sys.exit(main())
