"""The closed-loop client: workers drive jobs through the real pool, algorithm and retry policy.

There is no Runner here: its real-time machinery (write-behind, admission, signals) has no
place in simulated time. What a task attempt does with a pool is reproduced instead, with the
kernel's own pieces: ``Pool.try_now``/``Pool.acquire`` through the algorithm under test,
``Lease.report`` (the only input of resource health), ``release_now`` in a ``finally``,
``error_class_of`` (through ``Retrying.decide``) and the retry delay slept on the pool's clock.

A worker takes the next job, runs its steps in order (each step is the retry unit, like a task,
and makes ``calls`` requests, each under its own lease) and takes the next job until the
horizon passes; jobs already started always finish. The worker stays with its job through
retry delays, like a client that sleeps between attempts.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pyattacker import FatalError, Lease, Pool, Resource, ResourceUnavailable, RetryableError
from pyattacker.plugins.registry import Registry
from pyattacker.resources.algorithm import resolve_algorithm

from .clocks import make_clock
from .errors import AlgorithmFault, BenchmarkError, BenchmarkStalled, BenchmarkTimeout
from .keys import keyed_rng
from .scenario import EndpointSpec, Scenario
from .watchdog import BLOCKED_GRACE_S, LoopBlocked, Watchdog, interruptible
from .world import NOT_ADMITTED, REFUSED, World

__all__ = ["BenchContext", "RunResult", "RunSettings", "run_once"]

#: simulated seconds between two checks that in-flight jobs still drain after the horizon
GUARD_TICK_S = 5.0
#: jobs in flight at the horizon get at least this long (simulated) to finish
MIN_DRAIN_S = 3600.0
#: a wall-budget overrun counts as a stall when nothing finished for this long (real seconds),
#: or for a tenth of the budget if that is longer (on the real clock a slow request is no stall)
STALL_AFTER_S = 1.0
#: what an algorithm may raise when it cannot (or will not) lease: the task-like failures a real
#: attempt meets in acquire, which the retry policy then judges. Anything else (an AttributeError,
#: a KeyError, a ConfigError...) is a bug of the algorithm, not an outcome of the world: it ends
#: the benchmark (``AlgorithmFault``) instead of being counted as failed jobs under its name.
ACQUIRE_FAILURES = (ResourceUnavailable, RetryableError, FatalError, TimeoutError)


@dataclass(frozen=True)
class RunSettings:
    """One run: a scenario (with the overrides already applied), one algorithm, one seed."""

    scenario: Scenario
    algorithm: str
    seed: int
    clock: str = "virtual"
    speedup: float = 10.0
    wall_budget_s: float = 600.0


@dataclass
class RunResult:
    """The raw counts of one run; ``metrics.compute`` turns them into the reported metrics."""

    algorithm: str
    seed: int
    jobs_total: int
    steps: int
    calls: int
    slots: int
    jobs_started: int = 0
    jobs_done: int = 0
    jobs_failed: int = 0
    makespan_s: float = 0.0
    steps_started: int = 0
    steps_retried: int = 0
    step_attempts: int = 0
    failed_attempts: int = 0
    requests: int = 0
    refused: int = 0
    errored: int = 0
    ok_busy_s: float = 0.0
    job_latencies_s: list[float] = field(default_factory=list)
    acquire_waits_s: list[float] = field(default_factory=list)
    request_latencies_s: list[float] = field(default_factory=list)
    requests_by_endpoint: dict[str, int] = field(default_factory=dict)
    endpoints: dict[str, dict[str, Any]] = field(default_factory=dict)
    decisions: dict[str, int] = field(default_factory=dict)
    error_classes: dict[str, int] = field(default_factory=dict)
    leases_active_at_end: int = 0
    #: the endpoints' provider rpm together (worlds where every endpoint has one), else None
    combined_rpm: float | None = None
    sim_end_s: float = 0.0
    wall_s: float = 0.0


class BenchContext:
    """What the algorithm sees of a step attempt (the ``AcquireContext`` protocol).

    Its ``rng`` is keyed by (seed, "acquire", job, step, attempt), so an algorithm's jitter never
    depends on what other workers drew; ``meta`` is fresh per attempt, like a task's.
    """

    __slots__ = ("_key", "_rng", "held_leases", "meta", "pipeline_id", "pools", "task_name")

    def __init__(self, pools: dict[str, Pool], seed: int, job: int, step: int, attempt: int) -> None:
        self._key = (seed, "acquire", job, step, attempt)
        self._rng: Any = None
        self.pools = pools
        self.meta: dict[str, Any] = {}
        self.task_name = f"step{step}"
        self.pipeline_id = f"job{job}"
        self.held_leases: list[Lease] = []

    @property
    def rng(self) -> Any:
        if self._rng is None:
            self._rng = keyed_rng(*self._key)
        return self._rng

    def emit(self, kind: str, **data: Any) -> None:
        """Algorithms emit task events (``acquire.backoff``); a benchmark has no store for them."""


class _Run:
    """The state of one run while it is going."""

    def __init__(self, settings: RunSettings, registry: Registry) -> None:
        scenario = settings.scenario
        self.settings = settings
        self.scenario = scenario
        self.seed = settings.seed
        self.clock = make_clock(settings.clock, settings.speedup)
        self.world = World(scenario, settings.seed)
        specs = {e.name: e for e in scenario.endpoints}
        #: every pool of the scenario, in its order; requests ask the first one (the task's
        #: pool), and ``ctx.pools`` shows the others to an algorithm that can use them
        self.pools = {
            layout.name: Pool(
                layout.name,
                [
                    Resource.create(
                        "endpoint",
                        id=e.name,
                        capacity=e.slots,
                        options={"quota": {"tokens": e.quota_tokens}} if e.quota_tokens is not None else {},
                        limits=_declared_limits(e) if scenario.declare_limits else None,
                        degrade_after=e.degrade_after,
                        dead_after=e.dead_after,
                        cooldown_s=e.cooldown_s,
                    )
                    for e in (specs[name] for name in layout.endpoints)
                ],
                clock=self.clock,
                deadlock_warn_s=None,
                algorithms=registry,
            )
            for layout in scenario.pool_layout()
        }
        self.pool = next(iter(self.pools.values()))
        #: with declared token limits a request asks with its estimate (the most it can spend)
        #: and a failed one settles to 0; else it asks with nothing
        declared_tpm = scenario.declare_limits and any(e.tpm is not None for e in scenario.endpoints)
        self.selector: dict[str, Any] = (
            {"tokens": max(e.tokens_per_request[1] for e in scenario.endpoints)} if declared_tpm else {}
        )
        self.failed_usage: dict[str, float] | None = {"tokens": 0} if declared_tpm else None
        try:
            self.algorithm = resolve_algorithm(scenario.algorithm_spec(settings.algorithm), registry)
        except Exception as exc:  # built once by make_plan already: this factory is not reliable
            raise AlgorithmFault(
                f"{self._where()}: the algorithm could not be built: {type(exc).__name__}: {exc}"
            ) from None
        self.result = RunResult(
            algorithm=settings.algorithm,
            seed=settings.seed,
            jobs_total=scenario.jobs,
            steps=scenario.steps,
            calls=scenario.calls,
            slots=scenario.slots,
            combined_rpm=scenario.combined_rpm,
        )
        self.by_endpoint: Counter[str] = Counter()
        self.decisions: Counter[str] = Counter()
        self.error_classes: Counter[str] = Counter()
        self.next_job = 0
        #: bumped whenever something finishes; the wall-budget watchdog reads it from its thread
        self.progress = 0

    # -- the client ----------------------------------------------------------------------------
    async def main(self) -> None:
        # a worker beyond the job count would find no job and end at once: not starting it gives
        # the same run, without a task per worker of a --concurrency far above --jobs
        count = min(self.scenario.concurrency, self.scenario.jobs)
        workers = {asyncio.create_task(self._worker()) for _ in range(count)}
        guard = asyncio.create_task(self._drain_guard())
        pending: set[asyncio.Task[None]] = {*workers, guard}
        try:
            while workers & pending:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    task.result()  # the first error ends the run (the others are cancelled below)
        finally:
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            for task in (*workers, guard):
                if task.done() and not task.cancelled():
                    # a second worker that failed in the same step: retrieved here, or its task
                    # would log "exception was never retrieved" whenever it is collected
                    task.exception()

    async def _worker(self) -> None:
        s = self.scenario
        now = self.clock.now
        while self.next_job < s.jobs and now() < s.horizon_s:
            job = self.next_job
            self.next_job += 1
            await self._job(job)

    async def _job(self, job: int) -> None:
        r = self.result
        start = self.clock.now()
        r.jobs_started += 1  # (a start is not progress: the watchdog says "nothing finished")
        done = True
        for step in range(self.scenario.steps):
            if not await self._step(job, step):
                done = False
                break
        end = self.clock.now()
        r.makespan_s = max(r.makespan_s, end)
        if done:
            r.jobs_done += 1
            r.job_latencies_s.append(end - start)
        else:
            r.jobs_failed += 1
        self.progress += 1

    async def _step(self, job: int, step: int) -> bool:
        r = self.result
        clock = self.clock
        retry = self.scenario.retry
        first = clock.now()
        r.steps_started += 1
        attempt = 1
        while True:
            r.step_attempts += 1
            try:
                await self._attempt(BenchContext(self.pools, self.seed, job, step, attempt), job)
            except BenchmarkError:
                raise
            except Exception as exc:  # task-like failure; cancellation is not an Exception
                r.failed_attempts += 1
                if isinstance(exc, ResourceUnavailable):
                    self._check_alive()
                rng = keyed_rng(self.seed, "retry", job, step, attempt)
                decision = retry.decide(exc, attempt, rng, clock.now() - first)
                self.decisions[decision["reason"]] += 1
                self.error_classes[decision["error_class"]] += 1
                if not decision["retry"]:
                    if attempt > 1:
                        r.steps_retried += 1
                    return False
                await clock.sleep(decision["delay_s"])
                attempt += 1
                continue
            if attempt > 1:
                r.steps_retried += 1
            return True

    async def _attempt(self, ctx: BenchContext, job: int) -> None:
        """One step attempt: ``calls`` requests in order, each under its own lease (the world
        sees which job a request belongs to, as a server sees a session id)."""
        r = self.result
        clock = self.clock
        timeout_s = self.scenario.request_timeout_s
        for _ in range(self.scenario.calls):
            asked = clock.now()
            lease = await self._lease(ctx)
            r.acquire_waits_s.append(clock.now() - asked)
            ctx.held_leases.append(lease)
            try:
                name = lease.resource.id
                endpoint = self.world.endpoint(name)
                outcome = endpoint.send(clock.now(), job)
                try:
                    await clock.sleep(outcome.duration_s)
                finally:
                    if outcome.kind not in NOT_ADMITTED:
                        endpoint.finish()
                r.requests += 1
                self.by_endpoint[name] += 1
                r.request_latencies_s.append(outcome.duration_s)
                self.progress += 1
                error = outcome.error(name, timeout_s)
                latency_ms = outcome.duration_s * 1000.0
                if error is None:
                    r.ok_busy_s += outcome.duration_s
                    lease.report(ok=True, latency_ms=latency_ms, usage={"tokens": outcome.tokens})
                else:
                    if outcome.kind == REFUSED:
                        r.refused += 1
                    else:
                        r.errored += 1
                    lease.report(ok=False, latency_ms=latency_ms, usage=self.failed_usage, error=error)
                    raise error
            finally:
                lease.release_now()
                ctx.held_leases.remove(lease)

    async def _lease(self, ctx: BenchContext) -> Lease:
        """A lease through the algorithm under test (its ``try_now`` first, as a task does),
        checked: a lease of this run's pools, not yet released."""
        pool = self.pool
        algorithm = self.algorithm
        stage = "try_now"
        try:
            lease = pool.try_now(ctx, algorithm=algorithm, where=None, selector=self.selector)
            if lease is None:
                stage = "acquire"
                lease = await pool.acquire(ctx, algorithm=algorithm, **self.selector)
        except ACQUIRE_FAILURES:
            raise
        except Exception as exc:
            raise AlgorithmFault(
                f"{self._where()}: the algorithm raised {type(exc).__name__} in {stage}: {exc}"
                " (a bug of the algorithm, not a failure of the simulated world)"
            ) from exc
        problem = None
        if not isinstance(lease, Lease):
            problem = f"returned {type(lease).__name__}, not a Lease"
        elif not any(lease._pool is p for p in self.pools.values()):
            problem = f"returned a lease of pool {lease.pool!r}, which is not one of this run's pools"
        elif lease.released:
            problem = f"returned a lease of {lease.resource.id!r} that was already released"
        if problem is not None:
            raise AlgorithmFault(f"{self._where()}: the algorithm's {stage} {problem}")
        return lease

    # -- guards -------------------------------------------------------------------------------
    def _where(self) -> str:
        s = self.settings
        return f"scenario {s.scenario.name!r}, algorithm {s.algorithm!r}, seed {s.seed}"

    def _check_alive(self) -> None:
        """Every endpoint of every pool dead or revoked: nothing can be leased again, the numbers
        would be empty. (One pool beyond recovery while another can serve is a result: the
        algorithm either reaches the other pool or fails its jobs.)"""
        reasons = {name: pool.beyond_recovery() for name, pool in self.pools.items()}
        if any(why is None for why in reasons.values()):
            return
        if len(reasons) == 1:
            why = next(iter(reasons.values()))
        else:
            why = "; ".join(f"pool {name!r}: {why}" for name, why in reasons.items())
        raise BenchmarkStalled(
            f"{self._where()}: no endpoint can be leased again at simulated"
            f" t={self.clock.now():.1f}s ({why}); the run would measure nothing"
        )

    async def _drain_guard(self) -> None:
        """Jobs started before the horizon must end; a livelock in simulated time must not."""
        s = self.scenario
        limit = s.horizon_s + max(s.horizon_s, MIN_DRAIN_S)
        while True:
            await self.clock.sleep(GUARD_TICK_S)
            if self.clock.now() > limit:
                r = self.result
                in_flight = r.jobs_started - r.jobs_done - r.jobs_failed
                raise BenchmarkStalled(
                    f"{self._where()}: {in_flight} job(s) still unfinished at simulated"
                    f" t={self.clock.now():.0f}s, long after the {s.horizon_s:g}s horizon"
                    " (an acquisition or retry loop that never ends)"
                )

    def finish(self, wall_s: float) -> RunResult:
        r = self.result
        r.requests_by_endpoint = {e.name: self.by_endpoint.get(e.name, 0) for e in self.scenario.endpoints}
        r.endpoints = {name: ep.admission() for name, ep in self.world.endpoints.items()}
        r.decisions = dict(sorted(self.decisions.items()))
        r.error_classes = dict(sorted(self.error_classes.items()))
        r.leases_active_at_end = sum(res.active for pool in self.pools.values() for res in pool.resources())
        r.sim_end_s = self.clock.now()
        r.wall_s = wall_s
        return r


def _timeout_error(run: _Run, watchdog: Watchdog) -> BenchmarkTimeout:
    """What the wall budget stopped: a blocked loop, a stalled run or a slow one."""
    r = run.result
    sim = run.clock.now()
    horizon = run.scenario.horizon_s
    head = f"{run._where()}: did not finish within the wall budget of {watchdog.budget_s:g}s"
    state = f"simulated t={sim:.1f}s of a {horizon:g}s horizon, {r.jobs_done}/{r.jobs_total} jobs done"
    if watchdog.blocked:
        return BenchmarkTimeout(
            f"{head}: the event loop was blocked ({state}); synchronous code in an async method,"
            " such as time.sleep or blocking I/O in the algorithm, held it for more than"
            f" {BLOCKED_GRACE_S:g}s after the run was cancelled"
        )
    if watchdog.idle_s >= max(STALL_AFTER_S, watchdog.budget_s / 10):
        return BenchmarkTimeout(
            f"{head}: stalled, nothing finished during its last {watchdog.idle_s:.1f}s ({state});"
            " an algorithm or scenario that never lets a request through"
        )
    return BenchmarkTimeout(
        f"{head}: still making progress but too slowly ({state}); raise --wall-budget,"
        " or lower --jobs or --horizon"
    )


def _declared_limits(endpoint: EndpointSpec) -> dict[str, float] | None:
    """An endpoint's provider limits as its resource's ``limits`` (None when it has none)."""
    limits = {
        key: value for key, value in (("rpm", endpoint.rpm), ("tpm", endpoint.tpm)) if value is not None
    }
    return limits or None


def run_once(settings: RunSettings, registry: Registry) -> RunResult:
    """Run one (scenario, algorithm, seed) to the end, or raise a ``BenchmarkError``."""
    run = _Run(settings, registry)

    watchdogs: list[Watchdog] = []

    async def supervised(interrupt: int | None) -> None:
        watchdog = Watchdog(lambda: run.progress, settings.wall_budget_s, interrupt)
        watchdogs.append(watchdog)
        watchdog.start()
        try:
            await run.main()
        except (asyncio.CancelledError, LoopBlocked):
            if watchdog.fired:
                raise _timeout_error(run, watchdog) from None
            raise
        finally:
            watchdog.stop()

    started = time.perf_counter()
    with interruptible() as interrupt:
        try:
            with asyncio.Runner(loop_factory=run.clock.new_event_loop) as runner:
                runner.run(supervised(interrupt))
        except LoopBlocked:  # (raised where the loop was blocked, on its way out of the loop)
            raise _timeout_error(run, watchdogs[0]) from None
    if not run.result.jobs_started:
        # only the real clock can get here: the horizon passed (in compressed time) before the
        # first worker ran; every metric would be a zero or undefined under the right heading
        s = settings.scenario
        raise BenchmarkError(
            f"{run._where()}: no job started before the {s.horizon_s:g}s horizon, which lasts"
            f" {s.horizon_s / settings.speedup:.3g}s of real time at --speedup {settings.speedup:g};"
            " lower --speedup or raise --horizon"
        )
    return run.finish(time.perf_counter() - started)
