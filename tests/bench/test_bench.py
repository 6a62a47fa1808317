"""``pyattacker bench``: deterministic simulation, the winners rule, the guards and the CLI contract.

Everything runs on the virtual clock with small job counts; nothing asserts how fast anything
is (the wall-budget test uses a budget far below any run's length).
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pyattacker import ConfigError, Retrying
from pyattacker.plugins.manager import get_plugins
from pyattacker_plugins.bench.api import BenchOptions, BenchReport, make_plan, run_bench
from pyattacker_plugins.bench.errors import BenchmarkStalled, BenchmarkTimeout
from pyattacker_plugins.bench.keys import keyed_rng
from pyattacker_plugins.bench.metrics import METRICS, Metric
from pyattacker_plugins.bench.report import to_json, to_markdown, to_table
from pyattacker_plugins.bench.scenario import (
    DEFAULT_SCENARIO,
    EndpointSpec,
    Outage,
    PoolSpec,
    Scenario,
    get_scenario,
    register_scenario,
    unregister_scenario,
)
from pyattacker_plugins.bench.winners import eligibility, judge
from tests.support import REPO
from tests.support.bench import DEAD, Block, Poll, Spin, register_dead, registry_with

ALL = ("wait", "backoff", "sticky", "quota_aware", "immediate", "least_busy", "failover")
SMALL = {"jobs": 40, "seeds": 2}


def _without_wall(value: Any) -> Any:
    """The report minus its real-time numbers (the only ones allowed to change between runs)."""
    if isinstance(value, dict):
        return {k: _without_wall(v) for k, v in value.items() if k != "wall_s"}
    if isinstance(value, list):
        return [_without_wall(v) for v in value]
    return value


def _report(**options: Any) -> BenchReport:
    return run_bench(make_plan(BenchOptions(**{**SMALL, **options})))


@pytest.fixture(scope="module")
def report() -> BenchReport:
    """Every built-in algorithm, the unsuited ones included, on two seeds."""
    return _report(algorithms=ALL)


# -- determinism and fairness ------------------------------------------------------------------


def test_the_same_seed_gives_the_same_numbers(report: BenchReport) -> None:
    again = _report(algorithms=ALL)
    assert _without_wall(to_json(again)) == _without_wall(to_json(report))


def test_different_seeds_give_different_numbers(report: BenchReport) -> None:
    first, second = report.algorithms["wait"].metrics
    assert first != second
    assert [run.seed for run in report.algorithms["wait"].runs] == [1, 2]


def test_keyed_streams_do_not_depend_on_the_process() -> None:
    """String seeds hash with SHA-512, not ``hash()``: the same value in every process."""
    assert keyed_rng(1, "fast-flaky", 0).random() == 0.7088500327190896


def test_no_lease_is_held_at_the_end_by_any_algorithm(report: BenchReport) -> None:
    for name, result in report.algorithms.items():
        for values in result.metrics:
            assert values["leases_active_at_end"] == 0, name


def test_every_run_drives_requests_through_the_pool(report: BenchReport) -> None:
    for name in ("wait", "backoff", "sticky", "quota_aware"):
        for run in report.algorithms[name].runs:
            assert run.jobs_done > 0 and run.requests >= run.jobs_done * 6, name
            assert sum(run.requests_by_endpoint.values()) == run.requests


def test_immediate_fails_fast_and_is_not_eligible(report: BenchReport) -> None:
    """More workers than slots: the fail-fast algorithm gives up on jobs, so it must not win
    the latency or rate metrics it would otherwise look good on."""
    assert "immediate" not in report.eligible
    for metric in METRICS:
        if metric.needs_completion:
            assert "immediate" not in report.verdicts[metric.name].winners


# -- unsuited algorithms ------------------------------------------------------------------------


def test_unsuited_algorithms_are_skipped_by_default() -> None:
    plan = make_plan(BenchOptions(**SMALL))
    assert plan.algorithms == ("wait", "backoff", "sticky", "quota_aware", "immediate")
    assert plan.unsuited == {}


def test_requested_unsuited_algorithms_run_but_show_as_na(report: BenchReport) -> None:
    for name in ("failover", "least_busy"):
        result = report.algorithms[name]
        assert not result.suited and result.runs
        assert all(name not in v.winners for v in report.verdicts.values())
    table = to_table(report)
    assert "N/A" in table and "N/A failover: one pool" in table
    data = to_json(report)
    assert data["algorithms"]["failover"]["suited"] is False
    assert data["algorithms"]["failover"]["summary"]["jobs_done"]["mean"] > 0


# -- outage_failover and cache_affinity ----------------------------------------------------------

#: enough jobs that every seed's run reaches the outage (it starts between 60 and 90 s)
OUTAGE = {"scenario": "outage_failover", "jobs": 250}
CACHE = {"scenario": "cache_affinity", "jobs": 40}
FIVE_SEEDS = (1, 2, 3, 4, 5)


@pytest.fixture(scope="module")
def outage_report() -> BenchReport:
    """Every built-in algorithm, the unsuited ones included, on two seeds."""
    return _report(**OUTAGE, algorithms=ALL)


@pytest.fixture(scope="module")
def outage_pair() -> BenchReport:
    """wait and failover on seeds 1-5: the property the scenario is built to show."""
    return _report(**OUTAGE, algorithms=["wait", "failover"], seeds=5)


@pytest.fixture(scope="module")
def cache_report() -> BenchReport:
    return _report(**CACHE, algorithms=ALL)


@pytest.fixture(scope="module")
def cache_pair() -> BenchReport:
    return _report(**CACHE, algorithms=["wait", "sticky"], seeds=5)


def _runs(report: BenchReport, name: str) -> dict[int, Any]:
    """Per seed, one algorithm's run as the JSON report has it (wall_s left out)."""
    data = to_json(report)["algorithms"][name]["runs"]
    return {run["seed"]: _without_wall(run) for run in data}


@pytest.mark.parametrize("fixture", ["outage_report", "cache_report"])
def test_every_algorithm_runs_in_the_new_worlds_and_returns_every_lease(
    fixture: str, request: pytest.FixtureRequest
) -> None:
    report: BenchReport = request.getfixturevalue(fixture)
    assert tuple(report.algorithms) == ALL
    for name, result in report.algorithms.items():
        assert len(result.runs) == 2, name
        for run in result.runs:
            assert run.leases_active_at_end == 0, (name, run.seed)
            assert run.jobs_done + run.jobs_failed == run.jobs_started, name
            assert sum(run.requests_by_endpoint.values()) == run.requests, name


@pytest.mark.parametrize(
    ("every", "pair", "names"),
    [
        ("outage_report", "outage_pair", ("wait", "failover")),
        ("cache_report", "cache_pair", ("wait", "sticky")),
    ],
)
def test_the_new_worlds_give_the_same_numbers_in_two_runs(
    every: str, pair: str, names: tuple[str, ...], request: pytest.FixtureRequest
) -> None:
    """Two separate benchmarks (different algorithm sets, different seed counts) give the same
    numbers for the same algorithm and seed: nothing depends on what else ran."""
    first: BenchReport = request.getfixturevalue(every)
    second: BenchReport = request.getfixturevalue(pair)
    for name in names:
        again = _runs(second, name)
        for seed, run in _runs(first, name).items():
            assert again[seed] == run, (name, seed)


def test_outage_failover_suits_failover_and_the_primary_only_baselines() -> None:
    plan = make_plan(BenchOptions(**OUTAGE))
    assert plan.algorithms == ("wait", "backoff", "failover", "immediate")
    scenario = get_scenario("outage_failover")
    assert set(scenario.unsuited) == {"least_busy", "sticky", "quota_aware"}
    assert scenario.algorithm_spec("failover") == {"name": "failover", "pools": ("primary", "backup")}


def test_failover_reaches_the_backup_and_completes_at_least_as_much_as_wait(
    outage_report: BenchReport, outage_pair: BenchReport
) -> None:
    assert outage_report.algorithms["failover"].suited
    assert "failover" in outage_report.eligible
    table = to_table(outage_report)
    assert "N/A failover" not in table and "N/A sticky" in table
    wait, failover = outage_pair.algorithms["wait"], outage_pair.algorithms["failover"]
    assert [run.seed for run in failover.runs] == list(FIVE_SEEDS)
    for w, f, wm, fm in zip(wait.runs, failover.runs, wait.metrics, failover.metrics, strict=True):
        assert fm["completion"] is not None and wm["completion"] is not None
        assert fm["completion"] >= wm["completion"], w.seed
        # every seed met the outage: the primary answered 503s, wait never left it, failover did
        assert w.endpoints["primary-a"]["down"] > 0 and f.endpoints["primary-a"]["down"] > 0
        assert w.requests_by_endpoint["backup"] == 0 < f.requests_by_endpoint["backup"]


def test_cache_affinity_suits_least_busy_and_sticky_finds_warm_replicas(
    cache_report: BenchReport, cache_pair: BenchReport
) -> None:
    assert make_plan(BenchOptions(**CACHE)).algorithms == (
        "wait", "backoff", "sticky", "least_busy", "immediate",
    )  # fmt: skip
    assert cache_report.algorithms["least_busy"].suited
    assert not cache_report.algorithms["failover"].suited
    wait, sticky = cache_pair.algorithms["wait"], cache_pair.algorithms["sticky"]

    def warm_share(run: Any) -> float:
        counts = run.endpoints.values()
        return sum(c["warm"] for c in counts) / sum(c["admitted"] for c in counts)

    for w, s, wm, sm in zip(wait.runs, sticky.runs, wait.metrics, sticky.metrics, strict=True):
        assert warm_share(s) > warm_share(w), w.seed
        p50_sticky, p50_wait = sm["successful_job_latency_p50_ms"], wm["successful_job_latency_p50_ms"]
        assert p50_sticky is not None and p50_wait is not None
        assert p50_sticky < p50_wait, w.seed


def test_pools_outages_and_the_session_cache_are_checked_when_registered() -> None:
    endpoint = EndpointSpec(
        name="e",
        slots=1,
        server_concurrency=1,
        rate_per_s=1.0,
        burst=1.0,
        latency_median_s=0.1,
        latency_sigma=0.0,
    )
    other = dataclasses.replace(endpoint, name="f")

    def scenario(**fields: Any) -> Scenario:
        return Scenario(name="test_checked", description="", endpoints=(endpoint, other), **fields)

    with pytest.raises(ConfigError, match="exactly one pool"):
        scenario(pools=(PoolSpec("p", ("e",)),)).check()
    with pytest.raises(ConfigError, match="exactly one pool"):
        scenario(pools=(PoolSpec("p", ("e", "f")), PoolSpec("q", ("f",)))).check()
    with pytest.raises(ConfigError, match="unique"):
        scenario(pools=(PoolSpec("p", ("e",)), PoolSpec("p", ("f",)))).check()
    with pytest.raises(ConfigError, match="outage 0: needs endpoints"):
        scenario(outages=(Outage(("nope",), 1.0, 1.0),)).check()
    with pytest.raises(ConfigError, match="duration_s must be a positive number"):
        scenario(outages=(Outage(("e",), 1.0, 0.0),)).check()
    with pytest.raises(ConfigError, match="warm_factor must be a positive number"):
        scenario(warm_factor=0.0).check()
    scenario(
        pools=(PoolSpec("p", ("e",)), PoolSpec("q", ("f",))), outages=(Outage(("e",), 0.0, 5.0),)
    ).check()


def test_a_pool_beyond_recovery_is_a_stall_only_when_every_pool_is() -> None:
    """One dead pool while another can serve is a result (the algorithm reaches the other
    pool, or fails its jobs); every pool dead is a stall."""
    gone = EndpointSpec(
        name="gone", slots=2, server_concurrency=2, rate_per_s=100.0, burst=100.0,
        latency_median_s=0.1, latency_sigma=0.0, error_rate=1.0, degrade_after=1, dead_after=1,
    )  # fmt: skip
    spare = dataclasses.replace(gone, name="spare", error_rate=0.0)
    base = Scenario(
        name="test_half_dead",
        description="a dead primary pool and a healthy backup",
        endpoints=(gone, spare),
        pools=(PoolSpec("main", ("gone",)), PoolSpec("spare", ("spare",))),
        jobs=10,
        concurrency=2,
        horizon_s=60.0,
        retry=Retrying(max_attempts=3, base=0.1, cap=1.0),
        algorithm_params={"failover": {"pools": ("main", "spare")}},
    )
    register_scenario(base, replace=True)
    try:
        report = _report(scenario="test_half_dead", seeds=1, algorithms=["wait", "failover"])
        failover, wait = report.algorithms["failover"].runs[0], report.algorithms["wait"].runs[0]
        assert failover.jobs_done == failover.jobs_total > 0
        assert wait.jobs_done == 0 and wait.jobs_failed == wait.jobs_total
        register_scenario(
            dataclasses.replace(base, endpoints=(gone, dataclasses.replace(spare, error_rate=1.0))),
            replace=True,
        )
        with pytest.raises(BenchmarkStalled, match=r"pool 'main': .*gone dead.*pool 'spare': .*spare dead"):
            _report(scenario="test_half_dead", seeds=1, algorithms=["failover"])
    finally:
        unregister_scenario("test_half_dead")


# -- the winners rule on hand-made numbers ------------------------------------------------------

HIGH = Metric("m", "x", "higher", False, "")
LOW = Metric("m", "x", "lower", False, "")
GATED = Metric("g", "x", "lower", True, "")
NEUTRAL = Metric("n", "x", "neutral", False, "")


def _judge(metric: Metric, values: dict[str, list[float | None]], eligible: Any = None) -> Any:
    return judge(metric, values, suited=set(values), eligible=set(values) if eligible is None else eligible)


def test_the_best_mean_wins_and_a_clear_loser_does_not() -> None:
    verdict = _judge(HIGH, {"a": [10, 11, 12], "b": [5, 6, 7]})
    assert verdict.winners == ("a",) and verdict.best == "a" and verdict.note == ""


def test_lower_is_better_when_the_metric_says_so() -> None:
    assert _judge(LOW, {"a": [10, 11, 12], "b": [5, 6, 7]}).winners == ("b",)


def test_exact_ties_share_the_star() -> None:
    assert _judge(HIGH, {"a": [3, 4], "b": [3, 4], "c": [1, 1]}).winners == ("a", "b")


def test_differences_are_paired_by_seed() -> None:
    """b is 3 below a on every seed: a real difference, although the seeds swing by 100."""
    assert _judge(HIGH, {"a": [100, 200, 300], "b": [97, 197, 297]}).winners == ("a",)


def test_a_gap_within_two_standard_errors_is_a_tie() -> None:
    # differences b - a: 2, -6, 0 -> SE 2.4; the gap of 1.33 is inside 2 x SE
    assert _judge(HIGH, {"a": [10, 20, 30], "b": [12, 14, 30]}).winners == ("a", "b")


def test_a_gap_within_one_percent_is_a_tie() -> None:
    assert _judge(HIGH, {"a": [1000, 1000], "b": [995, 995]}).winners == ("a", "b")


def test_one_seed_the_best_mean_wins() -> None:
    verdict = _judge(HIGH, {"a": [10.0], "b": [9.99]})
    assert verdict.winners == ("a",) and "one seed" in verdict.note
    assert _judge(HIGH, {"a": [10.0], "b": [10.0]}).winners == ("a", "b")


def test_a_single_algorithm_is_never_crowned() -> None:
    verdict = _judge(HIGH, {"a": [10, 11]})
    assert verdict.winners == () and "single algorithm" in verdict.note


def test_a_lone_survivor_is_named_but_not_crowned() -> None:
    verdict = _judge(GATED, {"a": [1, 1], "b": [0.5, 0.5]}, eligible={"a"})
    assert verdict.winners == () and "only a" in verdict.note


def test_neutral_metrics_have_no_winner() -> None:
    verdict = _judge(NEUTRAL, {"a": [1, 2], "b": [5, 6]})
    assert verdict.winners == () and "neutral" in verdict.note


def test_all_zero_has_no_winner() -> None:
    verdict = _judge(LOW, {"a": [0, 0], "b": [0, 0]})
    assert verdict.winners == () and verdict.note == "all zero"


def test_an_undefined_value_drops_out() -> None:
    verdict = _judge(LOW, {"a": [1, None], "b": [2, 2], "c": [2, 2]})
    assert "a" not in verdict.competitors and verdict.winners == ("b", "c")


def test_eligibility_is_90_percent_of_the_best_suited_completion() -> None:
    completion: dict[str, list[float]] = {
        "a": [1.0, 1.0],
        "b": [0.9, 0.9],
        "c": [0.89, 0.89],
        "u": [1.0, 1.0],
    }
    baseline, eligible = eligibility(completion, suited={"a", "b", "c"})
    assert baseline == 1.0 and eligible == ("a", "b")
    # an unsuited algorithm never sets the baseline
    baseline, eligible = eligibility({"a": [0.5, 0.5], "u": [1.0, 1.0]}, suited={"a"})
    assert baseline == 0.5 and eligible == ("a",)


def test_unsuited_algorithms_never_win_even_with_the_best_numbers() -> None:
    verdict = judge(HIGH, {"a": [1, 1], "b": [2, 2], "u": [9, 9]}, suited={"a", "b"}, eligible={"a", "b"})
    assert verdict.winners == ("b",)


# -- guards -----------------------------------------------------------------------------------------


@pytest.fixture
def dead_world() -> Iterator[str]:
    register_dead()
    yield DEAD
    unregister_scenario(DEAD)


def test_a_world_where_every_endpoint_is_dead_stalls_at_once(dead_world: str) -> None:
    with pytest.raises(BenchmarkStalled, match=r"no endpoint can be leased again.*gone dead"):
        _report(scenario=dead_world, seeds=1, algorithms=["wait"])


def test_a_failed_run_leaves_no_task_error_unretrieved(
    dead_world: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Several workers meet the dead world in the same step; only the first error ends the run,
    and the others must not be logged later as "exception was never retrieved"."""
    with pytest.raises(BenchmarkStalled):
        _report(scenario=dead_world, seeds=1, algorithms=["wait"])
    gc.collect()
    assert "never retrieved" not in caplog.text


@pytest.mark.parametrize("algorithm", ["backoff", "immediate", "sticky", "quota_aware"])
def test_every_algorithm_meets_the_dead_world_guard(dead_world: str, algorithm: str) -> None:
    with pytest.raises(BenchmarkStalled):
        _report(scenario=dead_world, seeds=1, algorithms=[algorithm])


def test_a_spinning_algorithm_is_stopped_by_the_wall_budget_as_stalled() -> None:
    plan = make_plan(
        BenchOptions(jobs=5, seeds=1, algorithms=["spin"], wall_budget_s=1.5),
        registry=registry_with(spin=Spin),
    )
    with pytest.raises(BenchmarkTimeout, match=r"wall budget of 1\.5s: stalled"):
        run_bench(plan)


def test_an_algorithm_that_blocks_the_loop_is_stopped_by_the_wall_budget() -> None:
    """``time.sleep(3600)`` inside an async method never lets the loop run the cancel: the
    watchdog interrupts the blocked thread, and the run ends with the blocked-loop error."""

    class Short(Block):
        # long enough that the budget (1 s) and the grace (2 s) end first; short enough that,
        # were no call interrupted, the test would fail on ``completed`` within its timeout
        seconds = 15.0
        completed = 0

    before = signal.getsignal(signal.SIGUSR1)
    plan = make_plan(
        BenchOptions(jobs=5, seeds=1, algorithms=["block"], wall_budget_s=1.0),
        registry=registry_with(block=Short),
    )
    with pytest.raises(BenchmarkTimeout, match=r"wall budget of 1s: the event loop was blocked"):
        run_bench(plan)
    assert Short.completed == 0  # every blocking call was cut short, none slept to its end
    assert signal.getsignal(signal.SIGUSR1) is before  # the handler is put back


def test_a_blocking_algorithm_from_the_command_line_is_exit_2() -> None:
    """The same through ``pyattacker bench`` in a real process, where the run is on the main
    thread of the command (the test fails by its timeout if the process is never stopped)."""
    code = (
        "from tests.support.bench import Block\n"
        "from pyattacker.plugins.manager import get_plugins\n"
        "from pyattacker.plugins.registry import Provided\n"
        "get_plugins().algorithms.add(Provided('algorithms', 'block', Block, 'test-plugin', False))\n"
        "from pyattacker.cli.main import main\n"
        "main(['bench', '--algorithms', 'block', '--seeds', '1', '--jobs', '4', '--wall-budget', '1'])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 2, proc.stderr
    assert "BenchmarkTimeout" in proc.stderr and "the event loop was blocked" in proc.stderr
    assert proc.stdout == ""


def test_jobs_that_never_drain_after_the_horizon_are_a_stall() -> None:
    plan = make_plan(
        BenchOptions(jobs=5, seeds=1, algorithms=["poll"], horizon_s=10.0),
        registry=registry_with(poll=Poll),
    )
    with pytest.raises(BenchmarkStalled, match=r"5 job\(s\) still unfinished"):
        run_bench(plan)


def test_a_third_party_algorithm_is_benchmarked_through_the_registry() -> None:
    from pyattacker_plugins.algo_wait import Wait

    class Polite(Wait):
        name = "polite"

    plan = make_plan(BenchOptions(jobs=20, seeds=1), registry=registry_with(polite=Polite))
    assert "polite" in plan.algorithms
    report = run_bench(plan)
    assert report.algorithms["polite"].runs[0].jobs_done > 0


def test_pool_cooldowns_follow_the_scaled_clock() -> None:
    """On ``--clock real`` the loop's time and the pool's clock are the same compressed time,
    so a 20 s cooldown ends after 20 simulated seconds (a tenth of a real second at x200)."""
    from pyattacker import Pool, Resource
    from pyattacker_plugins.bench.clocks import ScaledClock

    clock = ScaledClock(200.0)

    async def main() -> float:
        resource = Resource.create("x", id="r", degrade_after=1, cooldown_s=20.0)
        pool = Pool("p", [resource], clock=clock, algorithms=get_plugins().algorithms)
        lease = pool.try_acquire()
        assert lease is not None
        lease.report(ok=False)  # degraded: not leasable for 20 simulated seconds
        lease.release_now()
        again = await pool.acquire(algorithm="wait")
        again.release_now()
        assert abs(asyncio.get_running_loop().time() - clock.now()) < 1.0
        return clock.now()

    loop = clock.new_event_loop()
    try:
        assert loop.run_until_complete(main()) >= 20.0
    finally:
        loop.close()


# -- scenarios ----------------------------------------------------------------------------------


def test_scenarios_are_registered_once_and_checked() -> None:
    base = get_scenario(DEFAULT_SCENARIO)
    with pytest.raises(ConfigError, match="already registered"):
        register_scenario(base)
    with pytest.raises(ConfigError, match="at least one endpoint"):
        register_scenario(Scenario(name="empty", description="", endpoints=()))
    with pytest.raises(
        ConfigError, match=r"--scenario: unknown scenario 'bursty'.*did you mean 'bursty_provider'"
    ):
        get_scenario("bursty")


def test_overrides_apply_to_the_plan_and_seeds_count_from_the_scenario() -> None:
    plan = make_plan(BenchOptions(jobs=7, concurrency=3, horizon_s=30.0, seeds=4))
    assert (plan.scenario.jobs, plan.scenario.concurrency, plan.scenario.horizon_s) == (7, 3, 30.0)
    assert plan.seeds == (1, 2, 3, 4)
    assert get_scenario(DEFAULT_SCENARIO).jobs == 3000  # the registered scenario is untouched


def test_reports_render(report: BenchReport) -> None:
    table = to_table(report)
    assert "mean ± stdev (min/max) over 2 seed(s)" in table
    assert all(m.name in table for m in METRICS)
    markdown = to_markdown(report)
    assert "## Per-endpoint admission" in markdown and "| fast-flaky |" in markdown


# -- the command line (real subprocesses) -----------------------------------------------------------


def _bench(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pyattacker", "bench", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env=env,
    )


def test_list_prints_scenarios_algorithms_and_metrics() -> None:
    proc = _bench("--list")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "bursty_provider" in out and "unsuited: failover" in out
    scenarios = out[: out.index("algorithms (installed):")]
    outage = scenarios[scenarios.index("  outage_failover:") :]
    assert "pools: primary (primary-a, primary-b); backup (backup)" in outage
    assert "suited: wait, backoff, failover, immediate\n" in outage
    assert "unsuited: sticky (" in outage and "unsuited: least_busy (" in outage
    cache = scenarios[scenarios.index("  cache_affinity:") : scenarios.index("  outage_failover:")]
    assert "suited: wait, backoff, sticky, least_busy, immediate\n" in cache
    assert "unsuited: failover (one pool" in cache and "unsuited: quota_aware (" in cache
    assert all(name in out for name in ALL)
    assert "throughput_rps" in out and "jobs/s" in out and "higher†" in out
    assert "leases_active_at_end" in out and "(must be 0)" in out


@pytest.mark.parametrize(
    ("args", "flag", "words"),
    [
        (["--seeds", "0"], "--seeds", "at least 1"),
        (["--seeds", "x"], "--seeds", "not a valid integer"),
        (["--jobs", "0"], "--jobs", "at least 1"),
        (["--concurrency", "-1"], "--concurrency", "at least 1"),
        (["--horizon", "0"], "--horizon", "positive"),
        (["--horizon", "nan"], "--horizon", "positive"),
        (["--wall-budget", "0"], "--wall-budget", "positive"),
        (["--speedup", "0"], "--speedup", "positive"),
        (["--speedup", "-2", "--clock", "real"], "--speedup", "positive"),
        (["--clock", "fast"], "--clock", "fast"),
        (["--scenario", "nope"], "--scenario", "unknown scenario 'nope'"),
        (["--algorithms", "wiat"], "--algorithms", "did you mean 'wait'"),
        (["--algorithms", "wait,wait"], "--algorithms", "twice"),
        (["--algorithms", ""], "--algorithms", "names"),
        (["--json", "/dev/null/sub/r.json"], "--json", "not a directory"),  # a missing one is made
        (["--json", "-", "--markdown", "-"], "--markdown", "stdout"),
    ],
)
def test_a_bad_flag_is_exit_2_naming_it_before_any_progress(args: list[str], flag: str, words: str) -> None:
    proc = _bench(*args)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert flag in proc.stderr and words in proc.stderr
    assert "bench bursty_provider:" not in proc.stderr  # the progress header never started


def test_json_to_stdout_is_one_document_and_the_same_in_any_process() -> None:
    args = ("--jobs", "20", "--seeds", "1", "--algorithms", "wait,backoff", "--json", "-", "--quiet")
    env = dict(os.environ)
    docs = []
    for hash_seed in ("1", "2"):
        proc = subprocess.run(
            [sys.executable, "-m", "pyattacker", "bench", *args],
            capture_output=True,
            text=True,
            timeout=120,
            env={**env, "PYTHONHASHSEED": hash_seed},
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr == ""
        docs.append(json.loads(proc.stdout))
    assert _without_wall(docs[0]) == _without_wall(docs[1])
    assert docs[0]["algorithms"]["wait"]["runs"][0]["metrics"]["jobs_done"] == 20


def test_json_and_markdown_files_are_written_and_the_table_still_printed(tmp_path: Path) -> None:
    proc = _bench(
        "--jobs", "20", "--seeds", "2", "--algorithms", "wait,sticky",
        "--json", str(tmp_path / "r.json"), "--markdown", str(tmp_path / "r.md"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "bench bursty_provider: 2 algorithm(s) x 2 seed(s)" in proc.stderr
    assert proc.stdout.startswith("scenario bursty_provider: 20 jobs")
    assert json.loads((tmp_path / "r.json").read_text())["seeds"] == [1, 2]
    markdown = (tmp_path / "r.md").read_text()
    assert "# bench: bursty_provider" in markdown and "## Per-endpoint admission" in markdown
    assert "### sticky" in markdown and "| metered |" in markdown


def test_the_outage_scenario_from_the_command_line() -> None:
    # a terminal wide enough for the table (at 80 columns it is stacked: tests/cli/test_narrow_output.py)
    wide = {**os.environ, "COLUMNS": "200"}
    proc = _bench("--scenario", "outage_failover", "--jobs", "250", "--seeds", "1", "--quiet", env=wide)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("scenario outage_failover: 250 jobs x 3 steps x 2 calls, 8 workers")
    head = proc.stdout.splitlines()[2].split()
    assert head[:3] == ["metric", "unit", "better"]
    assert head[3:] == ["wait", "backoff", "failover", "immediate"]
    assert "\ncompletion " in proc.stdout and "N/A" not in proc.stdout


def test_a_dead_world_from_the_command_line_is_exit_2() -> None:
    code = (
        "from tests.support.bench import register_dead\n"
        "register_dead()\n"
        "from pyattacker.cli.main import main\n"
        f"main(['bench', '--scenario', {DEAD!r}, '--seeds', '1'])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 2, proc.stderr
    assert "BenchmarkStalled" in proc.stderr and proc.stdout == ""


def test_a_spent_wall_budget_is_exit_2_and_no_table() -> None:
    proc = _bench("--wall-budget", "0.001", "--seeds", "1", "--algorithms", "wait")
    assert proc.returncode == 2, proc.stderr
    assert "BenchmarkTimeout" in proc.stderr and "wall budget of 0.001s" in proc.stderr
    assert proc.stdout == ""


def test_a_tiny_run_on_the_scaled_real_clock() -> None:
    proc = _bench(
        "--clock", "real", "--speedup", "50", "--jobs", "6", "--seeds", "1",
        "--algorithms", "wait", "--json", "-", "--quiet",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["clock"] == "real" and data["speedup"] == 50.0
    run = data["algorithms"]["wait"]["runs"][0]["metrics"]
    assert run["jobs_done"] + run["jobs_failed"] == 6 and run["leases_active_at_end"] == 0


def test_help_does_not_import_the_simulator() -> None:
    code = (
        "import sys\n"
        "from pyattacker.cli.main import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('pyattacker_plugins.bench')), file=sys.stderr)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "bench" in proc.stdout
    loaded = proc.stderr.strip().splitlines()[-1]
    assert "driver" not in loaded and "world" not in loaded and "api" not in loaded


# -- the docs cannot fall behind --------------------------------------------------------------------


def test_every_metric_is_documented_and_every_flag_listed() -> None:
    from pyattacker_plugins.bench.command import bench_command

    benchmark = (REPO / "docs" / "benchmark.md").read_text()
    for metric in METRICS:
        stem = metric.name.removesuffix("_p95_ms").removesuffix("_p99_ms")
        assert f"`{metric.name}`" in benchmark or f"`{stem}" in benchmark, metric.name
        assert metric.unit in benchmark
    cli = (REPO / "docs" / "cli.md").read_text()
    section = cli[cli.index("## `bench`") :]
    for param in bench_command.params:
        for flag in param.opts:
            assert f"`{flag}" in section, flag


def test_declared_rate_limits_avoid_429s_at_the_keys_combined_rate() -> None:
    """Keys limited by rpm/tpm: with the limits declared the pool sends no request the provider
    refuses and still uses the keys' combined rate; with capacity caps alone it collects 429s."""
    # the scenario's own 10 minutes: a sliding window lets a full minute's budget through at the
    # start, which a short run would count as a rate above the limit
    options = {"algorithms": ("wait", "backoff"), "seeds": 1, "wall_budget_s": 1800.0}  # a loaded machine
    declared = run_bench(make_plan(BenchOptions(scenario="rate_limited_keys", **options)))
    undeclared = run_bench(make_plan(BenchOptions(scenario="rate_limited_keys_undeclared", **options)))
    for name in ("wait", "backoff"):
        (limited,) = declared.algorithms[name].metrics
        (capped,) = undeclared.algorithms[name].metrics
        assert (limited["refusal_rate"] or 0.0) <= 0.01, name
        assert 0.95 <= (limited["rate_limit_use"] or 0.0) <= 1.1, name  # within 5 % of the combined rpm
        assert (capped["refusal_rate"] or 0.0) > 0.05, name  # capacity caps alone hammer the keys
