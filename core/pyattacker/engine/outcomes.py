"""How attempts and pipelines end, other than by a checkpoint: retry decisions, failures,
interruptions, leaked leases, and the bookkeeping of a finished pipeline.

Every retry decision is recorded with its attempt (invariant 4); a pipeline that stops for any
reason but its own failure is left ``interrupted`` with its cursor, so a resume continues it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from pyattacker.engine.checkpoint import Checkpointer, error_text, format_traceback, snapshot
from pyattacker.engine.context import TaskContext
from pyattacker.engine.state import PipelineState, RunState
from pyattacker.engine.telemetry import Telemetry
from pyattacker.errors import ArtifactBackendUnavailable, LeaseLeakError, error_class_of
from pyattacker.model import ArtifactRecord, Batch, PipelineRecord

__all__ = ["Outcomes", "forget_cancel"]

log = logging.getLogger("pyattacker")

#: what ``on_pipeline_finished`` is called with: the runner, the pipeline's row, its final artifact
FinishedCallback = Callable[[Any, PipelineRecord, ArtifactRecord | None], Any]


def forget_cancel() -> None:
    """Withdraw every cancel request of the current task: it goes on (``asyncio.timeout`` and
    ``Scheduler``'s check of a real cancel read the count, so a request left behind breaks both)."""
    task = asyncio.current_task()
    if task is not None:
        while task.uncancel() > 0:
            pass


class Outcomes:
    """Settles attempts that failed or were cut short, and pipelines that end, for one run."""

    def __init__(
        self,
        run: RunState,
        telemetry: Telemetry,
        checkpoints: Checkpointer,
        on_finished: FinishedCallback | None,
    ) -> None:
        self.run = run
        self.event = telemetry.event
        self.checkpoints = checkpoints
        self.on_finished = on_finished

    # -- attempts -------------------------------------------------------------------------------
    async def attempt_failed(
        self,
        state: PipelineState,
        ctx: TaskContext,
        t0: float,
        wall0: float,
        error: BaseException,
        leaked: int,
    ) -> float | None:
        """An attempt that ended in ``error``: decide, record, then retry or fail. Returns the
        delay before the task runs again (0.0: now), or None: the pipeline is finished."""
        run = self.run
        spec = ctx.task
        attempt = ctx.attempt
        elapsed = run.clock.now() - (state.task_started or t0)
        # the policy counts this run's attempts: a resumed slot goes on numbering after the ones
        # earlier runs used (``engine/attempts.py``) and gets its retries afresh, as before
        decision = spec.retry.decide(error, attempt - state.attempt_base, ctx.rng, elapsed)
        decision["leaked_leases"] = leaked
        outcome = "timeout" if isinstance(error, TimeoutError) else "failed"
        self.checkpoints.record_attempt(state, ctx, t0, wall0, outcome, error, decision)
        self.task_failed(state, ctx, error, error_class=decision["error_class"], decision=decision)
        if decision["retry"] and not run.stopping:
            run.counters["retries"] += 1
            delay: float = decision["delay_s"]
            key = state.spec.key
            self.event(
                "task.retry_scheduled",
                "task",
                pipeline_id=key,
                task_run_id=ctx.task_run_id,
                data={"task": spec.name, "attempt": attempt, "delay_s": delay},
            )
            if delay > 0:
                self.event(
                    "pipeline.deferred",
                    "pipeline",
                    pipeline_id=key,
                    data={"task": spec.name, "seq": state.seq, "attempt": attempt, "delay_s": delay},
                )
            # the retry's number is reserved by this attempt's row: it runs once that row is
            # durable, with the pipeline row (a resume then knows it may have been running)
            recorder = run.recorder
            assert recorder is not None
            recorder.pending.pipelines.append(snapshot(state.record))
            state.row_written = True
            await recorder.commit_ticket()
            return delay
        if decision["retry"]:  # the run stops: the retry is the next resume's
            self.interrupt(state, "stopped")
            return None
        await self.fail(state, ctx, error, decision)
        return None

    def task_failed(self, state: PipelineState, ctx: TaskContext, error: BaseException, **data: Any) -> None:
        """The ``task.failed`` event of an attempt that ended in ``error`` (``data`` adds why)."""
        self.event(
            "task.failed",
            "task",
            pipeline_id=state.spec.key,
            task_run_id=ctx.task_run_id,
            data={
                "task": ctx.task.name,
                "seq": state.seq,
                "attempt": ctx.attempt,
                "error": f"{type(error).__name__}: {error_text(error)}",
                **data,
            },
        )

    def backend_failed(
        self, state: PipelineState, ctx: TaskContext, t0: float, wall0: float, exc: ArtifactBackendUnavailable
    ) -> None:
        """The task's output could not be stored. Not the task's failure, and not one that a
        retry or the next pipeline would get past (a full disk, a folder made unwritable): the
        attempt is recorded, the pipeline left resumable with its cursor (resume runs this task
        again) and the run stops; the CLI exits 2 with the error."""
        reason = "artifact_backend_unavailable"
        self.checkpoints.record_attempt(
            state, ctx, t0, wall0, "failed", exc, {"retry": False, "reason": reason, "delay_s": 0.0}
        )
        self.task_failed(state, ctx, exc, reason=reason)
        self.run.fatal = self.run.fatal or exc
        self.run.stop(reason)
        self.terminal(state, "interrupted", error=exc, phase=reason)

    def attempt_interrupted(
        self, state: PipelineState, ctx: TaskContext, t0: float, wall0: float, reason: str
    ) -> None:
        """A cancel or a real Ctrl-C ends the attempt: return its leases, record it, let it go on."""
        ctx.reclaim_now()
        self.checkpoints.record_attempt(
            state, ctx, t0, wall0, "cancelled", None, {"retry": False, "reason": reason, "delay_s": 0.0}
        )

    @staticmethod
    def stray_cancel(task_name: str, exc: asyncio.CancelledError) -> RuntimeError:
        """The failure recorded for a cancel of a worker that the runner did not ask for."""
        forget_cancel()
        error = RuntimeError(
            f"task {task_name!r}: its worker was cancelled while the task ran, and not by the runner"
            " (the run was not stopping); only the runner may cancel its workers"
        )
        error.__cause__ = exc
        return error

    def leaked(
        self, state: PipelineState, ctx: TaskContext, leaked: list[Any], error: BaseException | None
    ) -> BaseException | None:
        """Leases the task body still held at its end (returned already): one event each; with
        ``strict_leases`` a success becomes a ``LeaseLeakError``. Returns the attempt's error."""
        spec = ctx.task
        self.run.counters["leases_leaked"] += len(leaked)
        for lease in leaked:
            self.event(
                "lease.leaked",
                "task",
                pipeline_id=state.spec.key,
                task_run_id=ctx.task_run_id,
                pool=lease.pool,
                resource_id=lease.resource.id,
                data={
                    "task": spec.name,
                    "seq": state.seq,
                    "attempt": ctx.attempt,
                    "held_ms": lease.held_ms,
                    "hint": "use `async with ctx.acquire()` or release the lease before returning",
                },
            )
        if error is None and self.run.config.strict_leases:
            error = LeaseLeakError(f"task {spec.name!r} ended holding {len(leaked)} lease(s) (strict_leases)")
        return error

    # -- pipelines ------------------------------------------------------------------------------
    async def fail(
        self, state: PipelineState, ctx: TaskContext, error: BaseException, decision: dict[str, Any]
    ) -> None:
        """The task failed for good: the pipeline fails, its rows written through."""
        run = self.run
        assert run.recorder is not None
        now = run.wall()
        record = state.record
        cls = decision.get("error_class") or error_class_of(error)
        message = error_text(error)
        record.state = "failed"
        record.finished_at = now
        record.failed_task = ctx.task.name
        record.error_class = cls
        record.error_type = type(error).__name__
        record.error_message = message
        record.traceback = format_traceback(error)[-8000:]
        batch = Batch()
        seed = self.checkpoints.owed_seed(state)
        if seed is not None:
            batch.artifacts.append(seed)
        batch.tasks.append(
            self.checkpoints.ended_task_row(
                state,
                ctx,
                "failed",
                now,
                error_class=cls,
                error_type=type(error).__name__,
                error_message=message,
            )
        )
        batch.pipelines.append(snapshot(record))
        self.event(
            "pipeline.failed",
            "pipeline",
            pipeline_id=state.spec.key,
            data={
                "task": ctx.task.name,
                "seq": state.seq,
                "error_class": cls,
                "error": f"{type(error).__name__}: {message}",
            },
        )
        await run.recorder.checkpoint(batch)
        self.finished(state, "failed", None)

    def succeeded(self, state: PipelineState, art: ArtifactRecord, **data: Any) -> None:
        """After the commit of the pipeline's last output: it succeeded (``data`` adds how)."""
        self.event(
            "pipeline.succeeded",
            "pipeline",
            pipeline_id=state.spec.key,
            data={"tasks": state.n, **data, "resumed_from": state.record.resume_of},
        )
        self.finished(state, "succeeded", art)

    def internal_error(self, state: PipelineState, exc: Exception) -> None:
        """A bug outside task code (or in a plugin) while driving the pipeline: recorded in full,
        the pipeline fails, the run goes on."""
        self.event(
            "runner.internal_error",
            "run",
            pipeline_id=state.spec.key,
            data={"error": f"{type(exc).__name__}: {error_text(exc)}", "traceback": format_traceback(exc)},
        )
        self.terminal(state, "failed", error=exc, phase="internal")

    def interrupt(self, state: PipelineState, why: str) -> None:
        """Leave a pipeline resumable: state interrupted, cursor kept (written with the next commit)."""
        self.terminal(state, "interrupted", phase=why)

    def terminal(
        self, state: PipelineState, final: str, *, error: BaseException | None = None, phase: str = ""
    ) -> None:
        """End the pipeline in ``final`` outside a checkpoint; its row goes with the next commit."""
        recorder = self.run.recorder
        if recorder is None:
            return
        record = state.record
        record.state = final
        record.finished_at = self.run.wall()
        if error is not None:
            record.error_class = error_class_of(error)
            record.error_type = type(error).__name__
            record.error_message = error_text(error)
            record.failed_task = state.task_name
        pending = recorder.pending
        seed = self.checkpoints.owed_seed(state)
        if seed is not None:
            pending.artifacts.append(seed)
        pending.pipelines.append(snapshot(record))
        data: dict[str, Any] = {"cursor": record.cursor, "reason": phase}
        if error is not None:
            data["error"] = f"{type(error).__name__}: {error_text(error)}"
        self.event(f"pipeline.{final}", "pipeline", pipeline_id=state.spec.key, data=data)
        self.finished(state, final, None)

    def finished(self, state: PipelineState, final: str, artifact: ArtifactRecord | None) -> None:
        """Count a finished pipeline, make room for the next one and tell the monitor callback."""
        run = self.run
        run.done += 1
        counters = run.counters
        counters["pipelines_done"] += 1
        counters[f"pipelines_{final}"] = counters.get(f"pipelines_{final}", 0) + 1
        run.active.pop(state.spec.key, None)
        if run.capacity is not None:
            run.capacity.set()
        limit = run.config.stop_after_failures
        if final == "failed" and limit is not None and counters["pipelines_failed"] >= limit:
            run.stop("stop_after_failures")
        if self.on_finished is not None:
            try:
                self.on_finished(run.runner, state.record, artifact)
            except Exception as exc:
                counters["monitor_callback_errors"] += 1
                self.event(
                    "monitor.callback_failed",
                    "run",
                    pipeline_id=state.spec.key,
                    data={"error": f"{type(exc).__name__}: {error_text(exc)}"},
                )
        run.check_complete()
