"""The runner's handoff steps: committing a jump, and where a pipeline that jumped resumes.

Kept apart from ``runner.py`` because only pipelines that declare ``control`` ever get here:
the per-task path of a plain chain pays one type test on a task's return value, nothing more.

A handoff is one group commit, like a checkpoint: the source task's row (``handed_off``), its
attempt, the entry artifact when the task handed over a value, the ledger row, and the pipeline
row with its cursor at the destination (``succeeded`` for END). The pipeline waits for that
commit off its worker, as after a checkpoint; the commit's callback moves it (``landed``, then
``ended`` for END). The ledger row is what a resume reads (and, with ``events: all``, what the
``pipeline.handoff`` event repeats): the newest ``forward`` row of the current traversal is the
jump to honour; a ``restart`` row says the traversal began again from the seed.

A traversal writes only the slots it visits, so every start from the seed of a pipeline that
has rows resets it (``Batch.resets``) in the commit of its pipeline row at cursor 0: a slot the
new traversal skips never shows a row an earlier one wrote.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from pyattacker.clock import round3
from pyattacker.digest import digest_bytes
from pyattacker.errors import ArtifactCodecError, CorruptRow, FatalError, StoreFeatureUnsupported
from pyattacker.flow.chain import PipelineTemplate
from pyattacker.flow.handoff import UNSET, Handoff
from pyattacker.model import (
    ArtifactRecord,
    AttemptRecord,
    HandoffRecord,
    PipelineRecord,
    PipelineReset,
    TaskRecord,
)

if TYPE_CHECKING:
    from pyattacker.engine.context import TaskContext
    from pyattacker.engine.runner import Runner, _Pipeline
    from pyattacker.flow.chain import PipelineSpec

__all__ = ["Resumption", "RunnerControl", "store_lacks"]


class Resumption(msgspec.Struct, kw_only=True):
    """Where a pipeline with control flow continues: ``start`` with ``value``; ``entry`` when
    ``start`` is a handoff's destination fed by its entry artifact; ``restart`` names why the
    traversal begins again from the seed (a ledger row is written) or is None; ``reset``: it
    begins again from the seed over rows an earlier traversal wrote (they are deleted)."""

    start: int
    value: Any
    entry: tuple[int, str, int] | None = None
    restart: str | None = None
    reset: bool = False
    handoff: HandoffRecord | None = None
    ledger_rows: int = 0

    def via(self) -> dict[str, Any]:
        """What ``pipeline.resumed`` adds when the pipeline resumes at a jump's destination."""
        jump = self.handoff
        if jump is None or self.start != jump.to_seq:
            return {}
        return {
            "via": "handoff",
            "handoff": {
                "from_task": jump.from_task,
                "from_seq": jump.from_seq,
                "entry_artifact_id": jump.entry_artifact_id,
            },
        }


def store_lacks(store: Any) -> str:
    """What ``store`` lacks to run pipelines with control, as the end of a sentence ("" if
    nothing): a ledger (``handoffs()``; ``has_ledger`` may say a file has none), and the
    declaration ``applies_resets = True`` that it applies ``Batch.resets``."""
    if not callable(getattr(store, "handoffs", None)) or not getattr(store, "has_ledger", True):
        return "keeps no handoff ledger"
    if getattr(store, "applies_resets", False) is not True:
        return (
            "keeps a handoff ledger but does not declare applies_resets = True (it must delete"
            " the rows Batch.resets names, or a restart from the seed would keep counting tasks"
            " the new traversal skipped)"
        )
    return ""


def _current(ledger: list[HandoffRecord]) -> HandoffRecord | None:
    """The jump the current traversal last committed (None: none since the last restart)."""
    if ledger and ledger[-1].operation == "forward":
        return ledger[-1]
    return None


class RunnerControl:
    """The handoff path and the resume rules of pipelines that jump, for one ``Runner``."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        #: what the store lacks to run a pipeline with control ("" if nothing; asked once, by
        #: the first pipeline with control)
        self._missing: str | None = None
        #: pipeline id -> (restart reason or None, discarded cursor) of a reset that waits for
        #: the pipeline's admission (one never admitted, the run stopping, keeps its rows)
        self._resets: dict[str, tuple[str | None, int]] = {}

    def check_ledger(self, spec: PipelineSpec | PipelineTemplate) -> None:
        """A store without the ledger, or one that does not apply ``Batch.resets``, cannot run
        such a pipeline: refused before it starts (the CLI asks with the config's template
        before the run begins, the runner again per admitted pipeline for SDK callers). A store
        that ignored the resets would keep showing the rows a restart from the seed dropped."""
        r = self.runner
        template = spec if isinstance(spec, PipelineTemplate) else spec.template
        if self._missing is None:
            self._missing = store_lacks(r.store)
        if self._missing:
            raise StoreFeatureUnsupported(
                f"pipeline {template.name!r} declares control (handoffs), and store"
                f" {getattr(r.store, 'location', r.store)!r} {self._missing};"
                " use a SQLite, JSONL or memory store"
            )

    # -- resume ---------------------------------------------------------------------------------
    def resume(
        self, spec: PipelineSpec, row: PipelineRecord | None, resumable: bool, why: str
    ) -> Resumption | None:
        """Start of a pipeline with control flow (None: settled here, nothing to run).

        ``resumable``: the stored row may continue (not succeeded, not a fresh restart); ``why``
        is the reason recorded if the traversal restarts from the seed.

        The ledger is read even without a row: a row deleted by hand leaves its jumps behind, and
        without a restart row the next resume would honour one the new traversal never took."""
        r = self.runner
        ledger: list[HandoffRecord] = r.store.handoffs(spec.key)  # type: ignore[attr-defined]
        if row is None and not ledger:  # nothing to honour (a fresh pipeline, the usual case)
            # a seed row without a pipeline row or a ledger: the row was deleted by hand after a
            # traversal without a jump, whose other rows were not (see ``reset`` below)
            return Resumption(start=0, value=spec.seed, reset=self._seed_stored(spec.key))
        jump = _current(ledger)
        n = len(spec.template.tasks)
        out = Resumption(start=0, value=spec.seed)
        if resumable and row is not None:
            if jump is not None and not self.declared(spec, jump):
                r._corrupt(
                    spec,
                    row,
                    f"its ledger row handoff_id={jump.handoff_id} ({jump.from_seq} -> {jump.to_seq})"
                    " is no jump the pipeline declares; resume with --fresh-restart to run it from the seed",
                )
                return None
            if jump is not None and jump.to_seq is None:  # an END whose settle was never written
                if r._repair(spec, row, jump.entry_seq, jump):
                    return None
            else:
                if row.cursor == n:  # the last task's output is durable, the row never said so
                    if r._repair(spec, row, n - 1):
                        return None
                    row.cursor = n - 1
                if jump is not None:
                    out = self.after_jump(spec, row, jump)
                elif row.cursor > 0:
                    out.start, out.value = r._load_checkpoint(spec, row)
        if out.start == 0 and ledger and ledger[-1].operation != "restart":
            out.restart = why if not resumable else "checkpoint_unusable"
        # every start from the seed over an earlier traversal (here there is one: a row, or a
        # ledger whose row was deleted by hand), not only the first after a jump: the rows of a
        # traversal that made no jump may be skipped by the next one. So the only final
        # artifact a traversal can meet at its end is its own
        out.reset = out.start == 0
        out.handoff = jump if out.entry is not None else None
        out.ledger_rows = len(ledger)
        return out

    def _seed_stored(self, key: str) -> bool:
        """Whether the pipeline's seed row is stored: every traversal that wrote a row wrote it
        first (a reset never deletes it), so without it there is nothing to reset. (The SQLite
        store answers for a fresh pipeline without a query.) An unreadable one counts."""
        try:
            return self.runner.store.get_artifact(key, -1) is not None
        except CorruptRow:
            return True

    @staticmethod
    def declared(spec: PipelineSpec, jump: HandoffRecord) -> bool:
        """Whether a stored jump is one of the chain's declared edges (None ``to_seq``: END). The
        identity holds the edges, so only a row damaged by hand fails this; resuming at its
        ``to_seq`` (past the chain, say) would run nothing and never finish the pipeline."""
        control = spec.template.control
        n = len(spec.template.tasks)
        to = n if jump.to_seq is None else jump.to_seq
        return control is not None and to in control.edges.get(jump.from_seq, ())

    def after_jump(self, spec: PipelineSpec, row: PipelineRecord, jump: HandoffRecord) -> Resumption:
        """After a committed jump to ``jump.to_seq``: the latest usable output at or after the
        destination, else the jump's entry, else the seed (never a task the jump skipped)."""
        r = self.runner
        assert jump.to_seq is not None
        entry = (jump.to_seq, jump.entry_artifact_id, jump.entry_seq)
        problem: tuple[str, dict[str, Any]] | None = None
        for seq in range(min(row.cursor, len(spec.template.tasks)) - 1, jump.to_seq - 1, -1):
            loaded, why = r._checkpoint_at(spec, seq)
            if why is None:
                return Resumption(start=seq + 1, value=loaded, entry=entry)
            problem = problem or why
        value, why = self.entry_value(spec, jump)
        if why is None:
            if problem is not None:
                r._event(
                    problem[0],
                    "pipeline",
                    pipeline_id=spec.key,
                    data={**problem[1], "resume_from": jump.to_seq},
                )
            return Resumption(start=jump.to_seq, value=value, entry=entry)
        kind, data = problem or why
        r._event(kind, "pipeline", pipeline_id=spec.key, data={**data, "resume_from": 0})
        return Resumption(start=0, value=spec.seed)

    def entry_value(
        self, spec: PipelineSpec, jump: HandoffRecord
    ) -> tuple[Any, tuple[str, dict[str, Any]] | None]:
        """The value a jump's destination receives, read back from its entry artifact."""
        r = self.runner
        if jump.entry_seq == -1:
            return spec.seed, None
        # a handed-over value was written by the source task; a reused input by its own task
        writer = jump.entry_seq if jump.entry_seq < len(spec.template.tasks) else jump.from_seq
        value, why = r._checkpoint_at(spec, jump.entry_seq, jump.from_task, writer)
        if why is not None:
            why[1].update(handoff_id=jump.handoff_id, via="handoff")
        return value, why

    def opened(self, state: _Pipeline, plan: Resumption, discarded: int) -> None:
        """The pipeline takes the plan's entry and ledger count; its reset waits for ``admitted``."""
        state.entry, state.ledger_rows = plan.entry, plan.ledger_rows
        if plan.reset:
            self._resets[state.spec.key] = (plan.restart, discarded)

    def admitted(self, state: _Pipeline) -> None:
        """The pipeline got its place in the run: its reset (if any) goes into the next commit,
        before any of its tasks can run."""
        pending = self._resets.pop(state.spec.key, None) if self._resets else None
        if pending is not None:
            self.mark_reset(state, *pending)

    def mark_reset(self, state: _Pipeline, restart: str | None, cursor: int) -> None:
        """Start again from the seed over an earlier traversal, in one commit with the pipeline
        row at cursor 0: that traversal's task rows and chain outputs go (``PipelineReset``),
        the artifacts that stay (seed, handed-over entries) lose their final flag, and after a
        jump (``restart``: why) a ledger row says older jumps no longer drive recovery."""
        r = self.runner
        key = state.spec.key
        batch = r._recorder_pending()
        batch.resets.append(PipelineReset(pipeline_id=key, slots=state.n))
        batch.finals_cleared.append(key)
        if restart is not None:
            batch.handoffs.append(
                HandoffRecord(
                    pipeline_id=key,
                    run_id=r.run_id or "",
                    from_seq=cursor,
                    from_task="",
                    to_seq=0,
                    to_task=state.tasks[0].name,
                    entry_seq=-1,
                    entry_artifact_id=f"{key}:-1",
                    entry_reused=True,
                    reason=restart,
                    ts=r.clock.wall(),
                    operation="restart",
                )
            )
            state.ledger_rows += 1
        batch.pipelines.append(msgspec.structs.replace(state.record))
        state.row_written = True

    # -- the jump ---------------------------------------------------------------------------------
    def input_of(self, state: _Pipeline) -> tuple[int, str]:
        """``(seq, artifact id)`` of the artifact the current task received."""
        key = state.spec.key
        entry = state.entry
        if entry is not None and entry[0] == state.seq:
            return entry[2], entry[1]
        return state.seq - 1, f"{key}:{state.seq - 1}"

    def stage_handoff(
        self, state: _Pipeline, ctx: TaskContext, directive: Handoff, t0: float, wall0: float
    ) -> tuple[HandoffRecord, Any, ArtifactRecord | None]:
        """Put a jump's rows into the next group commit; returns its ledger row, the value the
        destination receives and the entry artifact (when one is written).

        Raises ``FatalError`` (no control, undeclared edge, input not stored, a value no codec
        stores) or ``ArtifactBackendUnavailable`` before anything is staged. Runs once per
        jump, so its rows are built inline as a checkpoint's are (``Runner._stage_checkpoint``):
        one clock reading ends the attempt and dates every row."""
        r = self.runner
        recorder = r._recorder
        assert recorder is not None
        task = ctx.task
        seq, n, key = state.seq, state.n, state.spec.key
        control = state.spec.template.control
        if control is None:
            raise FatalError(
                f"task {task.name!r} returned a Handoff, but pipeline {state.spec.template.name!r}"
                " declares no control (pipeline.control.edges)"
            )
        to_seq = control.destination(seq, directive)
        is_end = to_seq == n
        full = r.config.journal == "full"
        ended = r._mono()
        now = wall0 + (ended - t0)
        entry_art: ArtifactRecord | None = None
        seed_is_entry = False
        reused = directive.value is UNSET
        if reused:
            value = state.value
            entry_seq, entry_id = self.input_of(state)
            if is_end:  # the input becomes the final artifact: its row is written again, marked
                if entry_seq == -1 and state.write_seed:
                    seed_is_entry = True
                else:
                    entry_art = self.stored_input(key, task.name, entry_seq)
        else:
            value = directive.value
            entry_seq = n + state.ledger_rows
            entry_id = f"{key}:{entry_seq}"
            codecs = r._codecs if r._codecs is not None else r.codecs
            try:
                codec, type_name, data = codecs.encode(value)
            except ArtifactCodecError as exc:  # the same value again: a FatalError, never retried
                raise FatalError(
                    f"the value task {task.name!r} of pipeline {key!r} handed off cannot be stored: {exc}"
                ) from exc
            entry_art = ArtifactRecord(
                artifact_id=entry_id,
                pipeline_id=key,
                task_name=task.name,
                seq=entry_seq,
                type_name=type_name,
                codec=codec,
                digest=digest_bytes(data),
                size=len(data),
                created_at=now,
                payload=data if full else None,
                is_final=is_end,
            )
            if full and r._putter is not None:
                entry_art = r._put(entry_art, task.name)
        seed = r._seed_artifact(state, full, now=now) if state.write_seed else None
        if full and r._putter is not None:
            ended = r._mono()  # the attempt ends once the backend holds the bytes, as a checkpoint's
        # nothing below raises: the rows go out together or not at all
        batch = recorder.pending
        if is_end:  # (no earlier final to unmark: every traversal over stored rows began with a reset)
            if reused and entry_art is not None:  # (a handed-over value's row is marked already)
                entry_art = msgspec.structs.replace(entry_art, is_final=True)
            elif seed is not None and seed_is_entry:
                seed.is_final = True
                entry_art = seed
        if seed is not None:
            batch.artifacts.append(seed)
            state.write_seed = False
        if entry_art is not None and entry_art is not seed:
            batch.artifacts.append(entry_art)
        run_id = r.run_id or ""
        task_wall = state.task_started_wall or now
        ms = (now - task_wall) * 1000.0
        batch.tasks.append(
            TaskRecord(
                task_run_id=ctx.task_run_id,
                pipeline_id=key,
                run_id=run_id,
                name=task.name,
                seq=seq,
                state="handed_off",
                attempts_used=ctx.attempt,
                started_at=task_wall,
                ended_at=now,
                duration_ms=(ms * 1000.0 + 0.5) // 1.0 / 1000.0 if ms >= 0.0 else round3(ms),
                resource=task.resource,
            )
        )
        ledger = HandoffRecord(
            pipeline_id=key,
            run_id=run_id,
            from_seq=seq,
            from_task=task.name,
            to_seq=None if is_end else to_seq,
            to_task=None if is_end else state.tasks[to_seq].name,
            entry_seq=entry_seq,
            entry_artifact_id=entry_id,
            entry_reused=reused,
            reason=directive.reason,
            ts=now,
        )
        batch.handoffs.append(ledger)
        record = state.record
        record.cursor = to_seq
        if is_end:
            record.state = "succeeded"
            record.finished_at = now
        batch.pipelines.append(msgspec.structs.replace(record))
        state.row_written = True
        # last (``Recorder.attempt`` inline): with write-behind off its flush commits the whole
        # jump at once. The task and attempt rows are built here as ``_stage_checkpoint`` builds
        # its own (keep the three in step): through ``_ended_task_row`` and ``_record_attempt``
        # a jump cost 8,000 instructions more (callgrind)
        ms = (ended - t0) * 1000.0
        duration = (ms * 1000.0 + 0.5) // 1.0 / 1000.0 if ms >= 0.0 else round3(ms)
        batch.attempts.append(
            AttemptRecord(
                run_id=run_id,
                pipeline_id=key,
                task_run_id=ctx.task_run_id,
                task_name=task.name,
                seq=seq,
                attempt=ctx.attempt,
                started_at=wall0,
                ended_at=wall0 + duration / 1000,
                duration_ms=duration,
                outcome="handed_off",
                decision={},
                leases=ctx.lease_records,
                metric_failures=ctx.metric_failures,
            )
        )
        if not (recorder._scheduled and recorder.write_behind):
            recorder._maybe_flush()
        return ledger, value, entry_art

    def stored_input(self, key: str, task: str, seq: int) -> ArtifactRecord:
        r = self.runner
        try:
            art = r.store.get_artifact(key, seq)
        except CorruptRow as exc:
            raise FatalError(
                f"task {task!r} ended its pipeline with its input, which is unreadable: {exc}"
            ) from exc
        if art is None:
            raise FatalError(
                f"task {task!r} ended its pipeline with its input, whose row (seq {seq}) is not stored"
            )
        return art

    def landed(self, state: _Pipeline) -> None:
        """After the group commit that made ``state``'s jump durable: count it, and move the
        pipeline to the destination with its value; a jump to END leaves it at the chain's end
        with the entry as its output, and ``ended`` (called next) finishes it."""
        jump = state.jump
        assert jump is not None
        ledger, value, entry = jump
        r = self.runner
        r.counters["handoffs"] += 1
        state.ledger_rows += 1
        if r._trace:  # the ledger row records the jump; ``events: all`` repeats it as an event
            r._event(
                "pipeline.handoff",
                "pipeline",
                pipeline_id=ledger.pipeline_id,
                task_run_id=f"{ledger.pipeline_id}:{ledger.from_seq}",
                data={
                    "task": ledger.from_task,
                    "seq": ledger.from_seq,
                    "to_task": ledger.to_task,
                    "to_seq": ledger.to_seq,
                    "reason": ledger.reason,
                    "handoff_id": ledger.handoff_id,
                    "entry_artifact_id": ledger.entry_artifact_id,
                    "entry_reused": ledger.entry_reused,
                    "operation": ledger.operation,
                },
            )
        if ledger.to_seq is None:
            state.seq = state.n
            state.output = entry
            return
        state.jump = None
        state.seq = ledger.to_seq
        state.value = value
        state.entry = (ledger.to_seq, ledger.entry_artifact_id, ledger.entry_seq)

    def ended(self, state: _Pipeline, entry: ArtifactRecord) -> None:
        """A pipeline whose jump to END is durable: it succeeded, with the entry as its final
        artifact."""
        state.jump = None
        r = self.runner
        r._event(
            "pipeline.succeeded",
            "pipeline",
            pipeline_id=state.spec.key,
            data={"tasks": state.n, "handed_off": True, "resumed_from": state.record.resume_of},
        )
        r._finished(state, "succeeded", entry)
