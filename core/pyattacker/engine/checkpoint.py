"""The rows that end a task: its output artifact, the seed's, the attempt, the task and the pipeline.

A checkpoint (a task's output) and a handoff (a jump) end a task the same way: the output bytes
go through the artifact backend first (a backend failure leaves no row), then every row goes
into the recorder's pending batch, which the next group commit writes. The pipeline waits for
that commit before its next task (``Scheduler``), so a task's output is durable first.

Staging is synchronous and costs no coroutine: it runs once per task on the hot path.
"""

from __future__ import annotations

import traceback
from typing import Any

import msgspec

from pyattacker.clock import round3
from pyattacker.digest import digest_bytes
from pyattacker.engine.context import TaskContext
from pyattacker.engine.state import PipelineState, RunState
from pyattacker.errors import ArtifactBackendUnavailable, ArtifactCodecError, error_class_of, safe_str
from pyattacker.flow.visits import visit_id
from pyattacker.model import (
    OK_DECISION,
    ArtifactRecord,
    AttemptRecord,
    PipelineProgress,
    PipelineRecord,
    TaskRecord,
)
from pyattacker.store.codecs import CodecRegistry

__all__ = ["Checkpointer", "error_text", "format_traceback", "snapshot"]

#: the longest error message stored (task code owns ``__str__``)
MAX_ERROR = 2000


def error_text(exc: BaseException) -> str:
    """The message stored for ``exc``, cut to ``MAX_ERROR``. Task code owns ``__str__``: one that
    raises or returns a non-str must not cost the attempt row, the retry or the run."""
    text = safe_str(exc)
    return text if len(text) <= MAX_ERROR else text[: MAX_ERROR - 1] + "…"


def format_traceback(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))


def snapshot(record: PipelineRecord) -> PipelineRecord:
    """A copy of the row for the batch: the live record keeps changing after this commit."""
    return msgspec.structs.replace(record)


class Checkpointer:
    """Builds and stages the rows that end a task's attempt, for one run."""

    def __init__(self, run: RunState, codecs: CodecRegistry, backend: Any) -> None:
        self.run = run
        self.codecs = codecs
        #: where artifact bytes go (None: they stay in the row, or ``journal: summary``)
        self.backend = backend
        #: the backend whose ``put`` a written artifact goes through: None when there is none, or
        #: when it declares ``put`` an identity (``identity_put``, the ``inline`` backend)
        self.putter = None if getattr(backend, "identity_put", False) is True else backend
        self.full = run.config.journal == "full"

    # -- a task's success -------------------------------------------------------------------------
    def stage(
        self, state: PipelineState, ctx: TaskContext, value: Any, t0: float, wall0: float
    ) -> ArtifactRecord:
        """Put the task's output and its rows into the next group commit; returns the artifact.

        The caller awaits the commit before the pipeline's next task (or its success)."""
        spec = ctx.task
        seq = state.seq
        key = state.spec.key
        try:
            codec, type_name, data = self.codecs.encode(value)
        except ArtifactCodecError as exc:  # named here: the codec's message knows neither
            raise ArtifactCodecError(
                f"the output of task {spec.name!r} of pipeline {key!r} cannot be stored: {exc}"
            ) from exc
        # one clock reading ends the attempt and dates its rows: the wall time is the start's
        # plus the monotonic time since
        run = self.run
        ended = run.mono()
        now = wall0 + (ended - t0)
        last = seq + 1 == state.n
        art = self.artifact(ctx.task_run_id, key, spec.name, seq, codec, type_name, data, now, last)
        seed = self.seed_artifact(state, now) if state.write_seed else None
        if self.putter is not None:
            ended = run.mono()  # the attempt ends once the backend holds the bytes
        record = state.record
        record.cursor = seq + 1
        if last:
            record.state = "succeeded"
            record.finished_at = now
        attempt = self.close(state, ctx, t0, wall0, ended, now, "succeeded", OK_DECISION, seed, art, last)
        traversal = state.traversal
        if traversal is not None and traversal.track_visits:  # kept for a move back (history)
            traversal.outputs[seq] = art
        if run.trace:  # the attempt row already records this success
            run.telemetry.event(  # type: ignore[union-attr]
                "task.succeeded",
                "task",
                pipeline_id=key,
                task_run_id=ctx.task_run_id,
                data={
                    "task": spec.name,
                    "seq": seq,
                    "attempt": ctx.attempt,
                    "duration_ms": attempt.duration_ms,
                    "digest": art.digest,
                },
            )
        return art

    def artifact(
        self,
        artifact_id: str,
        key: str,
        task: str,
        seq: int,
        codec: str,
        type_name: str,
        data: bytes,
        now: float,
        is_final: bool,
    ) -> ArtifactRecord:
        """An encoded value's artifact row, its bytes through the backend (``journal: full``)."""
        art = ArtifactRecord(
            artifact_id=artifact_id,
            pipeline_id=key,
            task_name=task,
            seq=seq,
            type_name=type_name,
            codec=codec,
            digest=digest_bytes(data),
            size=len(data),
            created_at=now,
            payload=data if self.full else None,
            is_final=is_final,
        )
        if self.putter is not None:
            art = self.put(art, task)
        return art

    def close(
        self,
        state: PipelineState,
        ctx: TaskContext,
        t0: float,
        wall0: float,
        ended: float,
        now: float,
        outcome: str,
        decision: dict[str, Any],
        seed: ArtifactRecord | None,
        output: ArtifactRecord | None,
        full_row: bool,
    ) -> AttemptRecord:
        """Stage the rows that end the task in ``outcome`` (``succeeded``, ``handed_off``): the owed
        seed, the task's ``output``, the task row, the pipeline row (``full_row``, else only its
        cursor) and last the attempt row, whose flush check (``write_behind: false``: a commit
        now) then carries them all at once. Returns the attempt row."""
        recorder = self.run.recorder
        assert recorder is not None
        batch = recorder.pending
        if seed is not None:
            batch.artifacts.append(seed)
            state.write_seed = False
        if output is not None:
            batch.artifacts.append(output)
        key = state.spec.key
        task = ctx.task
        task_wall = state.task_started_wall or wall0
        ms = (now - task_wall) * 1000.0
        batch.tasks.append(
            TaskRecord(
                task_run_id=ctx.task_run_id,
                pipeline_id=key,
                run_id=self.run.run_id,
                name=task.name,
                seq=state.seq,
                state=outcome,
                attempts_used=ctx.attempt,
                started_at=task_wall,
                ended_at=now,
                # round3(ms) inline: once per task, no call (a wall clock may step back)
                duration_ms=(ms * 1000.0 + 0.5) // 1.0 / 1000.0 if ms >= 0.0 else round3(ms),
                output_artifact_id=None if output is None else output.artifact_id,
                resource=task.resource,
            )
        )
        record = state.record
        if full_row or not state.row_written:
            batch.pipelines.append(snapshot(record))
            state.row_written = True
        else:  # the row is stored already: advance its cursor without rewriting it
            batch.progress.append(
                PipelineProgress(pipeline_id=key, cursor=record.cursor, attempts_total=record.attempts_total)
            )
        attempt = self.attempt_row(state, ctx, t0, wall0, ended, outcome, decision)
        batch.attempts.append(attempt)
        if not (recorder._scheduled and recorder.write_behind):
            recorder._maybe_flush()  # (else a flush is on its way and takes these rows too)
        return attempt

    # -- the attempt row ------------------------------------------------------------------------
    def attempt_row(
        self,
        state: PipelineState,
        ctx: TaskContext,
        t0: float,
        wall0: float,
        ended: float,
        outcome: str,
        decision: dict[str, Any],
    ) -> AttemptRecord:
        """The row of the attempt that ran from ``t0`` (monotonic; ``wall0`` on the wall clock)
        to ``ended``. At most 15 keyword arguments: CPython compiles a call with more into
        building a dict and unpacking it (the error fields default to None)."""
        ms = (ended - t0) * 1000.0
        # round3(ms) inline: no call (and no ``int()`` for a duration that is not negative)
        duration = (ms * 1000.0 + 0.5) // 1.0 / 1000.0 if ms >= 0.0 else round3(ms)
        return AttemptRecord(
            run_id=self.run.run_id,
            pipeline_id=state.spec.key,
            # a revisit's attempts are told apart by the visit (the task row is the slot's)
            task_run_id=ctx.task_run_id if state.traversal is None else visit_id(ctx.task_run_id, ctx.visit),
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

    def record_attempt(
        self,
        state: PipelineState,
        ctx: TaskContext,
        t0: float,
        wall0: float,
        outcome: str,
        error: BaseException | None,
        decision: dict[str, Any],
    ) -> None:
        """Record an attempt that did not end its task (failed, timed out, cancelled): history,
        written behind."""
        recorder = self.run.recorder
        assert recorder is not None
        record = self.attempt_row(state, ctx, t0, wall0, self.run.mono(), outcome, decision)
        if error is not None:
            record.error_class = error_class_of(error)
            record.error_type = type(error).__name__
            record.error_message = error_text(error)
        recorder.attempt(record)

    # -- rows of a task that did not succeed ----------------------------------------------------
    def ended_task_row(
        self, state: PipelineState, ctx: TaskContext, task_state: str, now: float, **fields: Any
    ) -> TaskRecord:
        """The row of the current task, ended at ``now`` in ``task_state`` (a failure)."""
        task_wall = state.task_started_wall or now
        return TaskRecord(
            task_run_id=ctx.task_run_id,
            pipeline_id=state.spec.key,
            run_id=self.run.run_id,
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

    # -- the seed and the backend -----------------------------------------------------------------
    def seed_artifact(
        self, state: PipelineState, now: float | None = None, strict: bool = True
    ) -> ArtifactRecord:
        """The seed's artifact row, dated ``now`` (the wall clock when not given). ``strict``:
        a backend failure raises (else the row keeps no bytes: a pipeline that fails or stops
        keeps its seed row, and resume takes the seed from the source again)."""
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
            created_at=self.run.wall() if now is None else now,
            payload=spec.seed_bytes if self.full else None,
        )
        if self.putter is not None:
            try:
                art = self.putter.put(art)
            except Exception as exc:
                if strict:
                    raise self.backend_error(exc, "__seed__", spec.key) from exc
                art = msgspec.structs.replace(art, payload=None)
        return art

    def owed_seed(self, state: PipelineState) -> ArtifactRecord | None:
        """The seed row a pipeline that stops or fails still owes (its bytes if the backend takes them)."""
        if not state.write_seed:
            return None
        state.write_seed = False
        return self.seed_artifact(state, strict=False)

    def put(self, art: ArtifactRecord, task: str) -> ArtifactRecord:
        """``art`` through the artifact backend. A failure there is the backend's, not the
        task's: ``ArtifactBackendUnavailable``, naming both."""
        assert self.putter is not None
        try:
            stored: ArtifactRecord = self.putter.put(art)
        except Exception as exc:
            raise self.backend_error(exc, task, art.pipeline_id) from exc
        return stored

    def backend_error(self, exc: Exception, task: str, key: str) -> ArtifactBackendUnavailable:
        """What ``backend.put`` raised, as the backend's failure named for the user."""
        name = getattr(self.backend, "name", type(self.backend).__name__)
        return ArtifactBackendUnavailable(
            f"artifact backend {name!r} could not store the output of task {task!r} of"
            f" pipeline {key!r}: {type(exc).__name__}: {error_text(exc)}"
        )
