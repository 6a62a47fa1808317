"""Handoffs: committing a jump, and where a pipeline that jumped resumes.

Kept apart from the checkpoint path because only pipelines that declare ``control`` ever get
here: the per-task path of a plain chain pays one type test on a task's return value, nothing more.

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

from pyattacker.engine.backward import Backward
from pyattacker.engine.checkpoint import Checkpointer
from pyattacker.engine.outcomes import Outcomes
from pyattacker.engine.resume import Problem, Resumer
from pyattacker.engine.state import PipelineState, RunState
from pyattacker.engine.telemetry import Telemetry
from pyattacker.errors import ArtifactCodecError, CorruptRow, FatalError, StoreFeatureUnsupported
from pyattacker.flow.handoff import UNSET, Handoff
from pyattacker.flow.visits import BACKWARD_OPS, Traversal
from pyattacker.model import ArtifactRecord, HandoffRecord, PipelineRecord, PipelineReset

if TYPE_CHECKING:
    from pyattacker.engine.context import TaskContext
    from pyattacker.flow.chain import PipelineSpec, PipelineTemplate
    from pyattacker.plugins.store_base import StoreBase

__all__ = ["Control", "Resumption", "require_ledger", "store_lacks"]


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
    #: visits and budget (None: the pipeline declares neither a budget nor a backward move)
    traversal: Any = None

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


def store_lacks(store: StoreBase) -> str:
    """What ``store`` lacks to run pipelines with control, as the end of a sentence ("" if
    nothing): the capability ``supports_handoffs`` (a ledger, and ``commit`` applying
    ``Batch.resets``), and a ledger in this file (``has_ledger``)."""
    if not store.supports_handoffs:
        return (
            "keeps no handoff ledger: it does not declare supports_handoffs = True (a ledger, and"
            " commits that delete the rows Batch.resets names)"
        )
    if not store.has_ledger:
        return "keeps no handoff ledger (a file written before ledgers: start a new store)"
    return ""


def require_ledger(store: StoreBase, template: PipelineTemplate, missing: str | None = None) -> str:
    """Refuse a pipeline with control on a store without the ledger, or one that does not apply
    ``Batch.resets`` (``StoreFeatureUnsupported``): it would keep showing the rows a restart
    from the seed dropped. Returns what the store lacks ("": nothing), to be passed back as
    ``missing`` so the store is asked once."""
    if missing is None:
        missing = store_lacks(store)
    if missing:
        raise StoreFeatureUnsupported(
            f"pipeline {template.name!r} declares control (handoffs), and store"
            f" {store.location!r} {missing}; use a SQLite, JSONL or memory store"
        )
    return missing


def _current(ledger: list[HandoffRecord]) -> HandoffRecord | None:
    """The jump the current traversal last committed (None: none since the last restart)."""
    if ledger and ledger[-1].operation != "restart":
        return ledger[-1]
    return None


class Control:
    """The handoff path and the resume rules of pipelines that jump, for one run."""

    def __init__(
        self,
        run: RunState,
        telemetry: Telemetry,
        resumer: Resumer,
        checkpoints: Checkpointer,
        outcomes: Outcomes,
    ) -> None:
        self.run = run
        self.store = run.store
        self.event = telemetry.event
        self.resumer = resumer
        self.checkpoints = checkpoints
        self.outcomes = outcomes
        self.backward = Backward(run, resumer, checkpoints)
        #: what the store lacks to run a pipeline with control ("" if nothing; asked once, by
        #: the first pipeline with control)
        self._missing: str | None = None
        #: pipeline id -> (restart reason or None, discarded cursor) of a reset that waits for
        #: the pipeline's admission (one never admitted, the run stopping, keeps its rows)
        self._resets: dict[str, tuple[str | None, int]] = {}

    def check_ledger(self, spec: PipelineSpec) -> None:
        """Refuse, per admitted pipeline, what ``require_ledger`` refuses (SDK callers are not
        asked before the run, as the CLI is)."""
        self._missing = require_ledger(self.store, spec.template, self._missing)

    # -- resume ---------------------------------------------------------------------------------
    def resume(
        self, spec: PipelineSpec, row: PipelineRecord | None, resumable: bool, why: str
    ) -> Resumption | None:
        """``plan`` (below) with the pipeline's visits and budget replayed from its ledger."""
        ledger: list[HandoffRecord] = self.store.handoffs(spec.key)
        out = self.plan(spec, row, resumable, why, ledger)
        control = spec.template.control
        if out is not None and control is not None and control.max_handoffs is not None:
            limit = min(control.max_handoffs, self.run.config.max_handoffs)
            out.traversal = Traversal.replay(ledger, len(spec.template.tasks), limit, control.backward)
        return out

    def plan(
        self,
        spec: PipelineSpec,
        row: PipelineRecord | None,
        resumable: bool,
        why: str,
        ledger: list[HandoffRecord],
    ) -> Resumption | None:
        """Start of a pipeline with control flow (None: settled here, nothing to run).

        ``resumable``: the stored row may continue (not succeeded, not a fresh restart); ``why``
        is the reason recorded if the traversal restarts from the seed.

        The ledger is read even without a row: a row deleted by hand leaves its jumps behind, and
        without a restart row the next resume would honour one the new traversal never took."""
        resumer = self.resumer
        if row is None and not ledger:  # nothing to honour (a fresh pipeline, the usual case)
            # a seed row without a pipeline row or a ledger: the row was deleted by hand after a
            # traversal without a jump, whose other rows were not (see ``reset`` below)
            return Resumption(start=0, value=spec.seed, reset=self._seed_stored(spec.key))
        jump = _current(ledger)
        n = len(spec.template.tasks)
        out = Resumption(start=0, value=spec.seed)
        if resumable and row is not None:
            if jump is not None and not self.declared(spec, jump):
                resumer.corrupt(
                    spec,
                    row,
                    f"its ledger row handoff_id={jump.handoff_id} ({jump.from_seq} -> {jump.to_seq})"
                    " is no jump the pipeline declares; resume with --fresh-restart to run it from the seed",
                )
                return None
            if jump is not None and jump.to_seq is None:  # an END whose settle was never written
                if resumer.repair(spec, row, jump.entry_seq, jump):
                    return None
            else:
                if row.cursor == n:  # the last task's output is durable, the row never said so
                    if resumer.repair(spec, row, n - 1):
                        return None
                    row.cursor = n - 1
                if jump is not None:
                    out = self.after_jump(spec, row, jump)
                elif row.cursor > 0:
                    out.start, out.value = resumer.load_checkpoint(spec, row)
        if out.start == 0 and ledger and ledger[-1].operation != "restart" and out.entry is None:
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
            return self.store.get_artifact(key, -1) is not None
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
        if control is not None and jump.operation in BACKWARD_OPS:
            back = control.back
            if back is None:
                return False
            if jump.operation == "retry_all":
                return to == 0 and jump.from_seq in back.retry_all
            return to in back.rewind.get(jump.from_seq, ())
        return control is not None and to in control.edges.get(jump.from_seq, ())

    def after_jump(self, spec: PipelineSpec, row: PipelineRecord, jump: HandoffRecord) -> Resumption:
        """After a committed jump to ``jump.to_seq``: the latest usable output at or after the
        destination, else the jump's entry, else the seed (never a task the jump skipped)."""
        assert jump.to_seq is not None
        entry = (jump.to_seq, jump.entry_artifact_id, jump.entry_seq)
        problem: Problem | None = None
        for seq in range(min(row.cursor, len(spec.template.tasks)) - 1, jump.to_seq - 1, -1):
            loaded, why = self.resumer.checkpoint_at(spec, seq)
            if why is None:
                return Resumption(start=seq + 1, value=loaded, entry=entry)
            problem = problem or why
        value, why = self.entry_value(spec, jump)
        if why is None:
            if problem is not None:
                self.event(
                    problem[0],
                    "pipeline",
                    pipeline_id=spec.key,
                    data={**problem[1], "resume_from": jump.to_seq},
                )
            return Resumption(start=jump.to_seq, value=value, entry=entry)
        kind, data = problem or why
        self.event(kind, "pipeline", pipeline_id=spec.key, data={**data, "resume_from": 0})
        return Resumption(start=0, value=spec.seed)

    def entry_value(self, spec: PipelineSpec, jump: HandoffRecord) -> tuple[Any, Problem | None]:
        """The value a jump's destination receives, read back from its entry artifact."""
        if jump.entry_seq == -1:
            return spec.seed, None
        # a handed-over value was written by the source task; a reused input by its own task
        writer = jump.entry_seq if jump.entry_seq < len(spec.template.tasks) else jump.from_seq
        value, why = self.resumer.checkpoint_at(spec, jump.entry_seq, jump.from_task, writer)
        if why is not None:
            why[1].update(handoff_id=jump.handoff_id, via="handoff")
        return value, why

    def opened(self, state: PipelineState, plan: Resumption, discarded: int) -> None:
        """The pipeline takes the plan's entry and ledger count; its reset waits for ``admitted``."""
        state.entry, state.ledger_rows = plan.entry, plan.ledger_rows
        state.traversal = plan.traversal
        if plan.reset:
            self._resets[state.spec.key] = (plan.restart, discarded)

    def admitted(self, state: PipelineState) -> None:
        """The pipeline got its place in the run: its reset (if any) goes into the next commit,
        before any of its tasks can run."""
        pending = self._resets.pop(state.spec.key, None) if self._resets else None
        if pending is not None:
            self.mark_reset(state, *pending)

    def mark_reset(self, state: PipelineState, restart: str | None, cursor: int) -> None:
        """Start again from the seed over an earlier traversal, in one commit with the pipeline
        row at cursor 0: that traversal's task rows and chain outputs go (``PipelineReset``),
        the artifacts that stay (seed, handed-over entries) lose their final flag, and after a
        jump (``restart``: why) a ledger row says older jumps no longer drive recovery."""
        run = self.run
        key = state.spec.key
        assert run.recorder is not None
        batch = run.recorder.pending
        batch.resets.append(PipelineReset(pipeline_id=key, slots=state.n))
        batch.finals_cleared.append(key)
        if restart is not None:
            batch.handoffs.append(
                HandoffRecord(
                    pipeline_id=key,
                    run_id=run.run_id,
                    from_seq=cursor,
                    from_task="",
                    to_seq=0,
                    to_task=state.tasks[0].name,
                    entry_seq=-1,
                    entry_artifact_id=f"{key}:-1",
                    entry_reused=True,
                    reason=restart,
                    ts=run.clock.wall(),
                    operation="restart",
                )
            )
            state.ledger_rows += 1
            if state.traversal is not None:
                state.traversal.apply("restart", cursor, 0, restart)
        batch.pipelines.append(msgspec.structs.replace(state.record))
        state.row_written = True

    # -- the jump ---------------------------------------------------------------------------------
    def input_of(self, state: PipelineState) -> tuple[int, str]:
        """``(seq, artifact id)`` of the artifact the current task received."""
        entry = state.entry
        if entry is not None and entry[0] == state.seq:
            return entry[2], entry[1]
        return state.seq - 1, f"{state.spec.key}:{state.seq - 1}"

    def stage_handoff(
        self, state: PipelineState, ctx: TaskContext, directive: Handoff, t0: float, wall0: float
    ) -> tuple[HandoffRecord, Any, ArtifactRecord | None]:
        """Put a jump's rows into the next group commit; returns its ledger row, the value the
        destination receives and the entry artifact (when one is written).

        Raises ``FatalError`` (no control, undeclared edge, input not stored, a value no codec
        stores) or ``ArtifactBackendUnavailable`` before anything is staged. The rows are the
        ones a checkpoint writes (``Checkpointer.close``), with the ledger row beside them."""
        run = self.run
        checkpoints = self.checkpoints
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
        traversal = state.traversal
        if traversal is not None and not is_end and traversal.exhausted():
            raise FatalError(
                f"control budget exhausted: task {task.name!r} (seq {seq}) of pipeline {key!r} cannot"
                f" {directive.op.replace('_', '-')}: its traversal has used all {traversal.limit}"
                " handoffs (max_handoffs: the smaller of pipeline.control's and run's)"
            )
        if directive.op != "forward":
            return self.backward.stage(state, ctx, directive, to_seq, t0, wall0)
        ended = run.mono()
        now = wall0 + (ended - t0)
        reused = directive.value is UNSET
        if reused:
            value = state.value
            entry_seq, entry_id = self.input_of(state)
            entry_art = self._reused_entry(state, task.name, entry_seq) if is_end else None
        else:
            value = directive.value
            entry_seq = n + state.ledger_rows
            entry_id = f"{key}:{entry_seq}"
            try:
                codec, type_name, data = checkpoints.codecs.encode(value)
            except ArtifactCodecError as exc:  # the same value again: a FatalError, never retried
                raise FatalError(
                    f"the value task {task.name!r} of pipeline {key!r} handed off cannot be stored: {exc}"
                ) from exc
            entry_art = checkpoints.artifact(
                entry_id, key, task.name, entry_seq, codec, type_name, data, now, is_end
            )
        seed = checkpoints.seed_artifact(state, now) if state.write_seed else None
        if checkpoints.putter is not None:
            ended = run.mono()  # the attempt ends once the backend holds the bytes, as a checkpoint's
        # nothing below raises: the rows go out together or not at all
        if is_end and reused:  # the input becomes the final artifact: its row is written again, marked
            if entry_art is not None:
                entry_art = msgspec.structs.replace(entry_art, is_final=True)
            elif seed is not None:  # the input is the seed this traversal has yet to write
                seed.is_final = True
                entry_art = seed
        ledger = HandoffRecord(
            pipeline_id=key,
            run_id=run.run_id,
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
        assert run.recorder is not None
        batch = run.recorder.pending
        batch.handoffs.append(ledger)
        if seed is not None:
            batch.artifacts.append(seed)
            state.write_seed = False
        if entry_art is not None and entry_art is not seed:
            batch.artifacts.append(entry_art)
        record = state.record
        record.cursor = to_seq
        if is_end:
            record.state = "succeeded"
            record.finished_at = now
        checkpoints.close(state, ctx, t0, wall0, ended, now, "handed_off", {}, None, None, True)
        return ledger, value, entry_art

    def _reused_entry(self, state: PipelineState, task: str, entry_seq: int) -> ArtifactRecord | None:
        """The stored input a jump to END reuses as the final artifact (None: it is the seed,
        which this traversal has yet to write)."""
        if entry_seq == -1 and state.write_seed:
            return None
        return self.stored_input(state.spec.key, task, entry_seq)

    def stored_input(self, key: str, task: str, seq: int) -> ArtifactRecord:
        try:
            art = self.store.get_artifact(key, seq)
        except CorruptRow as exc:
            raise FatalError(
                f"task {task!r} ended its pipeline with its input, which is unreadable: {exc}"
            ) from exc
        if art is None:
            raise FatalError(
                f"task {task!r} ended its pipeline with its input, whose row (seq {seq}) is not stored"
            )
        return art

    def landed(self, state: PipelineState) -> None:
        """After the group commit that made ``state``'s jump durable: count it, and move the
        pipeline to the destination with its value; a jump to END leaves it at the chain's end
        with the entry as its output, and ``ended`` (called next) finishes it."""
        jump = state.jump
        assert jump is not None
        ledger, value, entry = jump
        run = self.run
        run.counters["handoffs"] += 1
        if ledger.operation != "forward":
            run.counters["rewinds" if ledger.operation == "rewind" else "retry_alls"] += 1
        state.ledger_rows += 1
        if state.traversal is not None:
            state.traversal.apply(ledger.operation, ledger.from_seq, ledger.to_seq, ledger.reason)
        if run.trace:  # the ledger row records the jump; ``events: all`` repeats it as an event
            self.event(
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

    def ended(self, state: PipelineState, entry: ArtifactRecord) -> None:
        """A pipeline whose jump to END is durable: it succeeded, with the entry as its final
        artifact."""
        state.jump = None
        self.outcomes.succeeded(state, entry, handed_off=True)

    def history(self, state: PipelineState, name: str) -> list[Any]:
        """``ctx.history(name)``: what earlier visits of task ``name`` produced."""
        return self.backward.history(state, name)
