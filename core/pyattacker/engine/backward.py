"""Backward moves (``Handoff.rewind``, ``Handoff.retry_all``): staging one, and reading history.

Only pipelines that declare ``rewind`` or ``retry_all`` get here. A backward move is one group
commit, like a forward handoff: the source's task and attempt rows (``handed_off``), the ledger
row (``operation`` ``rewind``/``retry_all``), the entry artifact (a rewind's value; a retry-all
feeds the seed), the pipeline row with its cursor at the target, a ``PipelineReset`` of the
target's slot and every later one (they run again), and a copy of the outputs the move makes
history (``history_seq``: below the seed, never reused; a reset never deletes them). A resume
after a kill then finds either the state before the move or the whole move, never half of one.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

import msgspec

from pyattacker.errors import ArtifactCodecError, CorruptRow, FatalError
from pyattacker.flow.visits import BACKWARD_OPS, history_seq
from pyattacker.model import ArtifactRecord, HandoffRecord, PipelineReset

if TYPE_CHECKING:
    from pyattacker.engine.checkpoint import Checkpointer
    from pyattacker.engine.context import TaskContext
    from pyattacker.engine.resume import Resumer
    from pyattacker.engine.state import PipelineState, RunState
    from pyattacker.flow.chain import PipelineSpec
    from pyattacker.flow.handoff import Handoff

__all__ = ["Backward"]


class Backward:
    """Stages backward moves and answers ``ctx.history()``, for one run."""

    def __init__(self, run: RunState, resumer: Resumer, checkpoints: Checkpointer) -> None:
        self.run = run
        self.store = run.store
        self.resumer = resumer
        self.checkpoints = checkpoints

    def stage(
        self,
        state: PipelineState,
        ctx: TaskContext,
        directive: Handoff,
        to_seq: int,
        t0: float,
        wall0: float,
    ) -> tuple[HandoffRecord, Any, ArtifactRecord | None]:
        """Put the move's rows into the next group commit (see the module); returns its ledger
        row, the value the target receives and the entry artifact (None for a retry-all)."""
        run, checkpoints = self.run, self.checkpoints
        task = ctx.task
        seq, n, key = state.seq, state.n, state.spec.key
        ended = run.mono()
        now = wall0 + (ended - t0)
        index = state.ledger_rows
        entry_art: ArtifactRecord | None = None
        if directive.op == "retry_all":
            value = self.fresh_seed(state.spec)
            entry_seq, reused = -1, True
        else:
            value = directive.value
            entry_seq, reused = n + index, False
            try:
                codec, type_name, data = checkpoints.codecs.encode(value)
            except ArtifactCodecError as exc:
                raise FatalError(
                    f"the value task {task.name!r} of pipeline {key!r} rewound with cannot be stored: {exc}"
                ) from exc
            entry_art = checkpoints.artifact(
                f"{key}:{entry_seq}", key, task.name, entry_seq, codec, type_name, data, now, False
            )
        history = self.archive(state, to_seq, seq, index)
        seed = checkpoints.seed_artifact(state, now) if state.write_seed else None
        if checkpoints.putter is not None:
            ended = run.mono()
        # nothing below raises: the rows go out together or not at all
        ledger = HandoffRecord(
            pipeline_id=key,
            run_id=run.run_id,
            from_seq=seq,
            from_task=task.name,
            to_seq=to_seq,
            to_task=state.tasks[to_seq].name,
            entry_seq=entry_seq,
            entry_artifact_id=f"{key}:{entry_seq}",
            entry_reused=reused,
            reason=directive.reason,
            ts=now,
            operation=directive.op,
        )
        assert run.recorder is not None
        batch = run.recorder.pending
        batch.handoffs.append(ledger)
        batch.resets.append(PipelineReset(pipeline_id=key, slots=n, start=to_seq))
        if seed is not None:
            batch.artifacts.append(seed)
            state.write_seed = False
        batch.artifacts.extend(history)
        if entry_art is not None:
            batch.artifacts.append(entry_art)
        state.record.cursor = to_seq
        if state.traversal is not None:  # the re-entered slots' outputs are history now
            outputs = state.traversal.outputs
            for seq_ in [s for s in outputs if s >= to_seq]:
                del outputs[seq_]
        checkpoints.close(state, ctx, t0, wall0, ended, now, "handed_off", {}, None, None, True)
        return ledger, value, entry_art

    def archive(self, state: PipelineState, start: int, stop: int, index: int) -> list[ArtifactRecord]:
        """Copies of the durable outputs of slots ``start .. stop - 1`` at their history seqs
        (the move at ledger row ``index`` is about to reset those slots). A slot a forward edge
        skipped, or an unreadable row, has nothing to keep."""
        key, n = state.spec.key, state.n
        traversal = state.traversal
        staged = {} if traversal is None else traversal.outputs
        out: list[ArtifactRecord] = []
        for seq in range(start, stop):
            art = staged.get(seq)
            if art is None:  # written before this process resumed the pipeline
                try:
                    art = self.store.get_artifact(key, seq)
                except CorruptRow:
                    continue
            if art is None:
                continue
            slot = history_seq(index, n, seq)
            out.append(msgspec.structs.replace(art, artifact_id=f"{key}:{slot}", seq=slot, is_final=False))
        return out

    def fresh_seed(self, spec: PipelineSpec) -> Any:
        """The seed decoded afresh from its bound bytes (a task may have changed the object it
        was given); a deep copy when the bytes cannot be decoded here."""
        try:
            types = {spec.seed_type: type(spec.seed)}
            return self.resumer.codecs.decode(spec.seed_codec, spec.seed_type, spec.seed_bytes, types)
        except Exception:
            return copy.deepcopy(spec.seed)

    def history(self, state: PipelineState, name: str) -> list[Any]:
        """What earlier visits of task ``name`` produced, oldest first (outputs a backward move
        made history; one whose bytes are not stored is left out)."""
        seqs = {i for i, t in enumerate(state.tasks) if t.name == name}
        if not seqs:
            raise FatalError(
                f"ctx.history({name!r}): no task of pipeline {state.spec.template.name!r} is named so"
            )
        spec, n = state.spec, state.n
        out: list[Any] = []
        for index, row in enumerate(self.store.handoffs(spec.key)):
            if row.operation not in BACKWARD_OPS or row.to_seq is None:
                continue
            for seq in range(row.to_seq, row.from_seq):
                if seq in seqs:
                    value, why = self.resumer.checkpoint_at(spec, history_seq(index, n, seq), name, seq)
                    if why is None:
                        out.append(value)
        return out
