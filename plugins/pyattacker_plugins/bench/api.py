"""The Python API of ``pyattacker bench``: check the options, run every (algorithm, seed), judge.

``make_plan`` validates everything (scenario and algorithm names, budgets) and raises
``ConfigError`` naming the flag before anything runs; ``run_bench`` runs a plan and returns a
``BenchReport``, or raises a ``BenchmarkError`` without partial numbers.

    from pyattacker_plugins.bench.api import BenchOptions, make_plan, run_bench
    report = run_bench(make_plan(BenchOptions(jobs=200, seeds=2)))
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pyattacker import ConfigError
from pyattacker.plugins.registry import Registry
from pyattacker.resources.algorithm import resolve_algorithm

from .clocks import CLOCKS
from .driver import RunResult, RunSettings, run_once
from .metrics import COMPLETION, METRICS, compute
from .scenario import DEFAULT_SCENARIO, Scenario, get_scenario
from .winners import Summary, Verdict, eligibility, judge, summarize

__all__ = [
    "AlgorithmResult",
    "BenchOptions",
    "BenchPlan",
    "BenchReport",
    "algorithm_registry",
    "default_algorithms",
    "make_plan",
    "run_bench",
]

Progress = Callable[[str], None]


@dataclass(frozen=True)
class BenchOptions:
    """What the command line asks for (None: the scenario's own value)."""

    scenario: str = DEFAULT_SCENARIO
    algorithms: Sequence[str] | None = None
    seeds: int = 3
    jobs: int | None = None
    concurrency: int | None = None
    horizon_s: float | None = None
    wall_budget_s: float = 600.0
    clock: str = "virtual"
    speedup: float = 10.0


@dataclass(frozen=True)
class BenchPlan:
    """Validated options: the scenario with its overrides applied, and what runs."""

    scenario: Scenario
    algorithms: tuple[str, ...]
    #: requested algorithms the scenario declares unsuited: name -> reason
    unsuited: dict[str, str]
    seeds: tuple[int, ...]
    clock: str
    speedup: float
    wall_budget_s: float
    #: default-set algorithms left out because they cannot be built without parameters
    skipped: dict[str, str] = field(default_factory=dict)
    registry: Registry | None = None


@dataclass
class AlgorithmResult:
    name: str
    suited: bool
    reason: str | None
    runs: list[RunResult] = field(default_factory=list)
    metrics: list[dict[str, float | None]] = field(default_factory=list)
    summary: dict[str, Summary] = field(default_factory=dict)


@dataclass
class BenchReport:
    plan: BenchPlan
    algorithms: dict[str, AlgorithmResult]
    baseline: float | None
    eligible: tuple[str, ...]
    verdicts: dict[str, Verdict]
    wall_s: float


#: the most seeds one benchmark runs: each is a full run of every algorithm, and the plan lists
#: them all (a huge --seeds would hang before the first line of progress, building that list)
MAX_SEEDS = 10_000


def _int_at_least_1(flag: str, value: object, most: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{flag} must be an integer, got {value!r}")
    if value < 1:
        raise ConfigError(f"{flag} must be at least 1, got {value}")
    if most is not None and value > most:
        raise ConfigError(f"{flag} must be at most {most}, got {value}")
    return value


def _positive(flag: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or math.isnan(value):
        raise ConfigError(f"{flag} must be a positive number, got {value!r}")
    if not 0 < value < math.inf:
        raise ConfigError(f"{flag} must be a positive (finite) number, got {value:g}")
    return float(value)


def algorithm_registry(registry: Registry | None = None) -> Registry:
    """``registry``, else the process-wide algorithms registry (plugins included)."""
    if registry is not None:
        return registry
    from pyattacker.plugins.manager import get_plugins  # only without a given registry

    return get_plugins().algorithms


def default_algorithms(scenario: Scenario, names: Sequence[str]) -> list[str]:
    """Every registered algorithm the scenario does not declare unsuited, in its column order."""
    usable = [n for n in names if n not in scenario.unsuited]
    ordered = [n for n in scenario.order if n in usable]
    return ordered + sorted(n for n in usable if n not in ordered)


def _build(scenario: Scenario, name: str, algorithms: Registry) -> None:
    """Build ``name`` once as the runs will (ConfigError when it cannot be built). A factory
    that raises anything else is a plugin's bug: a ConfigError naming it, not a traceback."""
    try:
        resolve_algorithm(scenario.algorithm_spec(name), algorithms)
    except ConfigError:
        raise
    except Exception as exc:
        raise ConfigError(f"algorithm {name!r} could not be built: {type(exc).__name__}: {exc}") from None


def make_plan(options: BenchOptions, registry: Registry | None = None) -> BenchPlan:
    """Validate ``options`` (ConfigError naming the flag) and resolve names; runs nothing."""
    seeds = _int_at_least_1("--seeds", options.seeds, MAX_SEEDS)
    jobs = None if options.jobs is None else _int_at_least_1("--jobs", options.jobs)
    concurrency = (
        None if options.concurrency is None else _int_at_least_1("--concurrency", options.concurrency)
    )
    horizon = None if options.horizon_s is None else _positive("--horizon", options.horizon_s)
    wall_budget = _positive("--wall-budget", options.wall_budget_s)
    speedup = _positive("--speedup", options.speedup)
    if options.clock not in CLOCKS:
        raise ConfigError(f"--clock must be one of {', '.join(CLOCKS)}, got {options.clock!r}")
    base = get_scenario(options.scenario)
    overrides: dict[str, Any] = {}
    if jobs is not None:
        overrides["jobs"] = jobs
    if concurrency is not None:
        overrides["concurrency"] = concurrency
    if horizon is not None:
        overrides["horizon_s"] = horizon
    scenario = dataclasses.replace(base, **overrides) if overrides else base
    algorithms = algorithm_registry(registry)
    skipped: dict[str, str] = {}
    if options.algorithms is None:
        chosen = []
        for name in default_algorithms(scenario, algorithms.names()):
            try:
                _build(scenario, name, algorithms)
            except ConfigError as exc:  # a third-party algorithm that needs parameters, or breaks
                skipped[name] = str(exc)
                continue
            chosen.append(name)
    else:
        chosen = [a.strip() for a in options.algorithms]
        if not chosen or any(not a for a in chosen):
            raise ConfigError("--algorithms needs comma-separated algorithm names, e.g. wait,backoff")
        for name in chosen:
            if chosen.count(name) > 1:
                raise ConfigError(f"--algorithms lists {name!r} twice")
            try:
                _build(scenario, name, algorithms)
            except ConfigError as exc:
                raise ConfigError(f"--algorithms: {exc}") from None
    if not chosen:
        raise ConfigError(f"scenario {scenario.name!r}: no suited algorithm is installed")
    return BenchPlan(
        scenario=scenario,
        algorithms=tuple(chosen),
        unsuited={a: scenario.unsuited[a] for a in chosen if a in scenario.unsuited},
        seeds=tuple(scenario.seed + i for i in range(seeds)),
        clock=options.clock,
        speedup=speedup,
        wall_budget_s=wall_budget,
        skipped=skipped,
        registry=registry,
    )


def _real_s(seconds: float) -> str:
    """Real seconds for a progress line: whole seconds, or 3 digits for an absurd --speedup."""
    return f"{seconds:.0f}s" if seconds < 1e7 else f"{seconds:.3g}s"


def _header(plan: BenchPlan) -> str:
    s = plan.scenario
    clock = "virtual"
    if plan.clock != "virtual":
        per_run = _real_s(s.horizon_s / plan.speedup)
        clock = f"real x{plan.speedup:g} (up to about {per_run} a run: horizon / speedup)"
    return (
        f"bench {s.name}: {len(plan.algorithms)} algorithm(s) x {len(plan.seeds)} seed(s);"
        f" {s.jobs} jobs x {s.steps} steps x {s.calls} calls, {s.concurrency} workers,"
        f" horizon {s.horizon_s:g}s, clock {clock}"
    )


def run_bench(plan: BenchPlan, *, progress: Progress | None = None) -> BenchReport:
    """Run every algorithm of ``plan`` on every seed and judge each metric."""
    say = progress or (lambda line: None)
    registry = algorithm_registry(plan.registry)
    say(_header(plan))
    s = plan.scenario
    if plan.clock == "real" and s.horizon_s / plan.speedup > plan.wall_budget_s:
        needs = _real_s(s.horizon_s / plan.speedup)
        say(
            f"  warning: a run that lasts its horizon needs {needs} of real time,"
            f" more than the wall budget of {plan.wall_budget_s:g}s (raise --speedup or --wall-budget)"
        )
    for name, why in plan.skipped.items():
        say(f"  skipped {name}: {why}")
    results: dict[str, AlgorithmResult] = {}
    started = time.perf_counter()
    for name in plan.algorithms:
        entry = results[name] = AlgorithmResult(name, name not in plan.unsuited, plan.unsuited.get(name))
        for seed in plan.seeds:
            settings = RunSettings(
                scenario=plan.scenario,
                algorithm=name,
                seed=seed,
                clock=plan.clock,
                speedup=plan.speedup,
                wall_budget_s=plan.wall_budget_s,
            )
            run = run_once(settings, registry)
            entry.runs.append(run)
            entry.metrics.append(compute(run))
            unstarted = run.jobs_total - run.jobs_started
            say(
                f"  {name:<12} seed {seed}: {run.jobs_done} done, {run.jobs_failed} failed,"
                f" {unstarted} unstarted; simulated {run.sim_end_s:.0f}s in {run.wall_s:.2f}s"
            )
            if run.leases_active_at_end:
                say(f"  warning: {name} seed {seed} ended with {run.leases_active_at_end} lease(s) held")
        entry.summary = {m.name: summarize([values[m.name] for values in entry.metrics]) for m in METRICS}
    wall_s = time.perf_counter() - started
    suited = [a for a, r in results.items() if r.suited]
    completion = {a: [v[COMPLETION] or 0.0 for v in r.metrics] for a, r in results.items()}
    baseline, eligible = eligibility(completion, suited)
    verdicts = {
        m.name: judge(
            m,
            {a: [v[m.name] for v in r.metrics] for a, r in results.items()},
            suited=suited,
            eligible=eligible,
        )
        for m in METRICS
    }
    return BenchReport(plan, results, baseline, eligible, verdicts, wall_s)
