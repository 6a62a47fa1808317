"""The ``memory`` store plugin: the reference implementation of the Store protocol.

Used for ``:memory:`` and by tests. It keeps every row in dicts and lists; ``commit`` works on
copies so a failing batch leaves nothing behind, exactly like a rolled-back transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from pyattacker import hookimpl
from pyattacker.errors import StoreUnavailable
from pyattacker.model import (
    ArtifactRecord,
    AttemptRecord,
    Batch,
    EventRecord,
    HandoffRecord,
    LogRecord,
    MetricPoint,
    MetricRecord,
    NoteRecord,
    PipelineRecord,
    ResourceRecord,
    RunRecord,
    TaskRecord,
)
from pyattacker.plugins.api import PAGE_KINDS, StoreBase, StoreOpenerBase
from pyattacker.plugins.rowset import select_points
from pyattacker.plugins.run_notes import config_note, next_note
from pyattacker.plugins.store_base import count_by_operation, select_logs
from pyattacker.plugins.store_queries import PipelineQuery, TimeBucket, bucket_attempts, select_pipelines
from pyattacker.plugins.store_stats import count_states

__all__ = ["MemoryStore", "MemoryStoreOpener"]


def _copy(row: Any) -> Any:
    return msgspec.structs.replace(row)


class MemoryStore(StoreBase):
    """All rows in memory; nothing survives the process."""

    #: keeps a control ledger and applies ``Batch.resets`` (pipelines with control may run here)
    supports_handoffs = True
    #: keeps every revision of each run's notes
    supports_notes = True
    keeps_logs = True

    def __init__(self, location: str = ":memory:") -> None:
        self.location = location
        self.read_only = False
        self._runs: dict[str, RunRecord] = {}
        self._pipelines: dict[str, PipelineRecord] = {}
        self._tasks: dict[str, TaskRecord] = {}
        self._artifacts: dict[str, ArtifactRecord] = {}
        self._attempts: list[AttemptRecord] = []
        self._events: list[EventRecord] = []
        self._handoffs: list[HandoffRecord] = []
        self._logs: list[LogRecord] = []
        #: per pipeline: its ledger rows, and the ids of its artifacts marked final (what
        #: ``finals_cleared`` unmarks): a jump and a finish cost no scan of every stored row
        self._ledger: dict[str, list[HandoffRecord]] = {}
        self._finals: dict[str, set[str]] = {}
        self._metrics: dict[tuple[str, str, str], MetricRecord] = {}
        self._points: list[MetricPoint] = []
        self._point_ops: set[str] = set()
        self._resources: dict[tuple[str, str, str], ResourceRecord] = {}
        self._notes: dict[str, list[NoteRecord]] = {}
        self.commits = 0
        self.closed = False

    # -- writes -------------------------------------------------------------------------
    def commit(self, batch: Batch) -> None:
        """Copy every row first, then apply: a failure while copying leaves nothing behind."""
        if self.closed:
            raise StoreUnavailable("memory store is closed")
        runs = [_copy(r) for r in batch.runs]
        pipelines = [_copy(p) for p in batch.pipelines]
        tasks = [_copy(t) for t in batch.tasks]
        artifacts = [_copy(a) for a in batch.artifacts]
        attempts = [_copy(a) for a in batch.attempts]
        events = [_copy(e) for e in batch.events]
        handoffs = [_copy(h) for h in batch.handoffs]
        logs = [msgspec.structs.replace(g, lines=list(g.lines)) for g in batch.logs]
        metrics = [_copy(m) for m in batch.metrics]
        points = [_copy(p) for p in batch.metric_points]
        resources = [_copy(r) for r in batch.resources]
        progress = list(batch.progress)
        resets = [(r.pipeline_id, range(r.start, r.slots)) for r in batch.resets]
        # nothing below can fail
        for run in runs:
            self._runs[run.run_id] = run
        for row in pipelines:
            old = self._pipelines.get(row.pipeline_id)
            if old is not None:
                row.created_at = old.created_at
            self._pipelines[row.pipeline_id] = row
        for step in progress:
            current = self._pipelines.get(step.pipeline_id)
            if current is not None:
                current.cursor = step.cursor
                current.attempts_total = step.attempts_total
        for pid, slots in resets:  # before the tasks and artifacts: the new ones stay
            self._reset(pid, slots)
        for t in tasks:
            self._tasks[t.task_run_id] = t
        for pid in batch.finals_cleared:
            for artifact_id in self._finals.pop(pid, ()):
                self._artifacts[artifact_id].is_final = False
        for a in artifacts:
            self._artifacts[a.artifact_id] = a
            if a.is_final:
                self._finals.setdefault(a.pipeline_id, set()).add(a.artifact_id)
            elif a.pipeline_id in self._finals:
                self._finals[a.pipeline_id].discard(a.artifact_id)
        for original, at in zip(batch.attempts, attempts, strict=True):
            at.attempt_id = original.attempt_id = len(self._attempts) + 1
            self._attempts.append(at)
        for original_ev, ev in zip(batch.events, events, strict=True):
            ev.event_id = original_ev.event_id = len(self._events) + 1
            self._events.append(ev)
        for original_h, h in zip(batch.handoffs, handoffs, strict=True):
            h.handoff_id = original_h.handoff_id = len(self._handoffs) + 1
            self._handoffs.append(h)
            self._ledger.setdefault(h.pipeline_id, []).append(h)
        for original_g, g in zip(batch.logs, logs, strict=True):
            g.log_id = original_g.log_id = len(self._logs) + 1
            self._logs.append(g)
        for m in metrics:
            self._metrics[(m.run_id, m.pipeline_id, m.name)] = m
        for pt in points:
            if pt.op_id not in self._point_ops:
                self._point_ops.add(pt.op_id)
                self._points.append(pt)
        for r in resources:
            self._resources[(r.run_id, r.pool, r.resource_id)] = r
        self.commits += 1

    def _reset(self, pid: str, slots: range) -> None:
        """Drop the task rows and chain outputs of a pipeline starting again from its seed
        (``Batch.resets``)."""
        finals = self._finals.get(pid)
        for seq in slots:
            slot = f"{pid}:{seq}"
            self._tasks.pop(slot, None)
            if self._artifacts.pop(slot, None) is not None and finals is not None:
                finals.discard(slot)

    def interrupt_running(self, run_id: str, now: float) -> int:
        changed = 0
        for p in self._pipelines.values():
            if p.state == "running" and p.run_id != run_id:
                p.state = "interrupted"
                changed += 1
        for t in self._tasks.values():
            if t.state == "running" and t.run_id != run_id:
                t.state = "interrupted"
        for r in self._runs.values():
            if r.status == "running" and r.run_id != run_id:
                r.status = "interrupted"
                r.ended_at = r.ended_at or now
        return changed

    def write_note(
        self, run_id: str, text: str, *, expected_revision: int | None, author: str, now: float
    ) -> NoteRecord:
        if self.closed:
            raise StoreUnavailable("memory store is closed")
        self._note_run(run_id)
        current = self.run_note(run_id)
        note = next_note(self.location, run_id, current, text, expected_revision, author, now)
        revisions = self._notes.setdefault(run_id, [])
        if not revisions and current is not None:  # the config's notes, kept as revision 1
            revisions.append(current)
        revisions.append(note)
        return _copy(note)

    # -- reads --------------------------------------------------------------------------
    def run_note(self, run_id: str) -> NoteRecord | None:
        revisions = self._notes.get(run_id)
        if revisions:
            return _copy(revisions[-1])
        return config_note(self._runs.get(run_id))

    def lookup_pipelines(self, ids: Sequence[str]) -> dict[str, PipelineRecord]:
        found = {}
        for pid in ids:
            row = self._pipelines.get(pid)
            if row is not None:
                found[pid] = _copy(row)
        return found

    def pipeline_counts(self, run_id: str | None = None) -> dict[str, int]:
        """``{state: count}`` of the pipeline rows of ``run_id``, no row copied."""
        return count_states(self._pipelines.values(), run_id)

    def get_artifact(self, pipeline_id: str, seq: int) -> ArtifactRecord | None:
        row = self._artifacts.get(f"{pipeline_id}:{seq}")
        return None if row is None else _copy(row)

    def handoffs(self, pipeline_id: str) -> list[HandoffRecord]:
        """The pipeline's control ledger, oldest first."""
        return [_copy(h) for h in self._ledger.get(pipeline_id, ())]

    def handoffs_by_operation(self, run_id: str | None = None) -> dict[str, int]:
        return count_by_operation(self._handoffs, run_id)

    def logs(
        self,
        *,
        run_id: str | None = None,
        pipeline_id: str | None = None,
        task: str | None = None,
        after: int | None = None,
        limit: int = 1000,
    ) -> list[LogRecord]:
        start = 0 if after is None else max(0, after)  # log_id n sits at index n - 1
        return select_logs(self._logs[start:], run_id, pipeline_id, task, after, limit)

    def get_run(self, run_id: str) -> RunRecord | None:
        row = self._runs.get(run_id)
        return None if row is None else _copy(row)

    def runs(self) -> list[RunRecord]:
        return [_copy(r) for r in sorted(self._runs.values(), key=lambda r: (r.started_at, r.run_id))]

    def page(
        self,
        kind: str,
        *,
        run_id: str | None = None,
        pipeline_id: str | None = None,
        state: str | None = None,
        after: tuple[Any, ...] | None = None,
        limit: int = 1000,
    ) -> list[Any]:
        rows: list[Any]
        if kind == "pipelines":
            rows = list(self._pipelines.values())
        elif kind == "tasks":
            rows = list(self._tasks.values())
        elif kind == "attempts":
            rows = self._attempts
        elif kind == "events":
            rows = self._events
        elif kind == "artifacts":
            rows = list(self._artifacts.values())
        else:
            raise ValueError(f"unknown row kind {kind!r}")
        keys = PAGE_KINDS[kind]
        out = []
        for row in rows:
            if run_id is not None and getattr(row, "run_id", run_id) != run_id:
                continue
            if pipeline_id is not None and row.pipeline_id != pipeline_id:
                continue
            if state is not None and getattr(row, "state", state) != state:
                continue
            out.append(row)
        out.sort(key=lambda r: tuple(getattr(r, k) for k in keys))
        if after is not None:
            out = [r for r in out if tuple(getattr(r, k) for k in keys) > tuple(after)]
        return [_copy(r) for r in out[: max(0, limit)]]

    def metrics(self, run_id: str | None = None, pipeline_id: str | None = None) -> list[MetricRecord]:
        rows = [
            m
            for m in self._metrics.values()
            if (run_id is None or m.run_id == run_id)
            and (pipeline_id is None or m.pipeline_id == pipeline_id)
        ]
        return [_copy(m) for m in sorted(rows, key=lambda m: (m.run_id, m.pipeline_id, m.name))]

    def metric_points(
        self, run_id: str, pipeline_id: str, key: str | None = None, after_step: int = -1, limit: int = 1000
    ) -> list[MetricPoint]:
        return [_copy(p) for p in select_points(self._points, run_id, pipeline_id, key, after_step, limit)]

    def resources(self, run_id: str | None = None) -> list[ResourceRecord]:
        rows = [r for r in self._resources.values() if run_id is None or r.run_id == run_id]
        return [_copy(r) for r in sorted(rows, key=lambda r: (r.pool, r.resource_id))]

    def find_pipelines(
        self, query: PipelineQuery, after: tuple[Any, Any] | None = None, limit: int = 50
    ) -> list[PipelineRecord]:
        """Filtered and ordered over the rows held, keeping ``limit`` of them."""
        return [_copy(p) for p in select_pipelines(self._pipelines.values(), query, after, limit)]

    def attempt_timeline(self, run_id: str | None, origin: float, width: float) -> list[TimeBucket]:
        rows = (
            (a.attempt_id or 0, a.ended_at, a.duration_ms, a.outcome)
            for a in self._attempts
            if run_id is None or a.run_id == run_id
        )
        return bucket_attempts(rows, origin, width)

    def close(self) -> None:
        self.closed = True


class MemoryStoreOpener(StoreOpenerBase):
    """Opens a fresh in-memory store for ``:memory:`` / ``memory:``."""

    name = "memory"
    schemes = ("memory",)
    suffixes: tuple[str, ...] = ()

    def open(self, location: str, *, read_only: bool = False) -> MemoryStore:
        return MemoryStore(":memory:")


@hookimpl
def pyattacker_stores(register: Any) -> None:
    register(MemoryStoreOpener())
