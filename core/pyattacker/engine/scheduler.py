"""Workers, the delay queue and group commits: how admitted pipelines get run.

One coroutine drives one pipeline at a time on each of up to ``concurrency`` workers, pulling
from the bounded work queue. A task's output is staged into the next group commit and the
pipeline waits for that commit *off* its worker, which takes the next pipeline meanwhile; the
commit's callback puts the pipeline back at the front of the queue for its next task. A retry
backoff parks the pipeline in the delay queue and frees its worker too.
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import itertools
import logging
from typing import Any, cast

from pyattacker.engine.checkpoint import Checkpointer, error_text, format_traceback
from pyattacker.engine.context import _ENDED, TaskContext
from pyattacker.engine.control import Control
from pyattacker.engine.outcomes import Outcomes
from pyattacker.engine.signals import SignalGuard
from pyattacker.engine.state import Group, PipelineState, RunState
from pyattacker.engine.tasklog import end_attempt_log
from pyattacker.engine.telemetry import Telemetry
from pyattacker.engine.workqueue import EMPTY, WorkQueue
from pyattacker.errors import (
    ArtifactBackendUnavailable,
    ArtifactCodecError,
    FatalError,
    PipelineIdentityConflict,
    StoreFeatureUnsupported,
    StoreUnavailable,
    WorkerCrashed,
)
from pyattacker.flow.handoff import Handoff

__all__ = ["Scheduler", "Worker"]

log = logging.getLogger("pyattacker")

#: seconds between the cancels of a worker that outlives its cancel while the run stops
RECANCEL_S = 0.05

Queue = WorkQueue[PipelineState | None]


def _cancel_requested() -> bool:
    """Whether the current task was really cancelled (``task.cancel()``), as opposed to task code
    raising ``CancelledError`` itself (which is that task's failure, not a stop of its worker)."""
    task = asyncio.current_task()
    return task is None or task.cancelling() > 0


class Worker(asyncio.Task[None]):
    """A runner's worker task. The runner cancels its workers only while the run stops.

    Task code runs inside it, so ``asyncio.current_task().cancel()`` in a body would cancel the
    worker itself: the request is refused there with an error naming the task (the body's
    failure), instead of a cancel that looks like a stop of the run. The check runs only when
    something calls ``cancel()``, never on the path of a task.
    """

    __slots__ = ("held", "index", "queue")

    def __init__(self, coro: Any, *, loop: asyncio.AbstractEventLoop, index: int, queue: Queue) -> None:
        super().__init__(coro, loop=loop, name=f"pyattacker-worker-{index}")
        #: the pipeline this worker drives (None between pipelines)
        self.held: PipelineState | None = None
        self.index = index
        self.queue = queue

    def cancel(self, msg: Any = None) -> bool:
        if asyncio.current_task(self.get_loop()) is self:
            held = self.held
            name = held.task_name if held is not None else "?"
            raise RuntimeError(
                f"task {name!r} cancelled its own worker (asyncio.current_task().cancel() in task"
                " code): the worker belongs to the runner. Raise an exception to fail the task,"
                " or bound it with timeout_s / asyncio.timeout()"
            )
        return super().cancel(msg)


class Scheduler:
    """Runs admitted pipelines on workers, parks retries, and moves pipelines on after commits."""

    def __init__(
        self,
        run: RunState,
        telemetry: Telemetry,
        checkpoints: Checkpointer,
        outcomes: Outcomes,
        control: Control,
        signals: SignalGuard,
    ) -> None:
        self.run = run
        self.telemetry = telemetry
        self.checkpoints = checkpoints
        self.outcomes = outcomes
        self.control = control
        self.signals = signals
        #: workers are started as work arrives (a run of ten pipelines at concurrency 10,000
        #: starts ten, not ten thousand); ``idle`` counts those waiting on the queue
        self.workers: list[asyncio.Task[Any]] = []
        self.idle = 0
        self._tie = itertools.count()
        #: pipelines whose checkpoint a group commit has yet to make durable, per commit
        #: (``_awaiting_commit``); ``group``: the latest, which new checkpoints join
        self.awaiting: dict[int, Group] = {}
        self.group: Group | None = None

    # -- workers --------------------------------------------------------------------------------
    def staff(self, queue: Queue) -> None:
        """Start a worker for the pipeline about to be queued unless an idle one will take it.

        Items already queued are claimed by idle workers first (a woken worker counts as idle
        until it has taken its item), so a new one starts only when every idle worker is spoken
        for, up to ``concurrency``. Called once per admitted or un-parked pipeline, never per task.
        """
        workers = self.workers
        if self.idle <= queue.qsize() and len(workers) < self.run.config.concurrency:
            workers.append(self._start_worker(queue, len(workers)))

    def _start_worker(self, queue: Queue, index: int) -> Worker:
        worker = Worker(self.work(queue), loop=asyncio.get_running_loop(), index=index, queue=queue)
        worker.add_done_callback(self.supervise)
        return worker

    async def work(self, queue: Queue) -> None:
        """One worker: drive each pipeline it takes through its tasks, inline (a coroutine per
        pipeline or attempt would cost on every suspension of a task body, which passes through it)."""
        me = cast(Worker, asyncio.current_task())  # (started by ``_start_worker``)
        run, outcomes, checkpoints = self.run, self.outcomes, self.checkpoints
        mono, wall, counters = run.mono, run.wall, run.counters
        while True:
            state = queue.take()  # the next pipeline is nearly always queued already
            if state is EMPTY:
                self.idle += 1
                try:
                    state = await queue.get()
                finally:
                    self.idle -= 1
            if state is None:
                return
            me.held = state
            try:
                while state.seq < state.n:
                    if run.stopping:
                        outcomes.interrupt(state, "stopped")
                        break
                    spec = state.tasks[state.seq]
                    state.attempt += 1
                    ctx = TaskContext(
                        run, state, state.seq, state.attempt, spec, spec.name, f"{state.spec.key}:{state.seq}"
                    )
                    t0, wall0 = mono(), wall()
                    if state.task_started is None:
                        state.task_started = t0
                        state.task_started_wall = wall0
                    state.record.attempts_total += 1
                    counters["attempts"] += 1
                    error: BaseException | None = None
                    value: Any = None
                    try:
                        if spec.is_async:
                            value = spec.fn(state.value, ctx) if spec.takes_ctx else spec.fn(state.value)
                        else:
                            run.in_sync = True  # lets a second Ctrl-C interrupt a blocking sync body
                            try:
                                value = spec.fn(state.value, ctx) if spec.takes_ctx else spec.fn(state.value)
                            finally:
                                run.in_sync = False
                        if spec.is_async or asyncio.iscoroutine(value):
                            if spec.timeout_s:
                                async with asyncio.timeout(spec.timeout_s):
                                    value = await value
                            else:
                                value = await value
                    except Exception as exc:
                        error = exc
                    except BaseException as exc:  # a stop of the run, or the attempt's failure
                        error = self._base_exception(state, ctx, t0, wall0, exc)
                    if run.task_logs:  # (empty unless some attempt logged a line)
                        end_attempt_log(run, state)
                    n_leaked = 0
                    if ctx.held_leases:
                        leaked = ctx.reclaim_now()
                        if leaked:
                            n_leaked = len(leaked)
                            error = outcomes.leaked(state, ctx, leaked, error)
                    else:  # nothing to return: no call (``reclaim_now`` would end the context so)
                        ctx.held_leases = _ENDED
                    if error is None and type(value) is Handoff:
                        error = self._handoff(state, ctx, value, t0, wall0, queue)
                        if error is None:
                            break
                    elif error is None:
                        try:
                            art = checkpoints.stage(state, ctx, value, t0, wall0)
                        except ArtifactCodecError as exc:
                            error = exc
                        except ArtifactBackendUnavailable as exc:
                            outcomes.backend_failed(state, ctx, t0, wall0, exc)
                            break
                        else:  # the pipeline waits for its group commit off this worker
                            ticket = run.recorder.commit_ticket()  # type: ignore[union-attr]
                            state.seq += 1
                            state.value = value
                            state.attempt = state.attempt_base = 0
                            state.task_started = state.task_started_wall = None
                            if state.seq >= state.n:
                                state.output = art
                            group = self.group
                            if group is None or group[0] is not ticket:
                                group = self.group = self._awaiting_commit(ticket, queue)
                            group[1].append(state)
                            break
                    assert error is not None
                    delay = await outcomes.attempt_failed(state, ctx, t0, wall0, error, n_leaked)
                    if delay is None:
                        break
                    if delay > 0:
                        self.park(state, delay)
                        break
            except BaseException as exc:  # outside task code
                if self._crashed(state, exc):
                    raise
            me.held = None

    def _base_exception(
        self, state: PipelineState, ctx: TaskContext, t0: float, wall0: float, exc: BaseException
    ) -> BaseException:
        """A ``BaseException`` out of a task body: a stop of the run (the attempt is recorded as
        interrupted and ``exc`` raised on) or the attempt's failure (returned)."""
        if isinstance(exc, asyncio.CancelledError):
            if self.run.stopping:
                self.outcomes.attempt_interrupted(state, ctx, t0, wall0, "cancelled")
                raise exc
            # the runner cancels workers only to stop: the body raised it itself, or something
            # else cancelled this worker while the body ran; either is this attempt's failure,
            # and the worker goes on
            return self.outcomes.stray_cancel(ctx.task_name, exc) if _cancel_requested() else exc
        if self.signals.real_interrupt(exc):
            self.outcomes.attempt_interrupted(state, ctx, t0, wall0, "interrupted")
            raise exc
        return exc  # SystemExit, GeneratorExit, a custom BaseException: task code failing

    def _crashed(self, state: PipelineState, exc: BaseException) -> bool:
        """What went wrong outside task code while driving ``state``: recorded, and whether the
        worker ends with it (a stop, a store failure, a Ctrl-C) or goes on (a bug: the pipeline
        fails, the run goes on)."""
        outcomes = self.outcomes
        if isinstance(exc, asyncio.CancelledError):
            outcomes.interrupt(state, "cancelled")
        elif isinstance(exc, StoreUnavailable | PipelineIdentityConflict):
            pass  # supervision stops the run
        elif isinstance(exc, Exception):
            outcomes.internal_error(state, exc)
            return False
        else:  # a real Ctrl-C in a task body (resumable), or something stranger: then supervision
            interrupted = self.run.stopping or isinstance(exc, KeyboardInterrupt)
            outcomes.terminal(
                state, "interrupted" if interrupted else "failed", error=exc, phase="worker_crashed"
            )
        return True

    def _handoff(
        self,
        state: PipelineState,
        ctx: TaskContext,
        directive: Handoff,
        t0: float,
        wall0: float,
        queue: Queue,
    ) -> BaseException | None:
        """Stage the jump a task returned; the pipeline waits for its group commit, as after a
        checkpoint. Returns the attempt's error (an undeclared jump) or None: nothing left to do
        here (staged, or the backend failed and the run stops)."""
        try:
            state.jump = self.control.stage_handoff(state, ctx, directive, t0, wall0)
        except FatalError as exc:
            return exc
        except ArtifactBackendUnavailable as exc:
            self.outcomes.backend_failed(state, ctx, t0, wall0, exc)
            return None
        assert self.run.recorder is not None
        ticket = self.run.recorder.commit_ticket()
        state.attempt = state.attempt_base = 0
        state.task_started = state.task_started_wall = None
        group = self.group
        if group is None or group[0] is not ticket:
            group = self.group = self._awaiting_commit(ticket, queue)
        group[1].append(state)
        group[2].append(state)
        return None

    # -- group commits ----------------------------------------------------------------------------
    def hold(self, state: PipelineState, queue: Queue) -> None:
        """Queue ``state`` once the group commit carrying what is pending now is durable: its next
        attempt number is reserved by that commit (``engine/attempts.py``)."""
        assert self.run.recorder is not None
        ticket = self.run.recorder.commit_ticket()
        group = self.group
        if group is None or group[0] is not ticket:
            group = self.group = self._awaiting_commit(ticket, queue)
        group[1].append(state)

    def _awaiting_commit(self, ticket: asyncio.Future[None], queue: Queue) -> Group:
        """The pipelines whose checkpoint ``ticket``'s group commit carries, and those of them
        that jumped (two lists and one callback per commit, never per pipeline)."""
        group: Group = (ticket, [], [])
        key = next(self._tie)
        self.awaiting[key] = group
        ticket.add_done_callback(functools.partial(self.resume_after, queue, key))
        return group

    def resume_after(self, queue: Queue, key: int, ticket: asyncio.Future[None]) -> None:
        """A group commit ended: its pipelines go back to the front of the queue, in order, for
        their next task, and those it carried the last output of succeed (or, if it failed, the
        run stops as for any store failure)."""
        run = self.run
        if ticket.cancelled() and (run.stopping or run.hard):
            # a stop cancelled a worker that awaited this same commit (the checkpoint of a
            # failure), and the shared future with it: the commit itself goes on. Its pipelines
            # stay here and the shutdown marks them interrupted (resumable)
            return
        group = self.awaiting.pop(key, None)
        if group is None:  # the run shut down first and left them interrupted
            return
        if ticket.cancelled() or ticket.exception() is not None:
            exc = (
                StoreUnavailable("the commit of a checkpoint was cancelled")
                if ticket.cancelled()
                else ticket.exception()
            )
            assert exc is not None
            run.fail_run(exc, "store_unavailable")
            return
        states = group[1]
        for state in group[2]:  # jumps: durable now, so counted and moved (END: finished below)
            try:
                self.control.landed(state)
            except Exception as exc:  # as in a worker: recorded, never a run left waiting
                state.jump = None
                states.remove(state)  # (rare: an O(n) removal keeps the usual path free of a test)
                self.outcomes.internal_error(state, exc)
        going = [state for state in states if state.seq < state.n]
        queue.push_front(going)
        for _ in going:  # workers for them, up to ``concurrency`` (idle ones take them first)
            self.staff(queue)
        if len(going) != len(states):
            for state in states:
                if state.seq >= state.n:
                    self._ended(state)

    def _ended(self, state: PipelineState) -> None:
        """A pipeline whose last output (or jump to END) is durable: it succeeded."""
        output, state.output = state.output, None
        try:
            assert output is not None
            if state.jump is None:
                self.outcomes.succeeded(state, output)
            else:  # ended by a jump to END
                self.control.ended(state, output)
        except Exception as exc:  # as in a worker: recorded, never a run left waiting
            self.outcomes.internal_error(state, exc)

    # -- the delay queue --------------------------------------------------------------------------
    def park(self, state: PipelineState, delay: float) -> None:
        """Hold a pipeline out of the queue until its retry is due (its worker is freed)."""
        run = self.run
        assert run.pump_wake is not None
        heapq.heappush(run.parked, (run.clock.now() + delay, next(self._tie), state))
        run.counters["pipelines_deferred"] += 1
        run.pump_wake.set()

    async def pump(self, queue: Queue) -> None:
        """Move parked pipelines whose delay has passed back onto the work queue."""
        run = self.run
        assert run.pump_wake is not None
        wake = run.pump_wake
        parked = run.parked
        loop = asyncio.get_running_loop()
        while not run.stopping:
            now = run.clock.now()
            while parked and parked[0][0] <= now and not run.stopping:
                item = heapq.heappop(parked)
                self.staff(queue)
                try:
                    await queue.put(item[2])
                except asyncio.CancelledError:
                    heapq.heappush(parked, item)  # still parked: shutdown marks it interrupted
                    raise
            wake.clear()
            timer = loop.call_later(max(0.0, parked[0][0] - run.clock.now()), wake.set) if parked else None
            try:
                await wake.wait()
            finally:
                if timer is not None:
                    timer.cancel()
        run.check_complete()

    # -- supervision ------------------------------------------------------------------------------
    def supervise(self, task: asyncio.Task[Any]) -> None:
        """A worker, the producer or the pump ended: what that means for the run."""
        run = self.run
        if task.cancelled():
            if run.stopping:
                return
            if isinstance(task, Worker):
                self._replace_worker(task)
            elif run.complete is not None and not run.complete.is_set():
                # the producer or the pump, cancelled by task code: the pipelines not admitted
                # yet (producer) or waiting to retry (pump) would be dropped in silence or wait
                # forever. Stop the run as cancelled: everything unfinished is resumable
                log.warning("pyattacker: %s was cancelled from outside the runner; stopping", task.get_name())
                run.stop("cancelled")
            return
        exc = task.exception()
        if exc is None:
            return
        if isinstance(exc, StoreUnavailable):
            run.fail_run(exc, "store_unavailable")
        elif isinstance(exc, PipelineIdentityConflict | StoreFeatureUnsupported):
            run.fatal = run.fatal or exc
            run.stop(
                "identity_conflict"
                if isinstance(exc, PipelineIdentityConflict)
                else "store_feature_unsupported"
            )
        elif task.get_name() == "pyattacker-producer":
            run.producer_error = f"{type(exc).__name__}: {error_text(exc)}"
            run.producer_done = True
            run.stop("producer_error")
        else:
            state = getattr(task, "held", None)
            held = state.spec.key if state is not None else None
            run.crash = WorkerCrashed(held, exc)
            run.crash.__cause__ = exc
            self.telemetry.event(
                "runner.worker_crashed",
                "run",
                pipeline_id=held,
                data={
                    "error": f"{type(exc).__name__}: {error_text(exc)}",
                    "traceback": format_traceback(exc),
                    "during_shutdown": run.stopping,
                },
            )
            run.hard_stop("worker_crashed")

    def _replace_worker(self, worker: Worker) -> None:
        """A worker was cancelled while the run was not stopping: not by the runner, which cancels
        workers only to stop. Its pipeline was left interrupted (resumable); another worker takes
        its place, so the run cannot hang for want of workers. A worker between two pipelines
        (its last one handed to a group commit) held none, and nothing is lost."""
        state = worker.held
        log.warning("pyattacker: %s was cancelled from outside the runner; replaced", worker.get_name())
        self.telemetry.event(
            "runner.worker_cancelled",
            "run",
            pipeline_id=state.spec.key if state is not None else None,
            data={
                "worker": worker.get_name(),
                "task": state.task_name if state is not None else None,
                "hint": "only the runner cancels its workers (to stop the run); "
                + ("the pipeline is resumable" if state is not None else "it held no pipeline: nothing lost"),
            },
        )
        run = self.run
        workers = self.workers
        if run.complete is None or run.complete.is_set() or worker not in workers:
            return
        workers[worker.index] = self._start_worker(worker.queue, worker.index)

    # -- the end ------------------------------------------------------------------------------------
    async def shutdown(self, queue: Queue, *tasks: asyncio.Task[Any]) -> None:
        """End the workers (awaited up to ``grace_s``, then cancelled until they end) and the
        run's other tasks; every pipeline still queued, waiting for a commit or parked is left
        interrupted (resumable)."""
        run = self.run
        workers = self.workers
        if not run.hard:
            for _ in workers:
                await queue.put(None)
            pending: set[asyncio.Task[Any]] = set()
            if workers:
                _, pending = await asyncio.wait(workers, timeout=run.config.grace_s if run.stopping else None)
        else:
            pending = {w for w in workers if not w.done()}
        while pending:
            # again until each ends: a body that caught the CancelledError and went on (a retry
            # loop catching everything) must not hold the stop (and every later Ctrl-C) forever
            for w in pending:
                w.cancel()
            _, pending = await asyncio.wait(pending, timeout=RECANCEL_S)
        await asyncio.gather(*workers, *tasks, return_exceptions=True)
        # their rows follow the checkpoints they wait for, in the same order
        interrupt = self.outcomes.interrupt
        while not queue.empty():
            state = queue.get_nowait()
            if state is not None:
                interrupt(state, "queued")
        for _ticket, states, _jumps in self.awaiting.values():
            for state in states:
                interrupt(state, "queued")
        self.awaiting.clear()
        for _, _, state in run.parked:
            self.telemetry.event(
                "pipeline.deferred_interrupted",
                "pipeline",
                pipeline_id=state.spec.key,
                data={"task": state.tasks[state.seq].name, "seq": state.seq, "attempts": state.attempt},
            )
            interrupt(state, "parked")
        run.parked.clear()
