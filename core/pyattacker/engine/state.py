"""The state one run's parts share: the run's own (``RunState``) and one pipeline's (``PipelineState``).

The runner is a front object over parts (admission, resume, checkpoints, outcomes, the
scheduler, signals, telemetry, handoff control). They share nothing but the objects here, passed
explicitly, so each part can be read on its own: what a part may change is what it is handed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pyattacker.model import ArtifactRecord, HandoffRecord, PipelineRecord

if TYPE_CHECKING:
    from pyattacker.engine.control import Control
    from pyattacker.engine.runner import Runner
    from pyattacker.engine.settings import RunConfig
    from pyattacker.engine.tasklog import AttemptLog
    from pyattacker.engine.telemetry import Telemetry
    from pyattacker.flow.chain import PipelineSpec
    from pyattacker.flow.visits import Traversal
    from pyattacker.plugins.store_base import StoreBase
    from pyattacker.store.recorder import Recorder

__all__ = ["COUNTERS", "Group", "PipelineState", "RunState"]

log = logging.getLogger("pyattacker")

#: the counters every run reports (``RunReport.counters``), all starting at 0
COUNTERS = (
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
    "rewinds",
    "retry_alls",
)


class PipelineState:
    """Mutable state of one admitted pipeline (lives in a worker, the queue or the delay heap)."""

    __slots__ = (
        "attempt",
        "attempt_base",
        "entry",
        "jump",
        "ledger_rows",
        "metric_steps",
        "n",
        "output",
        "record",
        "reserve",
        "row_written",
        "seq",
        "spec",
        "task_started",
        "task_started_wall",
        "tasks",
        "traversal",
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
        #: attempt numbers of the current slot below this one were used by earlier runs: the
        #: retry policy counts this run's attempts from here (``engine/attempts.py``)
        self.attempt_base = 0
        #: a resumed slot whose next attempt number must be durable before it runs: 0 none, 1
        #: after a run that recorded every attempt it started, 2 after one that may not have
        self.reserve = 0
        self.task_started: float | None = None
        self.task_started_wall: float | None = None
        self.metric_steps: dict[str, int] = {}
        self.write_seed = False
        #: the last task's output, kept until the group commit carrying it is durable; then the
        #: pipeline succeeds (``Scheduler.resume_after``)
        self.output: ArtifactRecord | None = None
        #: this run already wrote the full pipeline row (later checkpoints only advance the cursor)
        self.row_written = False
        #: ``(destination seq, artifact id, artifact seq)`` of the last handoff into this
        #: traversal: the input of the task at that seq (None: every input is the previous output)
        self.entry: tuple[int, str, int] | None = None
        #: rows of this pipeline's control ledger (numbers the entry artifacts it writes)
        self.ledger_rows = 0
        #: a jump staged and not yet durable: ``(ledger row, the destination's value, entry
        #: artifact)``; the group commit carrying it moves the pipeline (``Control.landed``)
        self.jump: tuple[HandoffRecord, Any, ArtifactRecord | None] | None = None
        #: visits and budget of a pipeline with a budget or backward moves (None: neither)
        self.traversal: Traversal | None = None

    @property
    def task_name(self) -> str:
        """The name of the task the pipeline is at (the last one once it has run them all)."""
        return self.tasks[min(self.seq, self.n - 1)].name


#: a group commit's future, the pipelines waiting for it, and those of them that jumped
Group = tuple[asyncio.Future[None], list[PipelineState], list[PipelineState]]


class RunState:
    """What one run's parts share: settings, the store and recorder, counters, the admission
    tally, the stop flags and the events that wake the run's coroutines.

    One is built per run; nothing in it outlives the run except what the report copies.
    """

    def __init__(
        self,
        runner: Runner,
        config: RunConfig,
        store: StoreBase,
        mono: Callable[[], float],
        wall: Callable[[], float],
        lease_routes: dict[Any, tuple[Any, Any]],
    ) -> None:
        #: the front object, for its public API only (``pool``, ``lease_route``, ``artifact_root``)
        self.runner = runner
        self.config = config
        self.store = store
        self.clock = runner.clock
        self.pools = runner.pools
        self.bus = runner.bus
        self.mono = mono
        self.wall = wall
        #: task -> (pool, its algorithm's first try): ``ctx.acquire()``'s route, resolved once per
        #: task and kept by the runner across runs (``Runner.lease_route``)
        self.lease_routes = lease_routes
        self.run_id = ""
        self.counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self.recorder: Recorder | None = None
        self.telemetry: Telemetry | None = None
        #: the handoff path (``ctx.history()`` reads earlier visits through it)
        self.control: Control | None = None
        #: ``events: all``: one event per task, lease and skip (else only the rare ones)
        self.trace = False
        self.stopping = False
        #: stop now: running attempts are cancelled instead of awaited
        self.hard = False
        self.stop_reason: str | None = None
        self.admitted = 0
        self.done = 0
        #: admitted and not finished: key -> its spec (a second spec under the key is compared)
        self.active: dict[str, PipelineSpec] = {}
        #: the delay queue: ``(due, tie, pipeline)`` heap of pipelines waiting to retry
        self.parked: list[tuple[float, int, PipelineState]] = []
        self.started = 0.0
        #: how many pipelines the caller said the source holds (None: unknown)
        self.expected: int | None = None
        self.producer_done = False
        self.producer_error: str | None = None
        self.crash: BaseException | None = None
        self.fatal: BaseException | None = None
        #: set when the run is over (every admitted pipeline done, or a hard stop)
        self.complete: asyncio.Event | None = None
        #: set when a pipeline finishes: the producer may admit another
        self.capacity: asyncio.Event | None = None
        #: set when a pipeline is parked or the run stops: the delay pump looks again
        self.pump_wake: asyncio.Event | None = None
        self.grace_timer: asyncio.TimerHandle | None = None
        #: a sync task body holds the loop (a second Ctrl-C interrupts it)
        self.in_sync = False
        #: this run installed its SIGINT/SIGTERM handlers (``SignalGuard.real_interrupt``)
        self.owns_signals = False
        #: pipelines skipped as succeeded without an event each (one ``run.skipped`` at the end)
        self.skipped_quietly = 0
        #: the log of each pipeline's running attempt, for those that wrote a line (``tasklog``)
        self.task_logs: dict[PipelineState, AttemptLog] = {}
        #: a future done from the start: what ``async with ctx.acquire()`` awaits on its way out
        self.finished_future: asyncio.Future[None] | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Create what needs the running loop."""
        self.finished_future = loop.create_future()
        self.finished_future.set_result(None)
        self.complete = asyncio.Event()
        self.capacity = asyncio.Event()
        self.pump_wake = asyncio.Event()

    # -- stopping -------------------------------------------------------------------------------
    def stop(self, reason: str = "user") -> None:
        """Stop admitting; running attempts finish (up to ``grace_s``); the rest is resumable."""
        if not self.stopping:
            self.stopping = True
            self.stop_reason = reason
            self.wake_all()
            self._arm_grace()

    def hard_stop(self, reason: str) -> None:
        """Stop now: running attempts are cancelled."""
        self.stop(reason)
        self.hard = True
        if self.complete is not None:
            self.complete.set()

    def fail_run(self, exc: BaseException, reason: str) -> None:
        """The run cannot go on (a store failure): keep the first such error, stop now."""
        self.fatal = self.fatal or exc
        self.hard_stop(reason)

    def wake_all(self) -> None:
        for ev in (self.capacity, self.pump_wake):
            if ev is not None:
                ev.set()
        self.check_complete()

    def check_complete(self) -> None:
        if self.complete is None:
            return
        if self.producer_done and (
            self.done >= self.admitted or (self.stopping and self.done + len(self.parked) >= self.admitted)
        ):
            self.complete.set()

    def _arm_grace(self) -> None:
        """Bound the wait for running attempts by ``grace_s``: a task that never ends must not hang a stop."""
        if self.complete is None or self.complete.is_set():
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self.grace_timer = loop.call_later(self.config.grace_s, self._grace_over)

    def _grace_over(self) -> None:
        if self.complete is not None and not self.complete.is_set():
            log.warning("pyattacker: grace_s=%s elapsed, cancelling running attempts", self.config.grace_s)
            self.hard = True
            self.complete.set()
