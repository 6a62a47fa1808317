"""The runner: the front object users hold, over the parts that run pipelines.

``Runner`` owns what outlives a run (settings, the store, the pools, the plugins) and, for each
run, assembles the parts around one ``RunState``: ``Admission`` (the producer), ``Resumer``
(where a pipeline starts), ``Scheduler`` (workers, the delay queue, group commits),
``Checkpointer`` (a task's rows), ``Outcomes`` (failures, retries, the end of a pipeline),
``Control`` (handoffs), ``Telemetry`` (events, the run row) and ``SignalGuard`` (Ctrl-C).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sized
from pathlib import Path
from types import MappingProxyType
from typing import Any

from pyattacker.clock import Clock, RealClock
from pyattacker.engine.admission import Admission
from pyattacker.engine.checkpoint import Checkpointer
from pyattacker.engine.collector import RunCollector
from pyattacker.engine.context import TaskContext
from pyattacker.engine.control import Control, require_ledger
from pyattacker.engine.event_loop import loop_factory, resolve_event_loop
from pyattacker.engine.metrics import MetricRejected, check_value
from pyattacker.engine.outcomes import FinishedCallback, Outcomes
from pyattacker.engine.report import RunReport
from pyattacker.engine.resume import Resumer
from pyattacker.engine.scheduler import Scheduler, Worker
from pyattacker.engine.settings import RunConfig
from pyattacker.engine.signals import SignalGuard
from pyattacker.engine.stall import StallWatch
from pyattacker.engine.state import PipelineState, RunState
from pyattacker.engine.tasklog import LogCapture, end_all
from pyattacker.engine.telemetry import Telemetry, pool_stats
from pyattacker.engine.workqueue import WorkQueue
from pyattacker.errors import ConfigError, PoolNotFound, StoreUnavailable
from pyattacker.flow.chain import PipelineSpec, PipelineTemplate
from pyattacker.model import Batch, MetricRecord, RunRecord
from pyattacker.plugins.store_base import Store, StoreBase
from pyattacker.resources.algorithm import AlgorithmResolver, try_free_slot
from pyattacker.store.codecs import CodecRegistry
from pyattacker.store.location import open_store
from pyattacker.store.recorder import Recorder

__all__ = ["RunConfig", "RunReport", "Runner"]

#: the filter of ``ctx.acquire()`` without arguments: none
_NO_SELECTOR: Mapping[str, Any] = MappingProxyType({})


class Runner:
    """Runs pipelines to completion against a store and a set of pools.

    ``Runner(store="runs/x.db", pools=[...], concurrency=64)`` as a context manager; ``run(specs)``
    returns a :class:`RunReport`. Settings are :class:`RunConfig` fields (``config=`` or keywords).
    """

    def __init__(
        self,
        store: str | os.PathLike[str] | Store | StoreBase | None = None,
        pools: Iterable[Any] = (),
        concurrency: int | None = None,
        *,
        clock: Clock | None = None,
        bus: Any = None,
        codecs: CodecRegistry | None = None,
        plugins: Any = None,
        config: RunConfig | None = None,
        on_pipeline_finished: FinishedCallback | None = None,
        sinks: Iterable[Any] = (),
        **overrides: Any,
    ) -> None:
        cfg = config or RunConfig()
        if concurrency is not None:
            overrides["concurrency"] = concurrency
        if store is not None and isinstance(store, str | os.PathLike):
            overrides.setdefault("store", os.fspath(store))
        self.config = cfg.replace(**overrides) if overrides else cfg
        if self.config.event_loop == "uvloop":
            resolve_event_loop("uvloop")  # not installed: fail here, before the store is opened
        self._plugins = plugins
        #: algorithm specs (a task's, a ``ctx.acquire(algorithm=...)``) to instances, through the plugins
        self.algorithms = AlgorithmResolver(None if plugins is None else plugins.algorithms)
        self.clock = clock or RealClock()
        # the hot path reads the clock several times per task: call the C functions directly
        # unless the clock is a custom one (the virtual clock of the tests)
        kind = type(self.clock)
        self._mono: Callable[[], float] = time.monotonic if kind.now is Clock.now else self.clock.now
        self._wall: Callable[[], float] = time.time if kind.wall is Clock.wall else self.clock.wall
        self.bus = bus
        self._codecs = codecs
        self.on_pipeline_finished = on_pipeline_finished
        self._extra_sinks = list(sinks)
        if store is not None and not isinstance(store, str | os.PathLike) and not hasattr(store, "commit"):
            raise ConfigError(f"store: expected a path, a location or a Store, got {type(store).__name__}")
        by_location = store is None or isinstance(store, str | os.PathLike)
        self.store: StoreBase = open_store(
            (self.config.store or ":memory:") if by_location else store, plugins=plugins
        )
        self.pools: dict[str, Any] = {}
        #: task -> (pool, its algorithm's synchronous first try or None) for ``ctx.acquire()``
        self._lease_routes: dict[Any, tuple[Any, Any]] = {}
        for pool in pools:
            self.add_pool(pool)
        self.run_id: str | None = None
        self._closed = False
        self._artifact_root: Path | None = None
        #: warnings given once per runner (``Telemetry.warned``)
        self._warned: set[str] = set()
        #: the id (or "?") of the run in progress: a second concurrent run_async() is refused
        self._running: str | None = None
        self._run = RunState(self, self.config, self.store, self._mono, self._wall, self._lease_routes)

    # -- what outlives a run ----------------------------------------------------------------------
    @property
    def plugins(self) -> Any:
        if self._plugins is None:
            from pyattacker.plugins.manager import get_plugins  # discovery only when needed

            self._plugins = get_plugins()
        return self._plugins

    @property
    def codecs(self) -> CodecRegistry:
        if self._codecs is None:
            self._codecs = CodecRegistry.from_plugins(self.plugins)
        return self._codecs

    @property
    def counters(self) -> dict[str, int]:
        """The counters of the current (or last) run."""
        return self._run.counters

    def add_pool(self, pool: Any) -> None:
        if not isinstance(getattr(pool, "name", None), str) or not hasattr(pool, "acquire"):
            raise ConfigError(f"pools: expected Pool objects, got {type(pool).__name__}: {pool!r}"[:300])
        if pool.name in self.pools:
            raise ConfigError(f"two pools are named {pool.name!r}")
        self.pools[pool.name] = pool
        self._lease_routes.clear()

    def pool(self, name: str) -> Any:
        try:
            return self.pools[name]
        except KeyError:
            raise PoolNotFound(f"no pool named {name!r} (pools: {', '.join(self.pools) or 'none'})") from None

    def lease_route(self, ctx: TaskContext) -> tuple[Any, Callable[[TaskContext], Any] | None]:
        """Where ``ctx.acquire()`` without arguments leases for this task: the pool and the
        algorithm's synchronous first try as a call of ``ctx`` alone (None: the algorithm has
        none). Resolved once per task instead of once per lease; adding a pool forgets the
        routes. The built-in first try goes straight to ``Pool.try_free``."""
        route = self._lease_routes.get(ctx.task)
        if route is None:
            pool, alg = ctx._target(None, None)
            route = (pool, _first_try(pool, pool.first_try(alg)))
            self._lease_routes[ctx.task] = route
        return route

    def check_control(self, template: PipelineTemplate) -> None:
        """Refuse, before a run starts, a template with handoffs on a store without a ledger
        (``StoreFeatureUnsupported``); a template without ``control`` always passes."""
        if template.control is not None:
            require_ledger(self.store, template)

    def artifact_root(self, pipeline_id: str | None = None) -> Path:
        """The folder for tasks' own files (``ctx.artifact_dir()``): the one the store keeps for
        ``pipeline_id`` (``StoreBase.artifact_folder``), else beside the store, or a temporary
        one for a store with no folder."""
        if pipeline_id is not None:
            folder = self.store.artifact_folder(pipeline_id)
            if folder is not None:
                return Path(folder)
        if self._artifact_root is None:
            location = self.store.location or ""
            if location and location != ":memory:" and not location.startswith("memory"):
                base = Path(location)
                self._artifact_root = (base if base.is_dir() else base.parent) / "artifacts"
            else:
                import tempfile  # only for stores without a folder

                self._artifact_root = Path(tempfile.mkdtemp(prefix="pyattacker-artifacts-"))
            self._artifact_root.mkdir(parents=True, exist_ok=True)
        return self._artifact_root

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.store.close()

    # -- the current run --------------------------------------------------------------------------
    @property
    def stopping(self) -> bool:
        return self._run.stopping

    def stop(self, reason: str = "user") -> None:
        """Stop admitting; running attempts finish (up to ``grace_s``); the rest is resumable."""
        self._run.stop(reason)

    def stats(self) -> dict[str, Any]:
        """A cheap in-memory snapshot of the run (``run --progress`` draws from it)."""
        run = self._run
        return {
            "run_id": self.run_id,
            "stopping": run.stopping,
            "stop_reason": run.stop_reason,
            "in_flight_pipelines": run.admitted - run.done,
            "admitted_pipelines": run.admitted - run.done,
            "max_admitted": self.config.admitted_limit,
            "delayed_pipelines": len(run.parked),
            "counters": dict(run.counters),
            "elapsed_s": round(self.clock.now() - run.started, 3) if run.started else 0.0,
            "pools": {name: pool_stats(pool) for name, pool in self.pools.items()},
            "producer_error": run.producer_error,
        }

    def report_metric(self, name: str, value: Any, *, pipeline_id: str | None = None) -> bool:
        """Record a run-level (or pipeline-level) application value; latest wins."""
        if self.run_id is None:
            raise ConfigError("report_metric() needs a started run")
        run = self._run
        try:
            clean = check_value(name, value)
        except MetricRejected as exc:
            assert run.telemetry is not None
            run.telemetry.metric_rejected("report_metric", exc)
            return False
        row = MetricRecord(
            run_id=self.run_id,
            pipeline_id=pipeline_id or "",
            name=name,
            value=clean,
            updated_at=self.clock.wall(),
        )
        if run.recorder is not None:
            run.recorder.pending.metrics.append(row)
        else:  # after the run: written through
            batch = Batch()
            batch.metrics.append(row)
            self.store.commit(batch)
        return True

    # -- running ----------------------------------------------------------------------------------
    def run(
        self,
        specs: Iterable[PipelineSpec],
        resume: bool | None = None,
        run_id: str | None = None,
        *,
        expected: int | None = None,
    ) -> RunReport:
        """Run synchronously (in a helper thread if an event loop is already running here)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            with asyncio.Runner(loop_factory=self.loop_factory()) as runner:
                return runner.run(self.run_async(specs, resume=resume, run_id=run_id, expected=expected))
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["report"] = self.run(specs, resume=resume, run_id=run_id, expected=expected)
            except BaseException as exc:
                box["error"] = exc

        thread = threading.Thread(target=target, name="pyattacker-run")
        thread.start()
        thread.join()
        if "error" in box:
            raise box["error"]
        report: RunReport = box["report"]
        return report

    def loop_factory(self) -> Callable[[], asyncio.AbstractEventLoop]:
        """The loop a run builds for itself: a custom clock's own (the virtual clock), else the
        one ``run.event_loop`` names (uvloop when installed, by default)."""
        if type(self.clock).new_event_loop is not Clock.new_event_loop:
            return self.clock.new_event_loop
        return loop_factory(self.config.event_loop)

    async def run_async(
        self,
        specs: Iterable[PipelineSpec],
        resume: bool | None = None,
        run_id: str | None = None,
        *,
        expected: int | None = None,
    ) -> RunReport:
        """Run every pipeline of ``specs`` (consumed lazily) and return the report.

        ``expected``: how many pipelines ``specs`` holds, when the caller knows (by default the
        length of a list, or of the seeds ``template.map(seeds)`` was given). It is stored with
        the run, so ``watch`` and the viewer can say how much is left and when it should end.
        """
        if self._closed:
            raise ConfigError("this runner is closed")
        if self._running is not None:
            raise ConfigError(
                f"this runner is already running run {self._running!r}; a Runner runs one run at a"
                " time (wait for it, or use a second Runner on another store)"
            )
        self._running = run_id or self.config.run_id or "?"
        try:
            if expected is None:
                expected = len(specs) if isinstance(specs, Sized) else getattr(specs, "length", None)
            if resume is not None:
                self.config = self.config.replace(resume=resume)
            with RunCollector():  # the collector tuned while runs go (see ``collector``)
                return await _Run(self, run_id, expected).run(specs)
        finally:
            self._running = None

    def _resolve_backend(self) -> Any:
        spec = self.config.artifact_backend
        if spec in (None, "", "inline") and "inline" not in self.plugins.artifact_backends:
            return None  # bytes stay in the store row: that is what "inline" means anyway
        from pyattacker.store.backends import resolve_backend  # only for runs that write bytes

        return resolve_backend(spec, self.plugins.artifact_backends)

    def _resolve_sinks(self) -> list[Any]:
        sinks = list(self._extra_sinks)
        registry = self.plugins.event_sinks
        for index, item in enumerate(self.config.event_sinks):
            name, options = (
                (item, {})
                if isinstance(item, str)
                else (item.get("name"), {k: v for k, v in item.items() if k != "name"})
            )
            factory = registry.get(name)
            if factory is None:
                raise ConfigError(
                    f"run.event_sinks: unknown sink {name!r} (known: {', '.join(registry.names()) or 'none'})"
                )
            try:
                sinks.append(factory(**options))
            except Exception as exc:  # which entry, before anything runs (exit 2)
                raise ConfigError(f"run.event_sinks[{index}]: {exc}") from exc
        return sinks


class _Run:
    """One run of a runner: assembles the parts around a fresh ``RunState``, starts the
    producer, the delay pump and the heartbeat, waits for the end and writes the report."""

    def __init__(self, runner: Runner, run_id: str | None, expected: int | None) -> None:
        cfg = runner.config
        self.runner = runner
        run = self.state = runner._run = RunState(
            runner, cfg, runner.store, runner._mono, runner._wall, runner._lease_routes
        )
        run.expected = expected
        run.run_id = runner.run_id = (
            run_id
            or cfg.run_id
            or (time.strftime("run-%Y%m%d-%H%M%S-", time.gmtime(runner.clock.wall())) + uuid.uuid4().hex[:6])
        )
        runner._running = run.run_id
        run.trace = cfg.events == "all"
        backend = runner._resolve_backend() if cfg.journal == "full" else None
        self.backend = backend
        codecs = runner.codecs
        telemetry = run.telemetry = self.telemetry = Telemetry(run, runner._warned)
        self.signals = SignalGuard(run)
        checkpoints = Checkpointer(run, codecs, backend)
        outcomes = Outcomes(run, telemetry, checkpoints, runner.on_pipeline_finished)
        resumer = Resumer(run, telemetry, codecs, backend)
        control = resumer.control = run.control = Control(run, telemetry, resumer, checkpoints, outcomes)
        self.scheduler = Scheduler(run, telemetry, checkpoints, outcomes, control, self.signals)
        self.admission = Admission(
            run, telemetry, resumer, outcomes, self.scheduler.staff, self.scheduler.hold
        )
        self.sinks = runner._resolve_sinks()

    async def run(self, specs: Iterable[PipelineSpec]) -> RunReport:
        run, cfg, telemetry, scheduler = self.state, self.state.config, self.telemetry, self.scheduler
        loop = asyncio.get_running_loop()
        run.start(loop)
        run.started = run.clock.now()
        recorder = run.recorder = Recorder(
            run.store,
            write_behind=cfg.write_behind,
            batch_size=cfg.write_batch,
            flush_interval=cfg.flush_interval,
            sinks=self.sinks,
            now=run.mono,
        )
        recorder.on_sink_error = telemetry.sink_failed
        capture = LogCapture(run, Worker)
        run_row = self._start(telemetry.run_row(self.backend))
        telemetry.attach_pools()
        if cfg.handle_signals:
            self.signals.install(loop)
        queue: WorkQueue[PipelineState | None] = WorkQueue(maxsize=max(2, 2 * cfg.concurrency))
        producer = loop.create_task(self.admission.produce(specs, queue), name="pyattacker-producer")
        producer.add_done_callback(scheduler.supervise)
        pump = loop.create_task(scheduler.pump(queue), name="pyattacker-pump")
        pump.add_done_callback(scheduler.supervise)
        heartbeat = loop.create_task(telemetry.heartbeat(run_row), name="pyattacker-heartbeat")
        stall = StallWatch(run, cfg.stall_after_s).watch() if cfg.stall_after_s else None
        stalls = loop.create_task(stall, name="pyattacker-stall-watch") if stall is not None else None
        timer = loop.call_later(cfg.stop_after_s, run.stop, "stop_after_s") if cfg.stop_after_s else None
        outer_cancel = False
        assert run.complete is not None
        capture.install()  # removed in the ``finally`` below
        try:
            await run.complete.wait()
        except asyncio.CancelledError:
            outer_cancel = True
            run.stop("cancelled")
            run.hard = True
        try:
            pump.cancel()
            if not producer.done():
                producer.cancel()
            await scheduler.shutdown(queue, producer, pump)
            heartbeat.cancel()
            if stalls is not None:
                stalls.cancel()
            await asyncio.gather(heartbeat, *([stalls] if stalls else []), return_exceptions=True)
        finally:
            if timer is not None:
                timer.cancel()
            if run.grace_timer is not None:
                run.grace_timer.cancel()
            self.signals.restore()
            telemetry.detach_pools()
            capture.remove()
        report = self._finish(run_row)
        if outer_cancel:
            raise asyncio.CancelledError()
        if run.crash is not None:
            raise run.crash
        if run.fatal is not None:
            raise run.fatal
        return report

    def _start(self, run_row: RunRecord) -> RunRecord:
        """Write the run row (the store must take it, or nothing starts) and claim what an
        earlier run left ``running``."""
        run = self.state
        lost = run.store.lost_contents  # what the store knows it lost since it last recorded
        if lost and not run.config.fresh_restart:
            raise StoreUnavailable(lost)  # resuming would run durable tasks again in silence
        first = Batch()
        first.runs.append(run_row)
        try:
            run.store.commit(first)
        except Exception as exc:
            raise StoreUnavailable(f"cannot start a run in store {run.store.location}: {exc}") from exc
        stale = run.store.interrupt_running(run.run_id, run.clock.wall())
        cfg = run.config
        event = self.telemetry.event
        event(
            "run.started",
            "run",
            data={"concurrency": cfg.concurrency, "resume": cfg.resume, "label": cfg.label},
        )
        if stale:
            event("run.interrupted_pipelines", "run", data={"count": stale})
        return run_row

    def _finish(self, run_row: RunRecord) -> RunReport:
        """Close the run row with the final gauges and pool rows, flush, and build the report."""
        run = self.state
        recorder = run.recorder
        assert recorder is not None
        status = "interrupted" if run.stopping else "completed"
        ended = run.clock.wall()
        duration_ms = round((ended - run_row.started_at) * 1000, 3)
        event = self.telemetry.event
        if run.skipped_quietly:
            event("run.skipped", "run", data={"count": run.skipped_quietly, "reason": "succeeded"})
        event(
            "run.finished",
            "run",
            data={"status": status, "duration_ms": duration_ms, "stop_reason": run.stop_reason},
        )
        run.counters["sink_errors"] = recorder.sink_errors
        end_all(run)
        final = Batch()
        run_row.status = status
        run_row.ended_at = ended
        run_row.heartbeat_at = ended
        run_row.stop_reason = run.stop_reason
        run_row.stats = self.telemetry.gauges()
        final.runs.append(run_row)
        final.resources.extend(self.telemetry.resource_rows())
        if recorder.failed is None:
            recorder.pending.extend(final)
            try:
                recorder.flush()
            except StoreUnavailable as exc:
                run.fatal = run.fatal or exc
        recorder.close_sinks()
        # the final flush delivered the last events to the sinks: count what they raised there too
        run.counters["sink_errors"] = recorder.sink_errors
        run.recorder = None  # later report_metric() calls write through directly
        return RunReport(
            run_id=run_row.run_id,
            status=status,
            started_at=run_row.started_at,
            ended_at=ended,
            duration_ms=duration_ms,
            counters=dict(run.counters),
            stop_reason=run.stop_reason,
            store=run.store.location,
            producer_error=run.producer_error,
            pools={name: pool_stats(pool) for name, pool in run.pools.items()},
        )


def _first_try(pool: Any, first: Callable[..., Any] | None) -> Callable[[TaskContext], Any] | None:
    """An algorithm's ``try_now`` on ``pool`` without a filter, as a call of the context alone."""
    if first is None:
        return None
    if first is try_free_slot:
        return pool.try_free
    return lambda ctx: first(pool, ctx=ctx, where=None, selector=_NO_SELECTOR)
