"""``RowSet``: every row of a store held in memory, with commit batches applied as ``Batch`` says.

A store over blobs, files or object storage persists bytes; what the rows *are* after a batch
(upserts that keep ``created_at``, progress of known pipelines only, ``finals_cleared`` before the
batch's artifacts, ids for appended rows, metric points idempotent by ``op_id``) and how they are
read (keyset pages, runs, metrics, points, resources) is the same for all of them. It is written
once here so such stores only decide where the bytes go, and cannot drift from each other.

A RowSet keeps no control ledger, resets or task logs: a store built on it declares
``supports_handoffs = False`` (pipelines with control are refused by name) and drops logs.
It does not copy: a store hands out copies if its callers may change what it holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import msgspec

from pyattacker.model import (
    ArtifactRecord,
    AttemptRecord,
    Batch,
    EventRecord,
    MetricPoint,
    MetricRecord,
    PipelineProgress,
    PipelineRecord,
    ResourceRecord,
    RunRecord,
    TaskRecord,
)
from pyattacker.plugins.paging import page_of

__all__ = ["BatchRows", "RowSet", "select_points"]


def select_points(
    points: Iterable[MetricPoint], run_id: str, pipeline_id: str, key: str | None, after_step: int, limit: int
) -> list[MetricPoint]:
    """``StoreBase.metric_points`` over points held in memory: one pipeline's points after
    ``after_step`` (of ``key`` when given), in (step, key) order, at most ``limit``."""
    found = [
        p
        for p in points
        if p.run_id == run_id
        and p.pipeline_id == pipeline_id
        and (key is None or p.key == key)
        and p.step > after_step
    ]
    found.sort(key=lambda p: (p.step, p.key))
    return found[:limit]


class BatchRows(Protocol):
    """What ``RowSet.apply`` reads: a ``Batch``, or a store's own decoded form of one."""

    runs: list[RunRecord]
    pipelines: list[PipelineRecord]
    progress: list[PipelineProgress]
    tasks: list[TaskRecord]
    finals_cleared: Any  # a set in ``Batch``, a list once encoded
    artifacts: list[ArtifactRecord]
    attempts: list[AttemptRecord]
    events: list[EventRecord]
    metrics: list[MetricRecord]
    metric_points: list[MetricPoint]
    resources: list[ResourceRecord]


class RowSet:
    """The rows of one store, keyed for upserts; ``apply`` batches in commit order."""

    def __init__(self) -> None:
        self.next_attempt_id = 1
        self.next_event_id = 1
        self.runs: dict[str, RunRecord] = {}
        self.pipelines: dict[str, PipelineRecord] = {}
        self.tasks: dict[str, TaskRecord] = {}
        self.artifacts: dict[str, ArtifactRecord] = {}
        self.finals: dict[str, set[str]] = {}  # pipeline id -> ids of its final artifacts
        self.attempts: list[AttemptRecord] = []
        self.events: list[EventRecord] = []
        self.metrics: dict[tuple[str, str, str], MetricRecord] = {}
        self.metric_points: list[MetricPoint] = []
        self.op_ids: set[str] = set()
        self.resources: dict[tuple[str, str, str], ResourceRecord] = {}

    # -- writes -------------------------------------------------------------------------------------
    def apply(self, batch: BatchRows) -> list[AttemptRecord | EventRecord]:
        """Apply ``batch``. Attempts and events without an id get the next one (a store that
        numbers rows before it persists them passes them numbered); the rows numbered here are
        returned, so a store whose write then fails can hand them back unnumbered."""
        for run in batch.runs:
            self.runs[run.run_id] = run
        for p in batch.pipelines:
            old = self.pipelines.get(p.pipeline_id)
            if old is not None:
                p = msgspec.structs.replace(p, created_at=old.created_at)
            self.pipelines[p.pipeline_id] = p
        for prog in batch.progress:
            old = self.pipelines.get(prog.pipeline_id)
            if old is not None:  # an unknown id is ignored
                self.pipelines[prog.pipeline_id] = msgspec.structs.replace(
                    old, cursor=prog.cursor, attempts_total=prog.attempts_total
                )
        for t in batch.tasks:
            self.tasks[t.task_run_id] = t
        for pid in batch.finals_cleared:  # before this batch's artifacts
            for aid in self.finals.pop(pid, ()):
                a = self.artifacts.get(aid)
                if a is not None and a.is_final:
                    self.artifacts[aid] = msgspec.structs.replace(a, is_final=False)
        for a in batch.artifacts:
            self._put_artifact(a)
        numbered: list[AttemptRecord | EventRecord] = []
        for attempt in batch.attempts:
            if attempt.attempt_id is None:
                attempt.attempt_id = self.next_attempt_id
                numbered.append(attempt)
            self.next_attempt_id = max(self.next_attempt_id, attempt.attempt_id + 1)
            self.attempts.append(attempt)
        for event in batch.events:
            if event.event_id is None:
                event.event_id = self.next_event_id
                numbered.append(event)
            self.next_event_id = max(self.next_event_id, event.event_id + 1)
            self.events.append(event)
        for m in batch.metrics:
            self.metrics[(m.run_id, m.pipeline_id, m.name)] = m
        for point in batch.metric_points:
            if point.op_id not in self.op_ids:  # appends are idempotent by op_id
                self.op_ids.add(point.op_id)
                self.metric_points.append(point)
        for r in batch.resources:
            self.resources[(r.run_id, r.pool, r.resource_id)] = r
        return numbered

    def _put_artifact(self, a: ArtifactRecord) -> None:
        old = self.artifacts.get(a.artifact_id)
        if old is not None and old.is_final and not a.is_final:
            self.finals.get(a.pipeline_id, set()).discard(a.artifact_id)
        self.artifacts[a.artifact_id] = a
        if a.is_final:
            self.finals.setdefault(a.pipeline_id, set()).add(a.artifact_id)

    @staticmethod
    def unnumber(rows: Iterable[AttemptRecord | EventRecord]) -> None:
        """Take back ids ``apply`` gave (the batch may be committed again)."""
        for row in rows:
            if isinstance(row, AttemptRecord):
                row.attempt_id = None
            else:
                row.event_id = None

    def stale_running(self, run_id: str, now: float) -> Batch:
        """The upserts that mark every ``running`` row of another run ``interrupted`` (an empty
        batch when there is none): what ``interrupt_running`` commits."""
        batch = Batch()
        for p in self.pipelines.values():
            if p.state == "running" and p.run_id != run_id:
                batch.pipelines.append(msgspec.structs.replace(p, state="interrupted"))
        for t in self.tasks.values():
            if t.state == "running" and t.run_id != run_id:
                batch.tasks.append(msgspec.structs.replace(t, state="interrupted"))
        for r in self.runs.values():
            if r.status == "running" and r.run_id != run_id:
                ended = now if r.ended_at is None else r.ended_at
                batch.runs.append(msgspec.structs.replace(r, status="interrupted", ended_at=ended))
        return batch

    # -- reads (StoreBase's required reads, over these rows) ------------------------------------------
    def table(self, kind: str) -> Iterable[Any]:
        tables: dict[str, Iterable[Any]] = {
            "pipelines": self.pipelines.values(),
            "tasks": self.tasks.values(),
            "attempts": self.attempts,
            "events": self.events,
            "artifacts": self.artifacts.values(),
        }
        if kind not in tables:
            raise ValueError(f"unknown row kind {kind!r} (one of {', '.join(tables)})")
        return tables[kind]

    def page(self, kind: str, **filters: Any) -> list[Any]:
        """``StoreBase.page`` over these rows (see ``page_of``)."""
        return page_of(kind, self.table(kind), **filters)

    def run_rows(self) -> list[RunRecord]:
        return sorted(self.runs.values(), key=lambda r: (r.started_at, r.run_id))

    def metric_rows(self, run_id: str | None = None, pipeline_id: str | None = None) -> list[MetricRecord]:
        found = [
            m
            for m in self.metrics.values()
            if (run_id is None or m.run_id == run_id)
            and (pipeline_id is None or m.pipeline_id == pipeline_id)
        ]
        return sorted(found, key=lambda m: (m.run_id, m.pipeline_id, m.name))

    def point_rows(
        self, run_id: str, pipeline_id: str, key: str | None = None, after_step: int = -1, limit: int = 1000
    ) -> list[MetricPoint]:
        return select_points(self.metric_points, run_id, pipeline_id, key, after_step, limit)

    def resource_rows(self, run_id: str | None = None) -> list[ResourceRecord]:
        found = [r for r in self.resources.values() if run_id is None or r.run_id == run_id]
        return sorted(found, key=lambda r: (r.pool, r.resource_id))

    def pipeline_rows(self, ids: Sequence[str]) -> list[PipelineRecord]:
        """The pipelines among ``ids`` that exist, each once, in the order first asked."""
        return [self.pipelines[pid] for pid in dict.fromkeys(ids) if pid in self.pipelines]
