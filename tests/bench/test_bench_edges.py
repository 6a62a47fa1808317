"""``pyattacker bench`` at its edges: hostile algorithms and scenarios, odd flag values, outputs,
signals. Each test here pins a defect found by a bug hunt (it failed before its fix)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from pyattacker import Lease, Pool, Resource
from pyattacker_plugins.bench.api import BenchOptions, make_plan, run_bench
from pyattacker_plugins.bench.errors import BenchmarkError
from tests.support.bench import registry_with


class _Hostile:
    name = "hostile"

    def fingerprint(self) -> dict[str, Any]:
        return {"name": self.name}


class RaisesInAcquire(_Hostile):
    async def acquire(
        self, pool: Any, *, ctx: Any, where: Any, timeout: float | None, selector: Mapping[str, Any]
    ) -> Any:
        raise KeyError("no such thing")


class RaisesInTryNow(_Hostile):
    def try_now(self, pool: Any, *, ctx: Any, where: Any, selector: Mapping[str, Any]) -> Any:
        return 1 / 0

    async def acquire(
        self, pool: Any, *, ctx: Any, where: Any, timeout: float | None, selector: Mapping[str, Any]
    ) -> Any:
        raise AssertionError("not reached")


class ReturnsNone(_Hostile):
    async def acquire(
        self, pool: Any, *, ctx: Any, where: Any, timeout: float | None, selector: Mapping[str, Any]
    ) -> Any:
        return None


#: a pool of the same name and resource names as the benchmark's, but not the run's own
_FOREIGN = Pool("bench", [Resource.create("endpoint", id="fast-flaky", capacity=10_000)])


class ForeignLease(_Hostile):
    async def acquire(
        self, pool: Any, *, ctx: Any, where: Any, timeout: float | None, selector: Mapping[str, Any]
    ) -> Lease:
        return await _FOREIGN.acquire(ctx)


class ReleasedLease(_Hostile):
    async def acquire(
        self, pool: Any, *, ctx: Any, where: Any, timeout: float | None, selector: Mapping[str, Any]
    ) -> Lease:
        from pyattacker.resources.algorithm import resolve_algorithm

        lease: Lease = await resolve_algorithm("wait").acquire(
            pool, ctx=ctx, where=where, timeout=timeout, selector=selector
        )
        lease.release_now()
        return lease


@pytest.mark.parametrize(
    ("factory", "words"),
    [
        (RaisesInAcquire, "raised KeyError in acquire"),
        (RaisesInTryNow, "raised ZeroDivisionError in try_now"),
        (ReturnsNone, "acquire returned NoneType, not a Lease"),
        (ForeignLease, "not one of this run's pools"),
        (ReleasedLease, "already released"),
    ],
)
def test_an_algorithm_that_breaks_its_contract_ends_the_benchmark_naming_it(
    factory: type, words: str
) -> None:
    """Before: the bug was counted as failed jobs (or, for a foreign or released lease, as
    successful ones past the pool's capacity) and the table crowned the others, exit 0."""
    plan = make_plan(
        BenchOptions(jobs=10, seeds=1, algorithms=["wait", "hostile"]),
        registry=registry_with(hostile=factory),
    )
    with pytest.raises(BenchmarkError, match="algorithm 'hostile'") as caught:
        run_bench(plan)
    assert type(caught.value).__name__ == "AlgorithmFault"
    assert words in str(caught.value)


def test_acquisition_failures_an_algorithm_raises_on_purpose_are_still_task_failures() -> None:
    from pyattacker import FatalError

    class GivesUp(_Hostile):
        async def acquire(
            self, pool: Any, *, ctx: Any, where: Any, timeout: float | None, selector: Mapping[str, Any]
        ) -> Any:
            raise FatalError("no budget left for this job")

    plan = make_plan(
        BenchOptions(jobs=5, seeds=1, algorithms=["hostile"]), registry=registry_with(hostile=GivesUp)
    )
    report = run_bench(plan)
    assert report.algorithms["hostile"].runs[0].jobs_failed == 5


if sys.platform == "win32":  # pragma: no cover
    pytestmark = pytest.mark.skip("POSIX signals")


class BreaksAtBuild(_Hostile):
    def __init__(self) -> None:
        raise RuntimeError("cannot start")

    async def acquire(
        self, pool: Any, *, ctx: Any, where: Any, timeout: float | None, selector: Mapping[str, Any]
    ) -> Any:
        raise AssertionError("not reached")


def test_an_algorithm_that_raises_at_build_is_a_config_error_naming_it() -> None:
    """Before: the factory's RuntimeError escaped make_plan (a traceback, exit 1)."""
    from pyattacker import ConfigError

    registry = registry_with(hostile=BreaksAtBuild)
    with pytest.raises(
        ConfigError, match=r"--algorithms: algorithm 'hostile' could not be built: RuntimeError"
    ):
        make_plan(BenchOptions(jobs=5, seeds=1, algorithms=["wait", "hostile"]), registry=registry)
    plan = make_plan(BenchOptions(jobs=5, seeds=1), registry=registry)  # the default set skips it
    assert "hostile" not in plan.algorithms and "cannot start" in plan.skipped["hostile"]


# -- the command line -------------------------------------------------------------------------


def _bench(*args: str, cwd: Any = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pyattacker", "bench", *args],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=cwd,
    )


@pytest.mark.parametrize("markdown", ["r.out", "./r.out", "link.out"])
def test_json_and_markdown_to_the_same_file_is_refused_before_the_run(tmp_path: Path, markdown: str) -> None:
    """Before: both were written, the markdown silently replacing the JSON (exit 0)."""
    (tmp_path / "link.out").symlink_to(tmp_path / "r.out")
    (tmp_path / "r.out").write_text("")
    proc = _bench("--jobs", "5", "--seeds", "1", "--json", "r.out", "--markdown", markdown, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "--json and --markdown both name" in proc.stderr
    assert "bench bursty_provider:" not in proc.stderr and proc.stdout == ""


def test_list_with_a_run_flag_is_refused_naming_it() -> None:
    """Before: `--list --scenario nope --seeds 0` listed and exited 0, the flags ignored."""
    proc = _bench("--list", "--scenario", "nope", "--seeds", "0")
    assert proc.returncode == 2, proc.stderr
    assert "--list" in proc.stderr and "--scenario, --seeds" in proc.stderr
    assert proc.stdout == ""
    alone = _bench("--list")
    assert alone.returncode == 0 and alone.stdout.startswith("scenarios:")


@pytest.mark.timeout(30)  # the hang guard: before the fix this never returned
def test_a_huge_seed_count_is_refused_at_once_naming_the_flag() -> None:
    """Before: `--seeds 10**21` built the list of seeds before the first line (a hang)."""
    from pyattacker import ConfigError

    with pytest.raises(ConfigError, match=r"--seeds must be at most \d+, got 1000000000000000000000"):
        make_plan(BenchOptions(seeds=10**21))
    assert len(make_plan(BenchOptions(seeds=1)).seeds) == 1


def test_workers_beyond_the_job_count_are_not_started(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: `--concurrency 3000000 --jobs 5` made three million tasks (gigabytes, minutes)
    that each found no job; the numbers are the same without them."""
    from pyattacker_plugins.bench import driver

    started = 0
    real = driver._Run._worker

    async def counted(self: Any) -> None:
        nonlocal started
        started += 1
        await real(self)

    monkeypatch.setattr(driver._Run, "_worker", counted)
    few = run_bench(make_plan(BenchOptions(jobs=3, concurrency=1000, seeds=1, algorithms=["wait"])))
    assert started == 3
    assert few.algorithms["wait"].runs[0].jobs_done == 3


def test_a_tiny_speedup_ends_with_the_wall_budget_not_an_overflow() -> None:
    """Before: the selector's real timeout (simulated seconds / 1e-300) overflowed poll():
    OverflowError, a traceback and exit 1."""
    from pyattacker_plugins.bench.errors import BenchmarkTimeout

    plan = make_plan(
        BenchOptions(jobs=5, seeds=1, algorithms=["wait"], clock="real", speedup=1e-300, wall_budget_s=0.5)
    )
    lines: list[str] = []
    with pytest.raises(BenchmarkTimeout, match=r"wall budget of 0\.5s"):
        run_bench(plan, progress=lines.append)
    assert "about 6e+302s a run" in lines[0]


def test_a_real_clock_run_in_which_no_job_started_is_an_error_not_a_table() -> None:
    """Before: at --speedup 1e300 the horizon passed before the first worker ran; the run
    reported 0 done, every job unstarted, simulated 1e+297 s, and exit 0."""
    plan = make_plan(BenchOptions(jobs=5, seeds=1, algorithms=["wait"], clock="real", speedup=1e300))
    with pytest.raises(
        BenchmarkError, match=r"algorithm 'wait', seed 1: no job started before the 600s horizon"
    ):
        run_bench(plan)


# -- scenarios a plugin registers -----------------------------------------------------------------


def _endpoint(**changes: Any) -> Any:
    from pyattacker_plugins.bench.scenario import EndpointSpec

    base = EndpointSpec(
        name="e",
        slots=2,
        server_concurrency=2,
        rate_per_s=5.0,
        burst=2.0,
        latency_median_s=0.1,
        latency_sigma=0.1,
    )
    return dataclasses.replace(base, **changes)


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"endpoints": (_endpoint(slots=True),)}, "slots must be an integer >= 1, got True"),
        ({"jobs": True}, "jobs must be an integer >= 1, got True"),
        ({"seed": 1.5}, "seed must be an integer, got 1.5"),
        ({"seed": float("nan")}, "seed must be an integer"),
        ({"retry": None}, "retry must be a Retrying policy"),
        ({"description": None}, "description must be a string"),
        ({"cycle_peak": float("inf")}, "cycle_peak must be a positive number"),
        ({"endpoints": (_endpoint(burst=0.5),)}, "burst must be >= 1"),
        ({"endpoints": (_endpoint(tokens_per_request=(1, 2, 3)),)}, "tokens_per_request must be (low, high)"),
        ({"endpoints": (_endpoint(tokens_per_request=(0.5, 1.5)),)}, "tokens_per_request"),
        ({"endpoints": (_endpoint(name=7),)}, "an endpoint needs a name"),
        ({"unsuited": {"wait": 5}}, "unsuited maps an algorithm name to why"),
        ({"outages": ("OUTAGE",)}, "takes every endpoint down for the whole 60s horizon"),
        ({"outages": ("STRING",)}, "endpoints must be a tuple of names, got 'e'"),
    ],
)
def test_registration_refuses_a_bad_world_naming_the_field(changes: dict[str, Any], words: str) -> None:
    """Before: each of these registered, then crashed mid-run (a traceback), measured a world
    where nothing can succeed, or ran with a bool as a count."""
    from pyattacker import ConfigError
    from pyattacker_plugins.bench.scenario import Outage, Scenario, register_scenario, unregister_scenario

    if changes.get("outages") == ("OUTAGE",):
        changes = {"outages": (Outage(("e",), start_s=0.0, duration_s=1e9),)}
    elif changes.get("outages") == ("STRING",):
        changes = {"outages": (Outage("e", start_s=0.0, duration_s=1.0),)}  # type: ignore[arg-type]
    world = Scenario(name="test_bad_world", description="", endpoints=(_endpoint(),), horizon_s=60.0)
    try:
        with pytest.raises(ConfigError) as caught:
            register_scenario(dataclasses.replace(world, **changes))
        assert words in str(caught.value)
    finally:
        unregister_scenario("test_bad_world")


# -- the winners rule -------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_value_that_is_not_a_finite_number_drops_out_like_an_undefined_one(bad: float) -> None:
    """Before: a NaN reached statistics.stdev (AttributeError) or won through a NaN comparison."""
    from pyattacker_plugins.bench.metrics import metric
    from pyattacker_plugins.bench.winners import judge, summarize

    for name in ("jobs_done", "error_rate"):
        verdict = judge(
            metric(name),
            {"a": [bad, 1.0], "b": [1.0, 1.0], "c": [0.5, 0.5]},
            suited="abc",
            eligible="abc",
        )
        assert "a" not in verdict.competitors
        assert verdict.winners == (("b",) if name == "jobs_done" else ("c",))
    summary = summarize([bad, 1.0, 3.0])
    assert (summary.mean, summary.n) == (2.0, 2)


def test_an_output_that_cannot_be_written_is_refused_before_the_run(tmp_path: Path) -> None:
    """A file no one may create (here under /proc, which refuses even root) was found only after
    the whole run, which was then lost. The check of a writable output creates nothing that
    stays: the JSON file checked first is gone again when the markdown one is refused."""
    proc = _bench(
        "--json", str(tmp_path / "new.json"), "--markdown", "/proc/pyattacker-bench.md",
        "--jobs", "5", "--seeds", "1",
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "--markdown: cannot write /proc/pyattacker-bench.md" in proc.stderr
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    assert "bench bursty_provider:" not in proc.stderr  # no progress: nothing ran
    assert not (tmp_path / "new.json").exists()
