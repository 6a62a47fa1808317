"""The runner: admission, a pool of workers, a delay queue, checkpoints, resume, stop.

One coroutine drives one pipeline at a time on each of up to ``concurrency`` workers, pulling
from a bounded queue fed lazily by the producer (memory stays O(concurrency), never O(dataset)). A
retry backoff parks the pipeline in a delay queue and frees its worker. Every task output is
checkpointed (group-committed) before the next task starts; on resume a pipeline continues
from the first task without a durable artifact, so a paid request is never sent twice.
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import itertools
import logging
import os
import signal
import socket
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterable, Mapping, Sized
from pathlib import Path
from types import MappingProxyType
from typing import Any

import msgspec

from pyattacker import __version__
from pyattacker.clock import Clock, RealClock, round3
from pyattacker.digest import digest_bytes
from pyattacker.engine.context import _ENDED, TaskContext
from pyattacker.engine.control import RunnerControl
from pyattacker.engine.event_loop import loop_factory, resolve_event_loop
from pyattacker.engine.report import RunReport
from pyattacker.engine.settings import RunConfig
from pyattacker.engine.workqueue import EMPTY, WorkQueue
from pyattacker.errors import (
    ArtifactBackendUnavailable,
    ArtifactCodecError,
    ConfigError,
    CorruptCheckpoint,
    CorruptRow,
    FatalError,
    LeaseLeakError,
    PipelineIdentityConflict,
    PoolNotFound,
    StoreFeatureUnsupported,
    StoreUnavailable,
    WorkerCrashed,
    error_class_of,
    safe_str,
)
from pyattacker.flow.chain import PipelineSpec, PipelineTemplate
from pyattacker.flow.handoff import Handoff
from pyattacker.flow.taskspec import TaskSpec
from pyattacker.model import (
    OK_DECISION,
    ArtifactRecord,
    AttemptRecord,
    Batch,
    EventRecord,
    HandoffRecord,
    PipelineProgress,
    PipelineRecord,
    RunRecord,
    TaskRecord,
)
from pyattacker.resources.algorithm import AlgorithmResolver, try_free_slot
from pyattacker.store.base import Store
from pyattacker.store.codecs import CodecRegistry, returned_record_types
from pyattacker.store.location import open_store
from pyattacker.store.recorder import Recorder

__all__ = ["RunConfig", "RunReport", "Runner"]

log = logging.getLogger("pyattacker")
_LOOKUP_CHUNK = 512
_SPEC_TYPE = {PipelineSpec}
_MAX_ERROR = 2000
#: the filter of ``ctx.acquire()`` without arguments: none
_NO_SELECTOR: Mapping[str, Any] = MappingProxyType({})


class _Pipeline:
    """Mutable state of one admitted pipeline (lives in a worker, the queue or the delay heap)."""

    __slots__ = (
        "attempt",
        "entry",
        "jump",
        "ledger_rows",
        "metric_steps",
        "n",
        "output",
        "record",
        "row_written",
        "seq",
        "spec",
        "task_started",
        "task_started_wall",
        "tasks",
        "value",
        "write_seed",
    )

    def __init__(self, spec: PipelineSpec, record: PipelineRecord, seq: int, value: Any) -> None:
        self.spec = spec
        self.tasks = spec.template.tasks
        self.n = len(self.tasks)
        self.record = record
        self.seq = seq
        self.value = value
        self.attempt = 0
        self.task_started: float | None = None
        self.task_started_wall: float | None = None
        self.metric_steps: dict[str, int] = {}
        self.write_seed = False
        #: the last task's output, kept until the group commit carrying it is durable; then the
        #: pipeline succeeds (``_resume_after``)
        self.output: ArtifactRecord | None = None
        #: this run already wrote the full pipeline row (later checkpoints only advance the cursor)
        self.row_written = False
        #: ``(destination seq, artifact id, artifact seq)`` of the last handoff into this
        #: traversal: the input of the task at that seq (None: every input is the previous output)
        self.entry: tuple[int, str, int] | None = None
        #: rows of this pipeline's control ledger (numbers the entry artifacts it writes)
        self.ledger_rows = 0
        #: a jump staged and not yet durable: ``(ledger row, the destination's value, entry
        #: artifact)``; the group commit carrying it moves the pipeline (``RunnerControl.landed``)
        self.jump: tuple[HandoffRecord, Any, ArtifactRecord | None] | None = None


#: a group commit's future, the pipelines waiting for it, and those of them that jumped
_Group = tuple[asyncio.Future[None], list[_Pipeline], list[_Pipeline]]


def _check_specs(chunk: list[Any]) -> None:
    """Refuse an admitted chunk holding anything but ``PipelineSpec``s, naming the first stray
    item's type. Usually one set of the items' types, in C (a resume checks a million seeds);
    only a chunk with another type (a subclass, or a stray value) is checked item by item."""
    if set(map(type, chunk)) == _SPEC_TYPE:
        return
    for item in chunk:
        if not isinstance(item, PipelineSpec):
            raise ConfigError(f"run() takes PipelineSpecs (template.map(...)), got {type(item).__name__}")


def _process_start_time() -> float | None:
    """Start time of this process (Linux), so a reused pid is not mistaken for the owner."""
    try:
        with open(f"/proc/{os.getpid()}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        ticks = int(fields[19])
        with open("/proc/stat", "rb") as fh:
            btime = next(int(line.split()[1]) for line in fh if line.startswith(b"btime"))
        return btime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _loop_kind(loop: asyncio.AbstractEventLoop) -> str:
    """``asyncio`` for asyncio's loops (the virtual clock's included), else the loop's package."""
    if isinstance(loop, asyncio.BaseEventLoop):
        return "asyncio"
    return type(loop).__module__.partition(".")[0]


def _error_text(exc: BaseException) -> str:
    """The message stored for ``exc``, cut to ``_MAX_ERROR``. Task code owns ``__str__``: one that
    raises or returns a non-str must not cost the attempt row, the retry or the run."""
    text = safe_str(exc)
    return text if len(text) <= _MAX_ERROR else text[: _MAX_ERROR - 1] + "…"


def _cancel_requested() -> bool:
    """Whether the current task was really cancelled (``task.cancel()``), as opposed to task code
    raising ``CancelledError`` itself (which is that task's failure, not a stop of its worker)."""
    task = asyncio.current_task()
    return task is None or task.cancelling() > 0


def _forget_cancel() -> None:
    """Withdraw every cancel request of the current task: it goes on (``asyncio.timeout`` and
    ``_cancel_requested`` read the count, so a request left behind would break both)."""
    task = asyncio.current_task()
    if task is not None:
        while task.uncancel() > 0:
            pass


#: seconds between the cancels of a worker that outlives its cancel while the run stops
_RECANCEL_S = 0.05


class _Worker(asyncio.Task[None]):
    """A runner's worker task. The runner cancels its workers only while the run stops.

    Task code runs inside it, so ``asyncio.current_task().cancel()`` in a body would cancel the
    worker itself: the request is refused there with an error naming the task (the body's
    failure), instead of a cancel that looks like a stop of the run. The check runs only when
    something calls ``cancel()``, never on the path of a task.
    """

    __slots__ = ("held", "index", "queue")

    def __init__(self, coro: Any, *, loop: asyncio.AbstractEventLoop, index: int, queue: Any) -> None:
        super().__init__(coro, loop=loop, name=f"pyattacker-worker-{index}")
        #: the pipeline this worker drives (None between pipelines)
        self.held: _Pipeline | None = None
        self.index = index
        self.queue = queue

    def cancel(self, msg: Any = None) -> bool:
        if asyncio.current_task(self.get_loop()) is self:
            held = self.held
            name = held.tasks[min(held.seq, held.n - 1)].name if held is not None else "?"
            raise RuntimeError(
                f"task {name!r} cancelled its own worker (asyncio.current_task().cancel() in task"
                " code): the worker belongs to the runner. Raise an exception to fail the task,"
                " or bound it with timeout_s / asyncio.timeout()"
            )
        return super().cancel(msg)


class Runner:
    """Runs pipelines to completion against a store and a set of pools.

    ``Runner(store="runs/x.db", pools=[...], concurrency=64)`` as a context manager; ``run(specs)``
    returns a :class:`RunReport`. Settings are :class:`RunConfig` fields (``config=`` or keywords).
    """

    _stopping: bool
    _stop_reason: str | None
    _grace_timer: asyncio.TimerHandle | None

    def __init__(
        self,
        store: str | os.PathLike[str] | Store | None = None,
        pools: Iterable[Any] = (),
        concurrency: int | None = None,
        *,
        clock: Clock | None = None,
        bus: Any = None,
        codecs: CodecRegistry | None = None,
        plugins: Any = None,
        config: RunConfig | None = None,
        on_pipeline_finished: Callable[[Runner, PipelineRecord, ArtifactRecord | None], Any] | None = None,
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
        location = self.config.store or ":memory:"
        self.store: Store = (
            store
            if store is not None and not isinstance(store, str | os.PathLike)
            else open_store(location, plugins=plugins)
        )
        self.pools: dict[str, Any] = {}
        #: task -> (pool, its algorithm's synchronous first try or None) for ``ctx.acquire()``
        self._lease_routes: dict[Any, tuple[Any, Any]] = {}
        for pool in pools:
            self.add_pool(pool)
        self.run_id: str | None = None
        self._backend: Any = None
        #: the backend whose ``put`` a written artifact goes through: None when there is none,
        #: or when it declares ``put`` an identity (``identity_put``, the ``inline`` backend)
        self._putter: Any = None
        self._closed = False
        self._artifact_root: Path | None = None
        self._warned: set[str] = set()
        #: the id (or "?") of the run in progress: a second concurrent run_async() is refused
        self._running: str | None = None
        self._reset()

    # -- public API ---------------------------------------------------------------------------
    @property
    def plugins(self) -> Any:
        if self._plugins is None:
            from pyattacker.plugins.manager import get_plugins

            self._plugins = get_plugins()
        return self._plugins

    @property
    def codecs(self) -> CodecRegistry:
        if self._codecs is None:
            self._codecs = CodecRegistry.from_plugins(self.plugins)
        return self._codecs

    def add_pool(self, pool: Any) -> None:
        if not isinstance(getattr(pool, "name", None), str) or not hasattr(pool, "acquire"):
            raise ConfigError(f"pools: expected Pool objects, got {type(pool).__name__}: {pool!r}"[:300])
        if pool.name in self.pools:
            raise ConfigError(f"two pools are named {pool.name!r}")
        self.pools[pool.name] = pool
        self._lease_routes.clear()

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
            self._control.check_ledger(template)

    def pool(self, name: str) -> Any:
        try:
            return self.pools[name]
        except KeyError:
            raise PoolNotFound(f"no pool named {name!r} (pools: {', '.join(self.pools) or 'none'})") from None

    def __enter__(self) -> Runner:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.store.close()

    @property
    def stopping(self) -> bool:
        return self._stopping

    def stop(self, reason: str = "user") -> None:
        """Stop admitting; running attempts finish (up to ``grace_s``); the rest is resumable."""
        if not self._stopping:
            self._stopping = True
            self._stop_reason = reason
            self._wake_all()
            self._arm_grace()

    def _arm_grace(self) -> None:
        """Bound the wait for running attempts by ``grace_s``: a task that never ends must not hang a stop."""
        if self._complete is None or self._complete.is_set():
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._grace_timer = loop.call_later(self.config.grace_s, self._grace_over)

    def _grace_over(self) -> None:
        if self._complete is not None and not self._complete.is_set():
            log.warning("pyattacker: grace_s=%s elapsed, cancelling running attempts", self.config.grace_s)
            self._hard = True
            self._complete.set()

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

    def report_metric(self, name: str, value: Any, *, pipeline_id: str | None = None) -> bool:
        """Record a run-level (or pipeline-level) application value; latest wins."""
        from pyattacker.engine.metrics import MetricRejected, check_value
        from pyattacker.model import MetricRecord

        if self.run_id is None:
            raise ConfigError("report_metric() needs a started run")
        try:
            clean = check_value(name, value)
        except MetricRejected as exc:
            self._metric_rejected("report_metric", exc)
            return False
        row = MetricRecord(
            run_id=self.run_id,
            pipeline_id=pipeline_id or "",
            name=name,
            value=clean,
            updated_at=self.clock.wall(),
        )
        if self._recorder is not None:
            self._recorder.pending.metrics.append(row)
        else:
            batch = Batch()
            batch.metrics.append(row)
            self.store.commit(batch)
        return True

    def stats(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "stopping": self._stopping,
            "stop_reason": self._stop_reason,
            "in_flight_pipelines": self._admitted - self._done,
            "admitted_pipelines": self._admitted - self._done,
            "max_admitted": self.config.admitted_limit,
            "delayed_pipelines": len(self._parked),
            "counters": dict(self.counters),
            "elapsed_s": round(self.clock.now() - self._started, 3) if self._started else 0.0,
            "pools": {name: _pool_stats(pool) for name, pool in self.pools.items()},
            "producer_error": self._producer_error,
        }

    # -- run ----------------------------------------------------------------------------------
    def _reset(self) -> None:
        self.counters: dict[str, int] = dict.fromkeys(
            (
                "pipelines_admitted",
                "pipelines_done",
                "pipelines_succeeded",
                "pipelines_failed",
                "pipelines_interrupted",
                "pipelines_deferred",
                "skipped",
                "attempts",
                "retries",
                "leases_leaked",
                "repair_failures",
                "monitor_callback_errors",
                "metric_failures",
                "sink_errors",
                "handoffs",
            ),
            0,
        )
        self._control = RunnerControl(self)
        self._stopping = False
        self._hard = False
        self._stop_reason = None
        self._admitted = 0
        self._done = 0
        self._parked: list[tuple[float, int, _Pipeline]] = []
        self._tie = itertools.count()
        #: pipelines whose checkpoint a group commit has yet to make durable, per commit
        #: (``_awaiting_commit``); ``_group``: the latest, which new checkpoints join
        self._awaiting: dict[int, _Group] = {}
        self._group: _Group | None = None
        #: admitted and not finished: key -> its spec (a second spec under the key is compared)
        self._active: dict[str, PipelineSpec] = {}
        self._record_types: dict[int, dict[str, type]] = {}
        self._recorder: Recorder | None = None
        self._started = 0.0
        self._producer_error: str | None = None
        self._crash: WorkerCrashed | None = None
        self._fatal: BaseException | None = None
        self._complete: asyncio.Event | None = None
        self._capacity: asyncio.Event | None = None
        self._pump_wake: asyncio.Event | None = None
        self._producer_done = False
        self._grace_timer = None
        self._trace = False
        self._in_sync = False
        #: whether this run installed its SIGINT/SIGTERM handlers (see ``_real_interrupt``)
        self._owns_signals = False
        self._skipped_quietly = 0
        #: workers are started as work arrives (a run of ten pipelines at concurrency 10,000 starts
        #: ten, not ten thousand); ``_idle`` counts those waiting on the queue
        self._workers: list[asyncio.Task[Any]] = []
        self._idle = 0
        self._expected: int | None = None

    def _wake_all(self) -> None:
        for ev in (self._capacity, self._pump_wake):
            if ev is not None:
                ev.set()
        self._check_complete()

    def _recorder_pending(self) -> Batch:
        assert self._recorder is not None
        return self._recorder.pending

    def artifact_root(self) -> Path:
        if self._artifact_root is None:
            location = getattr(self.store, "location", "") or ""
            if location and location != ":memory:" and not location.startswith("memory"):
                base = Path(location)
                self._artifact_root = (base if base.is_dir() else base.parent) / "artifacts"
            else:
                import tempfile

                self._artifact_root = Path(tempfile.mkdtemp(prefix="pyattacker-artifacts-"))
            self._artifact_root.mkdir(parents=True, exist_ok=True)
        return self._artifact_root

    def _metric_rejected(self, what: str, exc: Exception) -> None:
        self.counters["metric_failures"] += 1
        if self.config.strict_metrics:
            raise exc
        key = f"{what}:{type(exc).__name__}"
        if key not in self._warned:
            self._warned.add(key)
            log.warning("pyattacker: %s rejected (further ones are only counted): %s", what, exc)

    def _resolve_backend(self) -> Any:
        spec = self.config.artifact_backend
        if spec in (None, "", "inline") and "inline" not in self.plugins.artifact_backends:
            return None  # bytes stay in the store row: that is what "inline" means anyway
        from pyattacker.store.backends import resolve_backend

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
            return await self._run_async(specs, resume, run_id, expected)
        finally:
            self._running = None

    async def _run_async(
        self, specs: Iterable[PipelineSpec], resume: bool | None, run_id: str | None, expected: int | None
    ) -> RunReport:
        """``run_async`` once it is known that no other run of this runner is in progress."""
        if expected is None:
            expected = len(specs) if isinstance(specs, Sized) else getattr(specs, "length", None)
        self._reset()
        self._expected = expected
        cfg = self.config
        if resume is not None:
            cfg = self.config = cfg.replace(resume=resume)
        loop = asyncio.get_running_loop()
        #: a future done from the start: what ``async with ctx.acquire()`` awaits on its way out
        self._finished_future: asyncio.Future[None] = loop.create_future()
        self._finished_future.set_result(None)
        self._complete = asyncio.Event()
        self._capacity = asyncio.Event()
        self._pump_wake = asyncio.Event()
        self._started = self.clock.now()
        self.run_id = (
            run_id
            or cfg.run_id
            or (time.strftime("run-%Y%m%d-%H%M%S-", time.gmtime(self.clock.wall())) + uuid.uuid4().hex[:6])
        )
        self._running = self.run_id
        self._backend = self._resolve_backend() if cfg.journal == "full" else None
        self._putter = None if getattr(self._backend, "identity_put", False) is True else self._backend
        self._trace = cfg.events == "all"
        sinks = self._resolve_sinks()
        recorder = self._recorder = Recorder(
            self.store,
            write_behind=cfg.write_behind,
            batch_size=cfg.write_batch,
            flush_interval=cfg.flush_interval,
            sinks=sinks,
            now=self._mono,
        )
        recorder.on_sink_error = self._sink_failed
        run_row = self._run_row()
        first = Batch()
        first.runs.append(run_row)
        try:
            self.store.commit(first)
        except Exception as exc:
            raise StoreUnavailable(
                f"cannot start a run in store {getattr(self.store, 'location', '?')}: {exc}"
            ) from exc
        stale = self.store.interrupt_running(self.run_id, self.clock.wall())
        self._event(
            "run.started",
            "run",
            data={"concurrency": cfg.concurrency, "resume": cfg.resume, "label": cfg.label},
        )
        if stale:
            self._event("run.interrupted_pipelines", "run", data={"count": stale})
        listeners = self._attach_pools()
        signals = self._install_signals(loop) if cfg.handle_signals else []
        self._owns_signals = bool(signals)
        queue: WorkQueue[_Pipeline | None] = WorkQueue(maxsize=max(2, 2 * cfg.concurrency))
        workers = self._workers
        producer = loop.create_task(self._produce(specs, queue), name="pyattacker-producer")
        producer.add_done_callback(self._supervise)
        pump = loop.create_task(self._pump(queue), name="pyattacker-pump")
        pump.add_done_callback(self._supervise)
        heartbeat = loop.create_task(self._heartbeat(run_row), name="pyattacker-heartbeat")
        timer = loop.call_later(cfg.stop_after_s, self.stop, "stop_after_s") if cfg.stop_after_s else None
        outer_cancel = False
        try:
            await self._complete.wait()
        except asyncio.CancelledError:
            outer_cancel = True
            self.stop("cancelled")
            self._hard = True
        try:
            await self._shutdown(queue, workers, producer, pump, heartbeat, outer_cancel)
        finally:
            if timer is not None:
                timer.cancel()
            if self._grace_timer is not None:
                self._grace_timer.cancel()
            for sig, previous in signals:
                signal.signal(sig, previous)
            self._detach_pools(listeners)
        report = self._finish(run_row)
        if outer_cancel:
            raise asyncio.CancelledError()
        if self._crash is not None:
            raise self._crash
        if self._fatal is not None:
            raise self._fatal
        return report

    def _run_row(self) -> RunRecord:
        cfg = self.config
        backend = (
            self._backend.describe()
            if self._backend is not None and hasattr(self._backend, "describe")
            else None
        )
        snapshot = {
            "concurrency": cfg.concurrency,
            "max_admitted": cfg.admitted_limit,
            "journal": cfg.journal,
            "write_behind": cfg.write_behind,
            "write_batch": cfg.write_batch,
            "flush_interval": cfg.flush_interval,
            # the loop actually running this run (``run_async`` may run on the caller's own loop)
            "event_loop": _loop_kind(asyncio.get_running_loop()),
            "artifact_backend": backend
            if backend is not None
            else (cfg.journal == "full" and "inline") or None,
            "resume": cfg.resume,
            "retry_succeeded": cfg.retry_succeeded,
            "fresh_restart": cfg.fresh_restart,
            "strict_leases": cfg.strict_leases,
            "stop_after_failures": cfg.stop_after_failures,
            "stop_after_s": cfg.stop_after_s,
            "pools": {name: [r.id for r in pool.resources()] for name, pool in self.pools.items()},
            "meta": cfg.meta,
            # how many pipelines the caller said the source holds (None: unknown): watch's ETA
            "expected_pipelines": self._expected,
        }
        now = self.clock.wall()
        return RunRecord(
            run_id=self.run_id or "",
            status="running",
            label=cfg.label,
            started_at=now,
            heartbeat_at=now,
            host=socket.gethostname(),
            pid=os.getpid(),
            pid_started_at=_process_start_time(),
            python=sys.version.split()[0],
            version=__version__,
            config=snapshot,
            notes=cfg.notes,
        )

    def _attach_pools(self) -> list[tuple[Any, Callable[[Any], None]]]:
        attached: list[tuple[Any, Callable[[Any], None]]] = []
        for pool in self.pools.values():
            listener = self._pool_event
            pool.listeners.append(listener)
            pool.trace_leases = self._trace  # per-lease events only with events="all" (attempts carry leases)
            if getattr(pool, "clock_is_default", False):
                pool.clock = self.clock
            attached.append((pool, listener))
        return attached

    def _detach_pools(self, attached: list[tuple[Any, Callable[[Any], None]]]) -> None:
        for pool, listener in attached:
            try:
                pool.listeners.remove(listener)
            except ValueError:
                pass
            pool.trace_leases = True

    def _install_signals(self, loop: asyncio.AbstractEventLoop) -> list[tuple[int, Any]]:
        """Python-level handlers (not ``loop.add_signal_handler``): they also run while a *sync*
        task blocks the loop, so no task can make a run ignore Ctrl-C."""
        if threading.current_thread() is not threading.main_thread():
            return []
        installed: list[tuple[int, Any]] = []

        signalled = [0]

        def handler(sig: int, frame: Any) -> None:
            signalled[0] += 1
            if signalled[0] > 1 and self._in_sync:
                # a sync task holds the loop: interrupt it now; every finished task is durable
                # and the rows it leaves running are claimed by the next resume. Nothing may
                # start after it: uvloop runs the rest of the ready callbacks before it lets the
                # exception out, so another ready worker would start its own blocking body.
                self._stopping = True
                raise KeyboardInterrupt
            loop.call_soon_threadsafe(self._on_signal, sig)

        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                installed.append((sig, signal.signal(sig, handler)))
            except (ValueError, OSError):
                pass
        return installed

    def _on_signal(self, sig: int) -> None:
        if self._stopping:
            log.warning("pyattacker: second %s, stopping now", signal.Signals(sig).name)
            self._hard = True
            self._wake_all()
            if self._complete is not None:
                self._complete.set()
            return
        log.warning(
            "pyattacker: %s received, finishing running attempts (Ctrl-C again to stop now)",
            signal.Signals(sig).name,
        )
        self.stop("signal")

    def _supervise(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            if self._stopping:
                return
            if isinstance(task, _Worker):
                self._replace_worker(task)
            elif self._complete is not None and not self._complete.is_set():
                # the producer or the pump, cancelled by task code: the pipelines not admitted
                # yet (producer) or waiting to retry (pump) would be dropped in silence or wait
                # forever. Stop the run as cancelled: everything unfinished is resumable
                log.warning("pyattacker: %s was cancelled from outside the runner; stopping", task.get_name())
                self.stop("cancelled")
            return
        exc = task.exception()
        if exc is None:
            return
        if isinstance(exc, StoreUnavailable):
            self._fatal = self._fatal or exc
            self._hard_stop("store_unavailable")
        elif isinstance(exc, PipelineIdentityConflict):
            self._fatal = self._fatal or exc
            self.stop("identity_conflict")
        elif isinstance(exc, StoreFeatureUnsupported):
            self._fatal = self._fatal or exc
            self.stop("store_feature_unsupported")
        elif task.get_name() == "pyattacker-producer":
            self._producer_error = f"{type(exc).__name__}: {_error_text(exc)}"
            self._producer_done = True
            self.stop("producer_error")
        else:
            state = getattr(task, "held", None)
            held = state.spec.key if state is not None else None
            self._crash = WorkerCrashed(held, exc)
            self._crash.__cause__ = exc
            self._event(
                "runner.worker_crashed",
                "run",
                pipeline_id=held,
                data={
                    "error": f"{type(exc).__name__}: {_error_text(exc)}",
                    "traceback": "".join(traceback.format_exception(exc)),
                    "during_shutdown": self._stopping,
                },
            )
            self._hard_stop("worker_crashed")

    def _replace_worker(self, worker: _Worker) -> None:
        """A worker was cancelled while the run was not stopping: not by the runner, which cancels
        workers only to stop. Its pipeline was left interrupted (resumable); another worker
        takes its place, so the run cannot hang for want of workers. A worker between two
        pipelines (its last one handed to a group commit) held none, and nothing is lost."""
        state = worker.held
        log.warning("pyattacker: %s was cancelled from outside the runner; replaced", worker.get_name())
        self._event(
            "runner.worker_cancelled",
            "run",
            pipeline_id=state.spec.key if state is not None else None,
            data={
                "worker": worker.get_name(),
                "task": state.tasks[min(state.seq, state.n - 1)].name if state is not None else None,
                "hint": "only the runner cancels its workers (to stop the run); "
                + ("the pipeline is resumable" if state is not None else "it held no pipeline: nothing lost"),
            },
        )
        workers = self._workers
        if self._complete is None or self._complete.is_set() or worker not in workers:
            return
        workers[worker.index] = self._start_worker(worker.queue, worker.index)

    def _hard_stop(self, reason: str) -> None:
        self.stop(reason)
        self._hard = True
        if self._complete is not None:
            self._complete.set()

    def _check_complete(self) -> None:
        if self._complete is None:
            return
        if self._producer_done and (
            self._done >= self._admitted
            or (self._stopping and self._done + len(self._parked) >= self._admitted)
        ):
            self._complete.set()

    async def _shutdown(
        self,
        queue: WorkQueue[_Pipeline | None],
        workers: list[asyncio.Task[Any]],
        producer: asyncio.Task[Any],
        pump: asyncio.Task[Any],
        heartbeat: asyncio.Task[Any],
        outer_cancel: bool,
    ) -> None:
        pump.cancel()
        if not producer.done():
            producer.cancel()
        if not self._hard:
            for _ in workers:
                await queue.put(None)
            pending: set[asyncio.Task[Any]] = set()
            if workers:
                _, pending = await asyncio.wait(
                    workers, timeout=self.config.grace_s if self._stopping else None
                )
        else:
            pending = {w for w in workers if not w.done()}
        while pending:
            # again until each ends: a body that caught the CancelledError and went on (a retry
            # loop catching everything) must not hold the stop (and every later Ctrl-C) forever
            for w in pending:
                w.cancel()
            _, pending = await asyncio.wait(pending, timeout=_RECANCEL_S)
        await asyncio.gather(*workers, producer, pump, return_exceptions=True)
        # pipelines still queued (hard stop), waiting for a commit or parked are resumable: mark
        # them interrupted (their rows follow the checkpoints they wait for, in the same order)
        while not queue.empty():
            state = queue.get_nowait()
            if state is not None:
                self._interrupt(state, "queued")
        for _ticket, states, _jumps in self._awaiting.values():
            for state in states:
                self._interrupt(state, "queued")
        self._awaiting.clear()
        for _, _, state in self._parked:
            self._event(
                "pipeline.deferred_interrupted",
                "pipeline",
                pipeline_id=state.spec.key,
                data={"task": state.tasks[state.seq].name, "seq": state.seq, "attempts": state.attempt},
            )
            self._interrupt(state, "parked")
        self._parked.clear()
        heartbeat.cancel()
        await asyncio.gather(heartbeat, return_exceptions=True)

    def _finish(self, run_row: RunRecord) -> RunReport:
        assert self._recorder is not None
        status = "interrupted" if self._stopping else "completed"
        ended = self.clock.wall()
        duration_ms = round((ended - run_row.started_at) * 1000, 3)
        if self._skipped_quietly:
            self._event("run.skipped", "run", data={"count": self._skipped_quietly, "reason": "succeeded"})
        self._event(
            "run.finished",
            "run",
            data={"status": status, "duration_ms": duration_ms, "stop_reason": self._stop_reason},
        )
        self.counters["sink_errors"] = self._recorder.sink_errors
        final = Batch()
        run_row.status = status
        run_row.ended_at = ended
        run_row.heartbeat_at = ended
        run_row.stop_reason = self._stop_reason
        run_row.stats = self._gauges()
        final.runs.append(run_row)
        final.resources.extend(self._resource_rows())
        if self._recorder.failed is None:
            self._recorder.pending.extend(final)
            try:
                self._recorder.flush()
            except StoreUnavailable as exc:
                self._fatal = self._fatal or exc
        self._recorder.close_sinks()
        # the final flush delivered the last events to the sinks: count what they raised there too
        self.counters["sink_errors"] = self._recorder.sink_errors
        self._recorder = None  # later report_metric() calls write through directly
        return RunReport(
            run_id=run_row.run_id,
            status=status,
            started_at=run_row.started_at,
            ended_at=ended,
            duration_ms=duration_ms,
            counters=dict(self.counters),
            stop_reason=self._stop_reason,
            store=getattr(self.store, "location", None),
            producer_error=self._producer_error,
            pools={name: _pool_stats(pool) for name, pool in self.pools.items()},
        )

    def _resource_rows(self) -> list[Any]:
        from pyattacker.model import ResourceRecord

        rows = []
        now = self.clock.wall()
        for name, pool in self.pools.items():
            try:
                snapshot = pool.snapshot()
            except Exception:
                continue
            specs = {r.id: r for r in pool.resources()}
            for row in snapshot:
                res = specs.get(row["id"])
                rows.append(
                    ResourceRecord(
                        run_id=self.run_id or "",
                        pool=name,
                        resource_id=str(row["id"]),
                        kind=str(row.get("kind", "")),
                        state=str(row.get("state", "")),
                        spec=res.spec() if res is not None else {},
                        stats=dict(row),
                        updated_at=now,
                    )
                )
        return rows

    def _gauges(self) -> dict[str, Any]:
        """Counters plus the live gauges that watch/serve show (stored on the run row)."""
        waiting = 0
        for pool in self.pools.values():
            waiting += int(getattr(pool, "waiting", 0) or 0)
        return {
            **self.counters,
            "in_flight_pipelines": self._admitted - self._done,
            "delayed_pipelines": len(self._parked),
            "waiting_pipelines": waiting,
        }

    async def _heartbeat(self, run_row: RunRecord) -> None:
        assert self._recorder is not None
        while True:
            await asyncio.sleep(self.config.heartbeat_s)
            run_row.heartbeat_at = self.clock.wall()
            run_row.stats = self._gauges()
            self._recorder.pending.runs.append(run_row)
            self._recorder.pending.resources.extend(self._resource_rows())
            try:
                self._recorder.flush()
            except StoreUnavailable as exc:
                self._fatal = self._fatal or exc
                self._hard_stop("store_unavailable")
                return

    # -- events -------------------------------------------------------------------------------
    def _event(
        self,
        kind: str,
        scope: str,
        *,
        pipeline_id: str | None = None,
        task_run_id: str | None = None,
        pool: str | None = None,
        resource_id: str | None = None,
        data: dict[str, Any] | None = None,
    ) -> None:
        rec = self._recorder
        if rec is None:
            return
        rec.event(
            EventRecord(
                ts=self._wall(),
                kind=kind,
                scope=scope,
                run_id=self.run_id,
                pipeline_id=pipeline_id,
                task_run_id=task_run_id,
                pool=pool,
                resource_id=resource_id,
                data=data or {},
            )
        )

    def _pool_event(self, ev: Any) -> None:
        self._event(ev.kind, "resource", pool=ev.pool, resource_id=ev.resource_id, data=dict(ev.data))

    def _sink_failed(self, sink: Any, exc: BaseException) -> None:
        key = f"sink:{type(sink).__name__}"
        if key not in self._warned:
            self._warned.add(key)
            log.warning("pyattacker: event sink %s failed (the run goes on): %s", type(sink).__name__, exc)

    # -- admission ------------------------------------------------------------------------------
    async def _produce(self, specs: Iterable[PipelineSpec], queue: WorkQueue[_Pipeline | None]) -> None:
        assert self._capacity is not None
        limit = self.config.admitted_limit
        counters = self.counters
        iterator = iter(specs)
        try:
            while not self._stopping:
                chunk = list(itertools.islice(iterator, _LOOKUP_CHUNK))
                if not chunk:
                    break
                _check_specs(chunk)
                rows, states = self._lookup([s.key for s in chunk])
                seen: dict[str, PipelineSpec] = {}
                active = self._active
                for spec in chunk:
                    if self._stopping:
                        break
                    key = spec.key
                    if key in seen or key in active:
                        first = seen.get(key)
                        self._duplicate(spec, first if first is not None else active[key])
                        continue
                    seen[key] = spec
                    done = states.get(key)
                    if done is not None and done[0] == "succeeded":
                        _state, spec_digest, seed_digest, run_id = done
                        if spec_digest == spec.template.spec_digest and seed_digest == spec.seed_digest:
                            # finished already (the usual skip, ``_skip`` inline: once per seed of
                            # a resume); by this run: the key was given twice
                            if run_id != self.run_id and not self._trace:
                                counters["skipped"] += 1
                                self._skipped_quietly += 1
                            else:
                                self._skip(spec, "succeeded" if run_id != self.run_id else "duplicate_key")
                            continue
                        row = PipelineRecord(
                            pipeline_id=key, run_id=run_id, name="", key=key, state="succeeded",
                            spec_digest=spec_digest, seed_digest=seed_digest,
                        )  # fmt: skip
                        state = self._open(spec, row)  # a changed identity: refused there
                    else:
                        state = self._open(spec, rows.get(key))
                    if state is None:
                        continue
                    while self._admitted - self._done >= limit and not self._stopping:
                        self._capacity.clear()
                        await self._capacity.wait()
                    if self._stopping:
                        # admitted bookkeeping never happened: leave the row as it was
                        break
                    self._admitted += 1
                    self.counters["pipelines_admitted"] += 1
                    self._active[spec.key] = spec
                    if spec.template.control is not None:  # a restart from the seed: its reset
                        self._control.admitted(state)
                    self._staff(queue)
                    if queue.offer(state):  # room in the queue (no coroutine): the usual case
                        continue
                    try:
                        await queue.put(state)
                    except asyncio.CancelledError:
                        self._interrupt(state, "queued")  # admitted but never handed to a worker
                        raise
        finally:
            self._producer_done = True
            self._check_complete()

    def _lookup(
        self, keys: list[str]
    ) -> tuple[dict[str, PipelineRecord], dict[str, tuple[str, str, str, str]]]:
        """Stored rows for ``keys`` that a resume has to look at, and ``(state, spec_digest,
        seed_digest, run_id)`` per stored key. A store offering ``lookup_states`` answers the
        common case of a resume (already succeeded: skip) from those four narrow columns, without
        building a record per row; only the rows in another state are read in full."""
        narrow = getattr(self.store, "lookup_states", None)
        if narrow is None or self.config.retry_succeeded or self.config.fresh_restart:
            return self.store.lookup_pipelines(keys), {}
        states = narrow(keys)
        rest = [key for key, st in states.items() if st[0] != "succeeded"]
        return (self.store.lookup_pipelines(rest) if rest else {}), states

    def _duplicate(self, spec: PipelineSpec, first: PipelineSpec) -> None:
        """A key admitted a second time while its first spec is queued or running: the same
        seed and chain is one pipeline (skipped, ``duplicate_key``); another seed or chain under
        the key is refused, as a resume refuses it, instead of being dropped in silence."""
        if first.seed_digest == spec.seed_digest and first.template.spec_digest == spec.template.spec_digest:
            self._skip(spec, "duplicate_key")
            return
        what = "task chain" if first.template.spec_digest != spec.template.spec_digest else "seed"
        err = PipelineIdentityConflict(
            f"pipeline {spec.key!r} is given twice in this run with a different {what}; a key"
            " names one pipeline: make the keys unique (the source's key_field) or drop the"
            " duplicate row"
        )
        self._event("pipeline.identity_conflict", "pipeline", pipeline_id=spec.key, data={"error": str(err)})
        raise err

    def _skip(self, spec: PipelineSpec, reason: str) -> None:
        """Count a skipped pipeline. Its stored row is unchanged; with ``events="all"`` each skip is
        also an event, otherwise one ``run.skipped`` event per reason closes the run (a resume of
        a finished million-pipeline store should not write a million rows)."""
        self.counters["skipped"] += 1
        if reason != "succeeded" or self._trace:
            self._event("pipeline.skipped", "pipeline", pipeline_id=spec.key, data={"reason": reason})
        else:
            self._skipped_quietly += 1

    def _open(self, spec: PipelineSpec, row: PipelineRecord | None) -> _Pipeline | None:
        """Decide what to do with one admitted spec: skip, repair, resume or start."""
        cfg = self.config
        template = spec.template
        if row is not None and (
            row.spec_digest != template.spec_digest or row.seed_digest != spec.seed_digest
        ):
            what = "task chain" if row.spec_digest != template.spec_digest else "seed"
            err = PipelineIdentityConflict(
                f"pipeline {spec.key!r} is stored with a different {what}; its old results are kept."
                " Use a new key or a new store for the changed pipeline"
            )
            self._event(
                "pipeline.identity_conflict", "pipeline", pipeline_id=spec.key, data={"error": str(err)}
            )
            raise err
        if row is not None and self.run_id and row.run_id == self.run_id:
            # this run admitted the key already and finished it: it is given twice (running
            # it again would repeat its tasks, a failed one included)
            self._skip(spec, "duplicate_key")
            return None
        if row is not None and row.state == "succeeded" and not cfg.retry_succeeded:
            self._skip(spec, "succeeded")
            return None
        n = len(template.tasks)
        now = self._wall()
        record = (
            row
            if row is not None
            else PipelineRecord(
                pipeline_id=spec.key,
                run_id=self.run_id or "",
                name=template.name,
                key=spec.key,
                created_at=now,
                n_tasks_total=n,
                seed_digest=spec.seed_digest,
                spec_digest=template.spec_digest,
                seed_key=spec.seed_key,
                repeat=spec.repeat,
                tags=template.tags,
            )
        )
        previous_run = record.run_id
        discarded = record.cursor
        start, value = 0, spec.seed
        restart = cfg.fresh_restart and row is not None
        resumable = row is not None and not restart and row.state != "succeeded"
        if resumable and (record.cursor > n or record.cursor < 0):
            self._corrupt(spec, record)
            return None
        plan = None
        if template.control is not None:
            self._control.check_ledger(spec)
            why = "pipeline_row_missing" if row is None else "fresh_restart" if restart else "retry_succeeded"
            plan = self._control.resume(spec, row, resumable, why)
            if plan is None:
                return None
            start, value = plan.start, plan.value
        elif row is not None and resumable:
            if row.cursor == n:
                if self._repair(spec, record):
                    return None
                row.cursor = n - 1  # the last output is not on disk: run the last task again
            if row.cursor > 0:
                start, value = self._load_checkpoint(spec, row)
        if restart:
            self._event(
                "pipeline.restarted",
                "pipeline",
                pipeline_id=spec.key,
                data={
                    "reason": "fresh_restart",
                    "discarded_cursor": row.cursor if row else 0,
                    "append_only_history_preserved": True,
                },
            )
        record.run_id = self.run_id or ""
        record.state = "running"
        record.started_at = record.started_at or now
        record.finished_at = None
        record.cursor = start
        record.failed_task = record.error_class = record.error_type = record.error_message = (
            record.traceback
        ) = None
        record.resume_of = previous_run if start > 0 else None
        record.repeat = spec.repeat
        state = _Pipeline(spec, record, start, value)
        state.write_seed = row is None or restart or start == 0
        if plan is not None:
            self._control.opened(state, plan, discarded)
        if start > 0:
            resumed: dict[str, Any] = {"from_seq": start, "resume_of": previous_run}
            if plan is not None:
                resumed.update(plan.via())
            self._event("pipeline.resumed", "pipeline", pipeline_id=spec.key, data=resumed)
        return state

    def _load_checkpoint(self, spec: PipelineSpec, row: PipelineRecord) -> tuple[int, Any]:
        """Where a resumed pipeline continues: after the latest task whose output can be read.

        The checkpoint at the cursor is the usual answer. When it cannot be used (its row or
        bytes missing, a blob deleted or damaged, bytes no codec decodes), the earlier outputs
        are tried, latest first, down to the seed: only the tasks after the last usable output
        run again, never one whose answer is still on disk. One event names the checkpoint at
        the cursor, why it could not be used and where the pipeline resumes (``resume_from``:
        the number of tasks kept, 0 = from the seed)."""
        problem: tuple[str, dict[str, Any]] | None = None
        start, value = 0, spec.seed
        for seq in range(row.cursor - 1, -1, -1):
            loaded, why = self._checkpoint_at(spec, seq)
            if why is None:
                start, value = seq + 1, loaded
                break
            problem = problem or why
        if problem is not None:
            kind, data = problem
            data["resume_from"] = start
            self._event(kind, "pipeline", pipeline_id=spec.key, data=data)
        return start, value

    def _checkpoint_at(
        self, spec: PipelineSpec, seq: int, task: str | None = None, writer: int | None = None
    ) -> tuple[Any, tuple[str, dict[str, Any]] | None]:
        """``(value, None)`` for the output of task ``seq``, or ``(None, (event kind, data))``
        saying why it cannot be used. ``task`` names the writer of an artifact past the chain's
        slots (a handoff's entry) and ``writer`` is its seq: its return annotation gives the record
        types to decode with, as for any output (else a handed-over Struct resumes as a dict)."""
        chain = spec.template.tasks
        task = task or chain[seq].name
        writer = seq if writer is None else writer
        try:
            art = self.store.get_artifact(spec.key, seq)
        except CorruptRow as exc:  # a damaged artifact row: like bytes no codec can decode
            return None, ("pipeline.checkpoint_unusable", {"seq": seq, "task": task, "error": str(exc)})
        if art is None:
            return None, (
                "pipeline.checkpoint_missing",
                {"seq": seq, "task": task, "reason": "artifact_row_missing"},
            )
        if art.payload is None and art.blob_ref and self._backend is not None:
            try:
                art = self._backend.hydrate(art)
            except Exception as exc:  # a backend plugin that raises: the bytes are unavailable
                return None, self._blob_unavailable(seq, task, art, f"{type(exc).__name__}: {exc}")
        if art.payload is None:
            ref = art.blob_ref
            if ref and not ref.startswith("null:"):
                return None, self._blob_unavailable(seq, task, art, None)
            return None, (
                "pipeline.checkpoint_missing",
                {"seq": seq, "task": task, "reason": "summary_journal_or_null_backend"},
            )
        try:
            types = self._returned_types(chain[writer]) if 0 <= writer < len(chain) else {}
            return self.codecs.decode(art.codec, art.type_name, art.payload, types), None
        except ArtifactCodecError as exc:
            return None, ("pipeline.checkpoint_unusable", {"seq": seq, "task": task, "error": str(exc)})

    def _returned_types(self, task: TaskSpec) -> dict[str, type]:
        """The record types ``task`` declares it returns (resume decodes its output as one)."""
        found = self._record_types.get(id(task))
        if found is None:
            found = {}
            for item in (*task.children, task):  # a composite's own annotation wins
                found.update(returned_record_types(item.fn))
            self._record_types[id(task)] = found
        return found

    def _blob_unavailable(
        self, seq: int, task: str, art: ArtifactRecord, error: str | None
    ) -> tuple[str, dict[str, Any]]:
        """The row points at bytes elsewhere that this run's backend could not read back: a
        blob deleted, truncated, replaced or unreadable, or a backend other than the one that
        wrote it (``backend`` names the one this run uses)."""
        data: dict[str, Any] = {
            "seq": seq,
            "task": task,
            "reason": "blob_unavailable",
            "blob_ref": art.blob_ref,
            "backend": getattr(self._backend, "name", None),
        }
        if error is not None:
            data["error"] = error
        return "pipeline.checkpoint_missing", data

    def _corrupt(self, spec: PipelineSpec, record: PipelineRecord, ledger: str | None = None) -> None:
        """Fail a pipeline whose stored cursor, or (``ledger``: what is wrong) whose current
        ledger row, cannot be true: resuming from it would run tasks at a made-up position."""
        err = CorruptCheckpoint(
            f"pipeline {spec.key!r}: {ledger}"
            if ledger is not None
            else f"pipeline {spec.key!r}: stored cursor {record.cursor} is outside its"
            f" {len(spec.template.tasks)} tasks (0..{len(spec.template.tasks)})"
        )
        record.run_id = self.run_id or ""
        record.state = "failed"
        record.error_class, record.error_type, record.error_message = "fatal", "CorruptCheckpoint", str(err)
        record.finished_at = self.clock.wall()
        if ledger is None:
            self._event(
                "pipeline.corrupt_cursor", "pipeline", pipeline_id=spec.key, data={"cursor": record.cursor}
            )
        else:
            self._event("pipeline.corrupt_ledger", "pipeline", pipeline_id=spec.key, data={"error": ledger})
        self._event(
            "pipeline.failed",
            "pipeline",
            pipeline_id=spec.key,
            data={"error": str(err), "phase": "corrupt_cursor" if ledger is None else "corrupt_ledger"},
        )
        self._recorder_pending().pipelines.append(record)
        self.counters["pipelines_failed"] += 1

    def _repair(
        self, spec: PipelineSpec, record: PipelineRecord, final_seq: int | None = None, jump: Any = None
    ) -> bool:
        """A pipeline whose last artifact is durable but whose row never said so: settle it.

        False when that artifact is not there after all (a row edited or deleted by hand): its
        answer is not on disk, so the caller runs the last task again instead of leaving the
        pipeline unfinished at every resume. ``n`` is the chain's length, as in ``_open`` (the
        stored ``n_tasks_total`` may be wrong). ``final_seq``: the artifact that ends the
        pipeline when it is not the last task's (the entry of a committed END ``jump``)."""
        n = len(spec.template.tasks)
        seq = n - 1 if final_seq is None else final_seq
        art = self.store.get_artifact(spec.key, seq)
        previous = {
            "previous_state": record.state,
            "previous_error_type": record.error_type,
            "previous_error_message": record.error_message,
            "previous_failed_task": record.failed_task,
            "previous_run_id": record.run_id,
        }
        if art is None:
            self._event(
                "pipeline.checkpoint_missing",
                "pipeline",
                pipeline_id=spec.key,
                data={
                    "seq": seq,
                    "reason": "terminal_artifact_missing",
                    "action": "rerun_last_task" if jump is None else "restart_from_seed",
                },
            )
            return False
        settled = msgspec_copy(record)
        settled.state = "succeeded"
        settled.run_id = self.run_id or ""
        settled.finished_at = self.clock.wall()
        settled.failed_task = settled.error_class = settled.error_type = settled.error_message = (
            settled.traceback
        ) = None
        batch = Batch()
        art.is_final = True
        if spec.template.control is not None:
            batch.finals_cleared.append(spec.key)
        batch.artifacts.append(art)
        batch.pipelines.append(settled)
        try:
            self.store.commit(batch)
        except Exception as exc:
            self.counters["repair_failures"] += 1
            self.counters["pipelines_failed"] += 1
            self._event(
                "pipeline.terminal_repair_failed",
                "pipeline",
                pipeline_id=spec.key,
                data={**previous, "error": f"{type(exc).__name__}: {exc}", "phase": "settle"},
            )
            return True
        self.counters["pipelines_succeeded"] += 1
        self._event(
            "pipeline.terminal_repaired",
            "pipeline",
            pipeline_id=spec.key,
            data={
                **previous,
                "n_tasks_done": n,
                "n_tasks_total": n,
                "artifact": art.artifact_id,
                "artifact_seq": seq,
                **({} if jump is None else {"handoff_id": jump.handoff_id, "handoff_task": jump.from_task}),
            },
        )
        self._event(
            "pipeline.succeeded", "pipeline", pipeline_id=spec.key, data={"tasks": n, "repaired": True}
        )
        return True

    # -- the delay queue -----------------------------------------------------------------------------
    def _park(self, state: _Pipeline, delay: float) -> None:
        assert self._pump_wake is not None
        due = self.clock.now() + delay
        heapq.heappush(self._parked, (due, next(self._tie), state))
        self.counters["pipelines_deferred"] += 1
        self._pump_wake.set()

    async def _pump(self, queue: WorkQueue[_Pipeline | None]) -> None:
        """Move parked pipelines whose delay has passed back onto the work queue."""
        assert self._pump_wake is not None
        wake = self._pump_wake
        loop = asyncio.get_running_loop()
        while not self._stopping:
            now = self.clock.now()
            while self._parked and self._parked[0][0] <= now and not self._stopping:
                item = heapq.heappop(self._parked)
                self._staff(queue)
                try:
                    await queue.put(item[2])
                except asyncio.CancelledError:
                    heapq.heappush(self._parked, item)  # still parked: shutdown marks it interrupted
                    raise
            wake.clear()
            timer = (
                loop.call_later(max(0.0, self._parked[0][0] - self.clock.now()), wake.set)
                if self._parked
                else None
            )
            try:
                await wake.wait()
            finally:
                if timer is not None:
                    timer.cancel()
        self._check_complete()

    # -- workers ------------------------------------------------------------------------------------
    def _staff(self, queue: WorkQueue[_Pipeline | None]) -> None:
        """Start a worker for the pipeline about to be queued unless an idle one will take it.

        Items already queued are claimed by idle workers first (a woken worker counts as idle
        until it has taken its item), so a new one starts only when every idle worker is spoken
        for, up to ``concurrency``. Called once per admitted or un-parked pipeline, never per task.
        """
        workers = self._workers
        if self._idle <= queue.qsize() and len(workers) < self.config.concurrency:
            workers.append(self._start_worker(queue, len(workers)))

    def _start_worker(self, queue: WorkQueue[_Pipeline | None], index: int) -> _Worker:
        worker = _Worker(self._worker(queue), loop=asyncio.get_running_loop(), index=index, queue=queue)
        worker.add_done_callback(self._supervise)
        return worker

    async def _worker(self, queue: WorkQueue[_Pipeline | None]) -> None:
        me = asyncio.current_task()
        assert isinstance(me, _Worker)
        while True:
            # the next pipeline is nearly always queued already: taken without a coroutine
            state = queue.take()
            if state is EMPTY:
                self._idle += 1
                try:
                    state = await queue.get()
                finally:
                    self._idle -= 1
            if state is None:
                return
            me.held = state
            try:
                # the pipeline's attempts, inline: every suspension of a task body passes through
                # each coroutine above it, so a coroutine of its own (per pipeline, or per
                # attempt) would cost on every one
                while state.seq < state.n:
                    if self._stopping:
                        self._interrupt(state, "stopped")
                        break
                    # -- one attempt of the current task (``continue``: advanced; ``break``:
                    # parked or finished); the failure path is ``_attempt_failed``
                    spec = state.tasks[state.seq]
                    state.attempt += 1
                    attempt = state.attempt
                    seq = state.seq
                    ctx = TaskContext(self, state, seq, attempt, spec, spec.name, f"{state.spec.key}:{seq}")
                    t0 = self._mono()
                    wall0 = self._wall()
                    if state.task_started is None:
                        state.task_started = t0
                        state.task_started_wall = wall0
                    state.record.attempts_total += 1
                    self.counters["attempts"] += 1
                    error: BaseException | None = None
                    value: Any = None
                    try:
                        if spec.is_async:
                            value = spec.fn(state.value, ctx) if spec.takes_ctx else spec.fn(state.value)
                        else:
                            self._in_sync = True  # lets a second Ctrl-C interrupt a blocking sync body
                            try:
                                value = spec.fn(state.value, ctx) if spec.takes_ctx else spec.fn(state.value)
                            finally:
                                self._in_sync = False
                        if spec.is_async or asyncio.iscoroutine(value):
                            if spec.timeout_s:
                                async with asyncio.timeout(spec.timeout_s):
                                    value = await value
                            else:
                                value = await value
                    except asyncio.CancelledError as exc:
                        if self._stopping:
                            self._attempt_interrupted(state, ctx, t0, wall0, "cancelled")
                            raise
                        # the runner cancels workers only to stop: the body raised it itself, or
                        # something other than the runner cancelled this worker while the body
                        # ran. Either is this attempt's failure, and the worker goes on
                        error = self._stray_cancel(spec, exc) if _cancel_requested() else exc
                    except Exception as exc:
                        error = exc
                    except BaseException as exc:
                        if self._real_interrupt(exc):
                            self._attempt_interrupted(state, ctx, t0, wall0, "interrupted")
                            raise
                        error = exc  # SystemExit, GeneratorExit, a custom BaseException: the task's failure
                    n_leaked = 0
                    if ctx.held_leases:
                        leaked = ctx.reclaim_now()
                        if leaked:
                            n_leaked = len(leaked)
                            error = self._leaked(state, ctx, leaked, error)
                    else:  # nothing to return (``async with ctx.acquire()`` gave its lease back): no call
                        ctx.held_leases = _ENDED  # as ``reclaim_now`` ends the context
                    if error is None and type(value) is Handoff:
                        try:
                            state.jump = self._control.stage_handoff(state, ctx, value, t0, wall0)
                        except FatalError as exc:
                            error = exc
                        except ArtifactBackendUnavailable as exc:
                            self._backend_failed(state, ctx, t0, wall0, exc)
                            break
                        else:
                            # durable before the destination starts, as a checkpoint is before the
                            # next task: the pipeline waits for its group commit off this worker
                            assert self._recorder is not None
                            ticket = self._recorder.commit_ticket()
                            state.attempt = 0
                            state.task_started = state.task_started_wall = None
                            group = self._group
                            if group is None or group[0] is not ticket:
                                group = self._group = self._awaiting_commit(ticket, queue)
                            group[1].append(state)
                            group[2].append(state)
                            break
                    if error is None:
                        try:
                            art = self._stage_checkpoint(state, ctx, value, t0, wall0)
                        except ArtifactCodecError as exc:  # named: the codec's message knows neither
                            error = ArtifactCodecError(
                                f"the output of task {spec.name!r} of pipeline {state.spec.key!r}"
                                f" cannot be stored: {exc}"
                            )
                            error.__cause__ = exc
                        except ArtifactBackendUnavailable as exc:
                            self._backend_failed(state, ctx, t0, wall0, exc)
                            break
                        else:
                            assert self._recorder is not None
                            ticket = self._recorder.commit_ticket()
                            # the cursor moves (``_advance`` inline: once per task); the last task finishes
                            state.seq += 1
                            state.value = value
                            state.attempt = 0
                            state.task_started = state.task_started_wall = None
                            # durable before the pipeline's next task starts, and before a last
                            # task's pipeline succeeds: the pipeline waits for its group commit off
                            # this worker, which takes the next one (``_resume_after``); the worker
                            # never idles through a commit
                            if state.seq >= state.n:
                                state.output = art
                            group = self._group
                            if group is None or group[0] is not ticket:
                                group = self._group = self._awaiting_commit(ticket, queue)
                            group[1].append(state)
                            break
                    if not await self._attempt_failed(state, ctx, t0, wall0, error, n_leaked):
                        break
            except asyncio.CancelledError:
                self._interrupt(state, "cancelled")
                raise
            except (StoreUnavailable, PipelineIdentityConflict):
                raise
            except Exception as exc:
                self._internal_error(state, exc)
            except BaseException as exc:
                # outside task code, or a real Ctrl-C in a task body (resumable): record, then let
                # supervision (or the caller) stop the run
                interrupted = self._stopping or isinstance(exc, KeyboardInterrupt)
                self._terminal(
                    state, "interrupted" if interrupted else "failed", error=exc, phase="worker_crashed"
                )
                raise
            me.held = None

    def _awaiting_commit(self, ticket: asyncio.Future[None], queue: WorkQueue[_Pipeline | None]) -> _Group:
        """The pipelines whose checkpoint ``ticket``'s group commit carries, and those of them
        that jumped (two lists and one callback per commit, never per pipeline)."""
        group: _Group = (ticket, [], [])
        key = next(self._tie)
        self._awaiting[key] = group
        ticket.add_done_callback(functools.partial(self._resume_after, queue, key))
        return group

    def _resume_after(
        self, queue: WorkQueue[_Pipeline | None], key: int, ticket: asyncio.Future[None]
    ) -> None:
        """A group commit ended: its pipelines go back to the front of the queue, in order, for
        their next task, and those it carried the last output of succeed (or, if it failed, the
        run stops as for any store failure)."""
        if ticket.cancelled() and (self._stopping or self._hard):
            # a stop cancelled a worker that awaited this same commit (the checkpoint of a
            # failure), and the shared future with it: the commit itself goes on.
            # Its pipelines stay here and the shutdown marks them interrupted (resumable), as
            # any it finds waiting
            return
        group = self._awaiting.pop(key, None)
        if group is None:  # the run shut down first and left them interrupted
            return
        if ticket.cancelled() or ticket.exception() is not None:
            exc = (
                StoreUnavailable("the commit of a checkpoint was cancelled")
                if ticket.cancelled()
                else ticket.exception()
            )
            self._fatal = self._fatal or exc
            self._hard_stop("store_unavailable")
            return
        states = group[1]
        for state in group[2]:  # jumps: durable now, so counted and moved (END: finished below)
            try:
                self._control.landed(state)
            except Exception as exc:  # as in a worker: recorded, never a run left waiting
                state.jump = None
                states.remove(state)  # (rare: an O(n) removal keeps the usual path free of a test)
                self._internal_error(state, exc)
        going = [state for state in states if state.seq < state.n]
        queue.push_front(going)
        for _ in going:  # workers for them, up to ``concurrency`` (idle ones take them first)
            self._staff(queue)
        if len(going) != len(states):
            for state in states:
                if state.seq >= state.n:
                    output, state.output = state.output, None
                    try:
                        assert output is not None
                        if state.jump is None:
                            self._succeeded(state, output)
                        else:  # ended by a jump to END
                            self._control.ended(state, output)
                    except Exception as exc:  # as in a worker: recorded, never a run left waiting
                        self._internal_error(state, exc)

    def _internal_error(self, state: _Pipeline, exc: Exception) -> None:
        self._event(
            "runner.internal_error",
            "run",
            pipeline_id=state.spec.key,
            data={
                "error": f"{type(exc).__name__}: {_error_text(exc)}",
                "traceback": "".join(traceback.format_exception(exc)),
            },
        )
        self._terminal(state, "failed", error=exc, phase="internal")

    def _leaked(
        self, state: _Pipeline, ctx: TaskContext, leaked: list[Any], error: BaseException | None
    ) -> BaseException | None:
        """Leases the task body still held at its end (returned already): one event each; with
        ``strict_leases`` a success becomes a ``LeaseLeakError``. Returns the attempt's error."""
        spec = ctx.task
        attempt = ctx.attempt
        self.counters["leases_leaked"] += len(leaked)
        for lease in leaked:
            self._event(
                "lease.leaked",
                "task",
                pipeline_id=state.spec.key,
                task_run_id=ctx.task_run_id,
                pool=lease.pool,
                resource_id=lease.resource.id,
                data={
                    "task": spec.name,
                    "seq": state.seq,
                    "attempt": attempt,
                    "held_ms": lease.held_ms,
                    "hint": "use `async with ctx.acquire()` or release the lease before returning",
                },
            )
        if error is None and self.config.strict_leases:
            error = LeaseLeakError(f"task {spec.name!r} ended holding {len(leaked)} lease(s) (strict_leases)")
        return error

    async def _attempt_failed(
        self,
        state: _Pipeline,
        ctx: TaskContext,
        t0: float,
        wall0: float,
        error: BaseException | None,
        leaked: int,
    ) -> bool:
        """An attempt that ended in ``error``: decide, record, retry or fail. True: run the
        task again now; False: parked or finished."""
        assert error is not None
        spec = ctx.task
        attempt = ctx.attempt
        clock = self.clock
        elapsed = clock.now() - (state.task_started or t0)
        decision = spec.retry.decide(error, attempt, ctx.rng, elapsed)
        decision["leaked_leases"] = leaked
        outcome = "timeout" if isinstance(error, TimeoutError) else "failed"
        self._record_attempt(state, ctx, t0, wall0, outcome, error, decision)
        self._task_failed(state, ctx, error, error_class=decision["error_class"], decision=decision)
        if decision["retry"] and not self._stopping:
            self.counters["retries"] += 1
            delay = decision["delay_s"]
            self._event(
                "task.retry_scheduled",
                "task",
                pipeline_id=state.spec.key,
                task_run_id=ctx.task_run_id,
                data={"task": spec.name, "attempt": attempt, "delay_s": delay},
            )
            if delay > 0:
                self._event(
                    "pipeline.deferred",
                    "pipeline",
                    pipeline_id=state.spec.key,
                    data={"task": spec.name, "seq": state.seq, "attempt": attempt, "delay_s": delay},
                )
                self._park(state, delay)
                return False
            return True
        if decision["retry"] and self._stopping:
            self._interrupt(state, "stopped")
            return False
        await self._fail(state, ctx, error, decision)
        return False

    def _task_failed(self, state: _Pipeline, ctx: TaskContext, error: BaseException, **data: Any) -> None:
        """The ``task.failed`` event of an attempt that ended in ``error`` (``data`` adds why)."""
        self._event(
            "task.failed",
            "task",
            pipeline_id=state.spec.key,
            task_run_id=ctx.task_run_id,
            data={
                "task": ctx.task.name,
                "seq": state.seq,
                "attempt": ctx.attempt,
                "error": f"{type(error).__name__}: {_error_text(error)}",
                **data,
            },
        )

    def _backend_failed(
        self, state: _Pipeline, ctx: TaskContext, t0: float, wall0: float, exc: ArtifactBackendUnavailable
    ) -> None:
        """The task's output could not be stored. Not the task's failure, and not one that a
        retry or the next pipeline would get past (a full disk, a folder made unwritable): the
        attempt is recorded, the pipeline left resumable with its cursor (resume runs this task
        again) and the run stops; the CLI exits 2 with the error."""
        reason = "artifact_backend_unavailable"
        self._record_attempt(
            state, ctx, t0, wall0, "failed", exc, {"retry": False, "reason": reason, "delay_s": 0.0}
        )
        self._task_failed(state, ctx, exc, reason=reason)
        self._fatal = self._fatal or exc
        self.stop(reason)
        self._terminal(state, "interrupted", error=exc, phase=reason)

    def _put(self, art: ArtifactRecord, task: str) -> ArtifactRecord:
        """``art`` through the artifact backend. A failure there is the backend's, not the
        task's (see ``_backend_failed``): ``ArtifactBackendUnavailable``, naming both."""
        assert self._putter is not None
        try:
            return self._putter.put(art)
        except Exception as exc:
            raise self._backend_error(exc, task, art.pipeline_id) from exc

    def _backend_error(self, exc: Exception, task: str, key: str) -> ArtifactBackendUnavailable:
        """What ``backend.put`` raised, as the backend's failure named for the user."""
        name = getattr(self._backend, "name", type(self._backend).__name__)
        return ArtifactBackendUnavailable(
            f"artifact backend {name!r} could not store the output of task {task!r} of"
            f" pipeline {key!r}: {type(exc).__name__}: {_error_text(exc)}"
        )

    def _attempt_interrupted(
        self, state: _Pipeline, ctx: TaskContext, t0: float, wall0: float, reason: str
    ) -> None:
        """A cancel or a real Ctrl-C ends the attempt: return its leases, record it, let it go on."""
        ctx.reclaim_now()
        self._record_attempt(
            state, ctx, t0, wall0, "cancelled", None, {"retry": False, "reason": reason, "delay_s": 0.0}
        )

    def _stray_cancel(self, spec: Any, exc: asyncio.CancelledError) -> RuntimeError:
        """The failure recorded for a cancel of this worker that the runner did not ask for."""
        _forget_cancel()
        error = RuntimeError(
            f"task {spec.name!r}: its worker was cancelled while the task ran, and not by the runner"
            " (the run was not stopping); only the runner may cancel its workers"
        )
        error.__cause__ = exc
        return error

    def _real_interrupt(self, exc: BaseException) -> bool:
        """Whether a ``BaseException`` out of a task body stops the run rather than failing the task.

        Only a ``KeyboardInterrupt`` can be a real Ctrl-C: the runner's own handler raises one
        into a blocking sync body (after setting ``_stopping``), and without the runner's
        handlers (``handle_signals=False``, not the main thread) Python's default handler may.
        Anything else (``SystemExit`` from ``sys.exit()``, ``GeneratorExit``, a custom
        ``BaseException``) is task code failing, recorded like any exception.
        """
        return isinstance(exc, KeyboardInterrupt) and (self._stopping or not self._owns_signals)

    def _record_attempt(
        self,
        state: _Pipeline,
        ctx: TaskContext,
        t0: float,
        wall0: float,
        outcome: str,
        error: BaseException | None,
        decision: dict[str, Any],
        ended: float | None = None,
    ) -> float:
        """Record the attempt (write-behind); returns its duration in ms. ``ended``: the end on
        the monotonic clock, when the caller has read it already (else read here)."""
        assert self._recorder is not None
        ms = ((self._mono() if ended is None else ended) - t0) * 1000.0
        # round3(ms) inline: no call (and no ``int()`` for a duration that is not negative)
        duration = (ms * 1000.0 + 0.5) // 1.0 / 1000.0 if ms >= 0.0 else round3(ms)
        # at most 15 keyword arguments: CPython compiles a call with 16 or more into building a
        # dict and unpacking it, about 1 µs more per call (the error fields default to None)
        record = AttemptRecord(
            run_id=self.run_id or "",
            pipeline_id=state.spec.key,
            task_run_id=ctx.task_run_id,
            task_name=ctx.task.name,
            seq=state.seq,
            attempt=ctx.attempt,
            started_at=wall0,
            ended_at=wall0 + duration / 1000,
            duration_ms=duration,
            outcome=outcome,
            decision=decision,
            leases=ctx.lease_records,
            metric_failures=ctx.metric_failures,
        )
        if error is not None:
            record.error_class = error_class_of(error)
            record.error_type = type(error).__name__
            record.error_message = _error_text(error)
        self._recorder.attempt(record)
        return duration

    def _stage_checkpoint(
        self, state: _Pipeline, ctx: TaskContext, value: Any, t0: float, wall0: float
    ) -> ArtifactRecord:
        """Put the task's output and its rows into the next group commit; returns the artifact.

        The caller awaits the commit, then ``_advance``s: staging is synchronous so that a
        checkpoint costs no coroutine of its own.
        """
        assert self._recorder is not None
        spec = ctx.task
        seq = state.seq
        key = state.spec.key
        codecs = self._codecs if self._codecs is not None else self.codecs  # (no property call)
        codec, type_name, data = codecs.encode(value)
        # one clock reading ends the attempt and dates its output: the wall time is the start's
        # plus the monotonic time since (one read per task fewer; the artifact, the task row and
        # the attempt row end at the same instant)
        ended = self._mono()
        now = wall0 + (ended - t0)
        last = seq + 1 == state.n
        full = self.config.journal == "full"
        art = ArtifactRecord(
            artifact_id=ctx.task_run_id,  # ``pipeline_id:seq``, the slot's id
            pipeline_id=key,
            task_name=spec.name,
            seq=seq,
            type_name=type_name,
            codec=codec,
            digest=digest_bytes(data),
            size=len(data),
            created_at=now,
            payload=data if full else None,
            is_final=last,
        )
        if full and self._putter is not None:
            art = self._put(art, spec.name)
        # the seed's bytes go out before anything is recorded: a backend failure leaves no row
        seed = self._seed_artifact(state, full, now=now) if state.write_seed else None
        if full and self._putter is not None:
            ended = self._mono()  # the attempt ends once the backend holds the bytes, as before
        # the attempt row: ``_record_attempt`` and ``Recorder.attempt`` inline (once per task;
        # two Python calls fewer). Keep in step with both.
        recorder = self._recorder
        ms = (ended - t0) * 1000.0
        duration = (ms * 1000.0 + 0.5) // 1.0 / 1000.0 if ms >= 0.0 else round3(ms)
        recorder.pending.attempts.append(
            AttemptRecord(
                run_id=self.run_id or "",
                pipeline_id=key,
                task_run_id=ctx.task_run_id,
                task_name=spec.name,
                seq=seq,
                attempt=ctx.attempt,
                started_at=wall0,
                ended_at=wall0 + duration / 1000,
                duration_ms=duration,
                outcome="succeeded",
                decision=OK_DECISION,
                leases=ctx.lease_records,
                metric_failures=ctx.metric_failures,
            )
        )
        if not (recorder._scheduled and recorder.write_behind):
            recorder._maybe_flush()  # (else a flush is on its way and takes this row too)
        # rows go straight into the batch the next group commit writes (no copy, no merge); read
        # after the flush check, which may have committed (write-behind off) and begun a new one
        batch = recorder.pending
        if seed is not None:
            batch.artifacts.append(seed)
            state.write_seed = False
        batch.artifacts.append(art)
        task_wall = state.task_started_wall or wall0
        ms = (now - task_wall) * 1000.0
        batch.tasks.append(
            TaskRecord(
                task_run_id=ctx.task_run_id,
                pipeline_id=key,
                run_id=self.run_id or "",
                name=spec.name,
                seq=seq,
                state="succeeded",
                attempts_used=ctx.attempt,
                started_at=task_wall,
                ended_at=now,
                # round3(ms) inline: once per task, no call (a wall clock may step back)
                duration_ms=(ms * 1000.0 + 0.5) // 1.0 / 1000.0 if ms >= 0.0 else round3(ms),
                output_artifact_id=art.artifact_id,
                resource=spec.resource,
            )
        )
        record = state.record
        record.cursor = seq + 1
        if last:
            record.state = "succeeded"
            record.finished_at = now
        if last or not state.row_written:
            batch.pipelines.append(msgspec.structs.replace(record))  # a snapshot, as msgspec_copy
            state.row_written = True
        else:  # the row is stored already: advance its cursor without rewriting it
            batch.progress.append(
                PipelineProgress(pipeline_id=key, cursor=record.cursor, attempts_total=record.attempts_total)
            )
        if self._trace:  # the attempt row already records this success
            self._event(
                "task.succeeded",
                "task",
                pipeline_id=key,
                task_run_id=ctx.task_run_id,
                data={
                    "task": spec.name,
                    "seq": seq,
                    "attempt": ctx.attempt,
                    "duration_ms": duration,
                    "digest": art.digest,
                },
            )
        return art

    def _succeeded(self, state: _Pipeline, art: ArtifactRecord) -> None:
        """After the last task's commit: the pipeline succeeded."""
        self._event(
            "pipeline.succeeded",
            "pipeline",
            pipeline_id=state.spec.key,
            data={"tasks": state.n, "resumed_from": state.record.resume_of},
        )
        self._finished(state, "succeeded", art)

    def _seed_artifact(
        self, state: _Pipeline, full: bool, strict: bool = True, now: float | None = None
    ) -> ArtifactRecord:
        """The seed's artifact row, dated ``now`` (the wall clock when not given)."""
        spec = state.spec
        art = ArtifactRecord(
            artifact_id=f"{spec.key}:-1",
            pipeline_id=spec.key,
            task_name="__seed__",
            seq=-1,
            type_name=spec.seed_type,
            codec=spec.seed_codec,
            digest=spec.seed_digest,
            size=len(spec.seed_bytes),
            created_at=self._wall() if now is None else now,
            payload=spec.seed_bytes if full else None,
        )
        if full and self._putter is not None:
            try:
                art = self._putter.put(art)
            except Exception as exc:
                if strict:
                    raise self._backend_error(exc, "__seed__", spec.key) from exc
                # a pipeline that fails or stops keeps its seed row without bytes: resume takes
                # the seed from the source again, and the failure being recorded must not be lost
                art = msgspec.structs.replace(art, payload=None)
        return art

    async def _fail(
        self, state: _Pipeline, ctx: TaskContext, error: BaseException, decision: dict[str, Any]
    ) -> None:
        assert self._recorder is not None
        now = self._wall()
        record = state.record
        cls = decision.get("error_class") or error_class_of(error)
        record.state = "failed"
        record.finished_at = now
        record.failed_task = ctx.task.name
        record.error_class = cls
        record.error_type = type(error).__name__
        record.error_message = _error_text(error)
        record.traceback = "".join(traceback.format_exception(error))[-8000:]
        batch = Batch()
        if state.write_seed:
            batch.artifacts.append(self._seed_artifact(state, self.config.journal == "full", strict=False))
            state.write_seed = False
        batch.tasks.append(
            self._ended_task_row(
                state,
                ctx,
                "failed",
                now,
                error_class=cls,
                error_type=type(error).__name__,
                error_message=_error_text(error),
            )
        )
        batch.pipelines.append(msgspec_copy(record))
        self._event(
            "pipeline.failed",
            "pipeline",
            pipeline_id=state.spec.key,
            data={
                "task": ctx.task.name,
                "seq": state.seq,
                "error_class": cls,
                "error": f"{type(error).__name__}: {_error_text(error)}",
            },
        )
        await self._recorder.checkpoint(batch)
        self._finished(state, "failed", None)

    def _ended_task_row(
        self, state: _Pipeline, ctx: TaskContext, task_state: str, now: float, **fields: Any
    ) -> TaskRecord:
        """The row of the current task, ended at ``now`` in ``task_state`` (failed, handed off).

        The success path builds its row inline (``_stage_checkpoint``): it runs once per task,
        and a call with keyword arguments there costs more than the rest of the row."""
        task_wall = state.task_started_wall or now
        return TaskRecord(
            task_run_id=ctx.task_run_id,
            pipeline_id=state.spec.key,
            run_id=self.run_id or "",
            name=ctx.task.name,
            seq=state.seq,
            state=task_state,
            attempts_used=ctx.attempt,
            started_at=task_wall,
            ended_at=now,
            duration_ms=round3((now - task_wall) * 1000.0),
            resource=ctx.task.resource,
            **fields,
        )

    def _interrupt(self, state: _Pipeline, why: str) -> None:
        """Leave a pipeline resumable: state interrupted, cursor kept (written with the next commit)."""
        self._terminal(state, "interrupted", phase=why)

    def _terminal(
        self, state: _Pipeline, final: str, *, error: BaseException | None = None, phase: str = ""
    ) -> None:
        if self._recorder is None:
            return
        record = state.record
        record.state = final
        record.finished_at = self._wall()
        if error is not None:
            record.error_class = error_class_of(error)
            record.error_type = type(error).__name__
            record.error_message = _error_text(error)
            record.failed_task = state.tasks[min(state.seq, state.n - 1)].name
        pending = self._recorder.pending
        if state.write_seed:
            pending.artifacts.append(self._seed_artifact(state, self.config.journal == "full", strict=False))
            state.write_seed = False
        pending.pipelines.append(msgspec_copy(record))
        data: dict[str, Any] = {"cursor": record.cursor, "reason": phase}
        if error is not None:
            data["error"] = f"{type(error).__name__}: {_error_text(error)}"
        self._event(f"pipeline.{final}", "pipeline", pipeline_id=state.spec.key, data=data)
        self._finished(state, final, None)

    def _finished(self, state: _Pipeline, final: str, artifact: ArtifactRecord | None) -> None:
        self._done += 1
        self.counters["pipelines_done"] += 1
        self.counters[f"pipelines_{final}"] = self.counters.get(f"pipelines_{final}", 0) + 1
        self._active.pop(state.spec.key, None)
        if self._capacity is not None:
            self._capacity.set()
        limit = self.config.stop_after_failures
        if final == "failed" and limit is not None and self.counters["pipelines_failed"] >= limit:
            self.stop("stop_after_failures")
        if self.on_pipeline_finished is not None:
            try:
                self.on_pipeline_finished(self, state.record, artifact)
            except Exception as exc:
                self.counters["monitor_callback_errors"] += 1
                self._event(
                    "monitor.callback_failed",
                    "run",
                    pipeline_id=state.spec.key,
                    data={"error": f"{type(exc).__name__}: {_error_text(exc)}"},
                )
        self._check_complete()


def _first_try(pool: Any, first: Callable[..., Any] | None) -> Callable[[TaskContext], Any] | None:
    """An algorithm's ``try_now`` on ``pool`` without a filter, as a call of the context alone."""
    if first is None:
        return None
    if first is try_free_slot:
        return pool.try_free
    return lambda ctx: first(pool, ctx=ctx, where=None, selector=_NO_SELECTOR)


def msgspec_copy(record: PipelineRecord) -> PipelineRecord:
    """A snapshot of the row for the batch: the live record keeps changing after this commit."""
    return msgspec.structs.replace(record)


def _pool_stats(pool: Any) -> dict[str, Any]:
    try:
        stats = pool.stats()
    except Exception:
        return {}
    if isinstance(stats, Mapping):
        return dict(stats)
    try:
        return msgspec.structs.asdict(stats)
    except TypeError:
        return dict(vars(stats))
