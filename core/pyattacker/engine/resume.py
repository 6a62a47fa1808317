"""Where an admitted pipeline starts: skipped, repaired, resumed from its last durable output,
or started from its seed.

A resume never runs a task whose output is durable and readable: it continues after the latest
task whose output can be read back, and names in one event why a later one could not be used.
A stored row that cannot be true (a cursor outside the chain, a ledger row no declared jump
explains) fails its pipeline instead of running tasks at a made-up position.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyattacker.digest import payload_mismatch
from pyattacker.engine.attempts import CLEAN, KILLED
from pyattacker.engine.checkpoint import snapshot
from pyattacker.engine.identity_damage import damage_of
from pyattacker.engine.state import PipelineState, RunState
from pyattacker.engine.telemetry import Telemetry
from pyattacker.errors import (
    ArtifactCodecError,
    CorruptCheckpoint,
    CorruptRow,
    PipelineIdentityConflict,
    PyAttackerError,
)
from pyattacker.model import ArtifactRecord, Batch, PipelineRecord
from pyattacker.store.codecs import CodecRegistry, returned_record_types

if TYPE_CHECKING:
    from pyattacker.engine.control import Control
    from pyattacker.flow.chain import PipelineSpec
    from pyattacker.flow.taskspec import TaskSpec

__all__ = ["Resumer", "Problem"]

#: why a stored output cannot be used: ``(event kind, event data)``
Problem = tuple[str, dict[str, Any]]


class Resumer:
    """Opens admitted pipelines against what the store holds, for one run."""

    def __init__(self, run: RunState, telemetry: Telemetry, codecs: CodecRegistry, backend: Any) -> None:
        self.run = run
        self.store = run.store
        self.event = telemetry.event
        self.codecs = codecs
        self.backend = backend
        #: set by the runner: the handoff rules of pipelines that declare ``control``
        self.control: Control | None = None
        self._record_types: dict[int, dict[str, type]] = {}

    def open(self, spec: PipelineSpec, row: PipelineRecord | None) -> PipelineState | None:
        """Decide what to do with one admitted spec: skip, repair, resume or start (None: there
        is nothing to run)."""
        run = self.run
        cfg = run.config
        template = spec.template
        if row is not None and (
            row.spec_digest != template.spec_digest or row.seed_digest != spec.seed_digest
        ):
            damage = damage_of(spec, row, self.store)
            if damage is not None:  # the bytes changed, not the configuration: say so
                err: PyAttackerError = CorruptRow(
                    f"table pipelines, row pipeline_id={spec.key!r} is damaged: {damage}. Its"
                    " configuration did not change; restore the store from a copy, or use a new key"
                    " or a new store for this pipeline",
                    self.store.location,
                )
                self.event(
                    "pipeline.identity_damaged", "pipeline", pipeline_id=spec.key, data={"error": str(err)}
                )
                raise err
            what = "task chain" if row.spec_digest != template.spec_digest else "seed"
            err = PipelineIdentityConflict(
                f"pipeline {spec.key!r} is stored with a different {what}; its old results are kept."
                " Use a new key or a new store for the changed pipeline"
            )
            self.event(
                "pipeline.identity_conflict", "pipeline", pipeline_id=spec.key, data={"error": str(err)}
            )
            raise err
        if row is not None and run.run_id and row.run_id == run.run_id:
            # this run admitted the key already and finished it: it is given twice (running
            # it again would repeat its tasks, a failed one included)
            self.skip(spec, "duplicate_key")
            return None
        if row is not None and row.state == "succeeded" and not cfg.retry_succeeded:
            self.skip(spec, "succeeded")
            return None
        n = len(template.tasks)
        now = run.wall()
        record = row if row is not None else self._new_row(spec, now)
        previous_run = record.run_id
        ended = record.finished_at is not None  # (before this run reopens the row)
        discarded = record.cursor
        start, value = 0, spec.seed
        restart = cfg.fresh_restart and row is not None
        resumable = row is not None and not restart and row.state != "succeeded"
        if resumable and (record.cursor > n or record.cursor < 0):
            self.corrupt(spec, record)
            return None
        plan = None
        control = self.control
        if template.control is not None and control is not None:
            control.check_ledger(spec)
            why = "pipeline_row_missing" if row is None else "fresh_restart" if restart else "retry_succeeded"
            plan = control.resume(spec, row, resumable, why)
            if plan is None:
                return None
            start, value = plan.start, plan.value
        elif row is not None and resumable:
            if row.cursor == n:
                if self.repair(spec, record):
                    return None
                row.cursor = n - 1  # the last output is not on disk: run the last task again
            if row.cursor > 0:
                start, value = self.load_checkpoint(spec, row)
        if restart:
            self.event(
                "pipeline.restarted",
                "pipeline",
                pipeline_id=spec.key,
                data={
                    "reason": "fresh_restart",
                    "discarded_cursor": row.cursor if row else 0,
                    "append_only_history_preserved": True,
                },
            )
        record.run_id = run.run_id
        record.state = "running"
        record.started_at = record.started_at or now
        record.finished_at = None
        record.cursor = start
        record.failed_task = record.error_class = record.error_type = record.error_message = (
            record.traceback
        ) = None
        record.resume_of = previous_run if start > 0 else None
        record.repeat = spec.repeat
        state = PipelineState(spec, record, start, value)
        state.write_seed = row is None or restart or start == 0
        if resumable and start < n:  # its next attempt number waits for a commit (``attempts``)
            state.reserve = CLEAN if ended else KILLED
        if plan is not None and control is not None:
            control.opened(state, plan, discarded)
        if start > 0:
            resumed: dict[str, Any] = {"from_seq": start, "resume_of": previous_run}
            if plan is not None:
                resumed.update(plan.via())
            self.event("pipeline.resumed", "pipeline", pipeline_id=spec.key, data=resumed)
        return state

    def _new_row(self, spec: PipelineSpec, now: float) -> PipelineRecord:
        template = spec.template
        return PipelineRecord(
            pipeline_id=spec.key,
            run_id=self.run.run_id,
            name=template.name,
            key=spec.key,
            created_at=now,
            n_tasks_total=len(template.tasks),
            seed_digest=spec.seed_digest,
            spec_digest=template.spec_digest,
            seed_key=spec.seed_key,
            repeat=spec.repeat,
            tags=template.tags,
        )

    def skip(self, spec: PipelineSpec, reason: str) -> None:
        """Count a skipped pipeline. Its stored row is unchanged; with ``events="all"`` each skip is
        also an event, otherwise one ``run.skipped`` event per reason closes the run (a resume of
        a finished million-pipeline store should not write a million rows)."""
        run = self.run
        run.counters["skipped"] += 1
        if reason != "succeeded" or run.trace:
            self.event("pipeline.skipped", "pipeline", pipeline_id=spec.key, data={"reason": reason})
        else:
            run.skipped_quietly += 1

    # -- reading outputs back -------------------------------------------------------------------
    def load_checkpoint(self, spec: PipelineSpec, row: PipelineRecord) -> tuple[int, Any]:
        """Where a resumed pipeline continues: after the latest task whose output can be read.

        The checkpoint at the cursor is the usual answer. When it cannot be used (its row or
        bytes missing, a blob deleted or damaged, bytes no codec decodes), the earlier outputs
        are tried, latest first, down to the seed. One event names the checkpoint at the cursor,
        why it could not be used and where the pipeline resumes (``resume_from``: the number of
        tasks kept, 0 = from the seed)."""
        problem: Problem | None = None
        start, value = 0, spec.seed
        for seq in range(row.cursor - 1, -1, -1):
            loaded, why = self.checkpoint_at(spec, seq)
            if why is None:
                start, value = seq + 1, loaded
                break
            problem = problem or why
        if problem is not None:
            kind, data = problem
            data["resume_from"] = start
            self.event(kind, "pipeline", pipeline_id=spec.key, data=data)
        return start, value

    def checkpoint_at(
        self, spec: PipelineSpec, seq: int, task: str | None = None, writer: int | None = None
    ) -> tuple[Any, Problem | None]:
        """``(value, None)`` for the output of task ``seq``, or ``(None, problem)`` saying why it
        cannot be used. ``task`` names the writer of an artifact past the chain's slots (a
        handoff's entry) and ``writer`` is its seq: its return annotation gives the record types
        to decode with, as for any output (else a handed-over Struct resumes as a dict)."""
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
        if art.payload is None and art.blob_ref and self.backend is not None:
            try:
                art = self.backend.hydrate(art)
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
        damage = payload_mismatch(art.digest, art.payload)
        if damage is not None:  # changed on disk: never fed to the next task as if it were its input
            return None, (
                "pipeline.checkpoint_unusable",
                {
                    "seq": seq,
                    "task": task,
                    "reason": "digest_mismatch",
                    "error": f"artifact {art.artifact_id!r}: {damage}",
                },
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

    def _blob_unavailable(self, seq: int, task: str, art: ArtifactRecord, error: str | None) -> Problem:
        """The row points at bytes elsewhere that this run's backend could not read back: a
        blob deleted, truncated, replaced or unreadable, or a backend other than the one that
        wrote it (``backend`` names the one this run uses)."""
        data: dict[str, Any] = {
            "seq": seq,
            "task": task,
            "reason": "blob_unavailable",
            "blob_ref": art.blob_ref,
            "backend": getattr(self.backend, "name", None),
        }
        if error is not None:
            data["error"] = error
        return "pipeline.checkpoint_missing", data

    # -- rows that cannot be true ---------------------------------------------------------------
    def corrupt(self, spec: PipelineSpec, record: PipelineRecord, ledger: str | None = None) -> None:
        """Fail a pipeline whose stored cursor, or (``ledger``: what is wrong) whose current
        ledger row, cannot be true: resuming from it would run tasks at a made-up position."""
        run = self.run
        n = len(spec.template.tasks)
        err = CorruptCheckpoint(
            f"pipeline {spec.key!r}: {ledger}"
            if ledger is not None
            else f"pipeline {spec.key!r}: stored cursor {record.cursor} is outside its {n} tasks (0..{n})"
        )
        record.run_id = run.run_id
        record.state = "failed"
        record.error_class, record.error_type, record.error_message = "fatal", "CorruptCheckpoint", str(err)
        record.finished_at = run.clock.wall()
        if ledger is None:
            self.event(
                "pipeline.corrupt_cursor", "pipeline", pipeline_id=spec.key, data={"cursor": record.cursor}
            )
        else:
            self.event("pipeline.corrupt_ledger", "pipeline", pipeline_id=spec.key, data={"error": ledger})
        self.event(
            "pipeline.failed",
            "pipeline",
            pipeline_id=spec.key,
            data={"error": str(err), "phase": "corrupt_cursor" if ledger is None else "corrupt_ledger"},
        )
        assert run.recorder is not None
        run.recorder.pending.pipelines.append(record)
        run.counters["pipelines_failed"] += 1

    def repair(
        self, spec: PipelineSpec, record: PipelineRecord, final_seq: int | None = None, jump: Any = None
    ) -> bool:
        """A pipeline whose last artifact is durable but whose row never said so: settle it.

        False when that artifact is not there after all (a row edited or deleted by hand): its
        answer is not on disk, so the caller runs the last task again instead of leaving the
        pipeline unfinished at every resume. ``final_seq``: the artifact that ends the pipeline
        when it is not the last task's (the entry of a committed END ``jump``)."""
        run = self.run
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
        damage = None if art is None or art.payload is None else payload_mismatch(art.digest, art.payload)
        if damage is not None:  # its bytes changed on disk: settling on them would export them
            self.event(
                "pipeline.checkpoint_unusable",
                "pipeline",
                pipeline_id=spec.key,
                data={
                    "seq": seq,
                    "reason": "digest_mismatch",
                    "error": damage,
                    "action": "rerun_last_task" if jump is None else "restart_from_seed",
                },
            )
            return False
        if art is None:
            self.event(
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
        settled = snapshot(record)
        settled.state = "succeeded"
        settled.run_id = run.run_id
        settled.finished_at = run.clock.wall()
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
            run.counters["repair_failures"] += 1
            run.counters["pipelines_failed"] += 1
            self.event(
                "pipeline.terminal_repair_failed",
                "pipeline",
                pipeline_id=spec.key,
                data={**previous, "error": f"{type(exc).__name__}: {exc}", "phase": "settle"},
            )
            return True
        run.counters["pipelines_succeeded"] += 1
        self.event(
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
        self.event(
            "pipeline.succeeded", "pipeline", pipeline_id=spec.key, data={"tasks": n, "repaired": True}
        )
        return True
