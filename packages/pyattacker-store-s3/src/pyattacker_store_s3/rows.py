"""Segments (what one commit writes) and the rows they replay into.

A ``Segment`` is a commit batch with its ids assigned, encoded with msgspec-msgpack: the writer
applies the bytes it wrote, a reader the bytes it read, so both hold the same rows, and no row
shares anything with the caller's batch (a runner may reuse its record objects).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

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

__all__ = ["FORMAT", "Rows", "Segment", "decode_segments", "encode_segment", "segment_of"]

FORMAT = 1


class Segment(msgspec.Struct, kw_only=True):
    """One commit: upserts, progress, appends (ids assigned) and cleared finals, in apply order."""

    format: int = FORMAT
    writer: str = ""  # the lease token of the writer that wrote it
    runs: list[RunRecord] = []
    pipelines: list[PipelineRecord] = []
    progress: list[PipelineProgress] = []
    tasks: list[TaskRecord] = []
    finals_cleared: list[str] = []
    artifacts: list[ArtifactRecord] = []
    attempts: list[AttemptRecord] = []
    events: list[EventRecord] = []
    metrics: list[MetricRecord] = []
    metric_points: list[MetricPoint] = []
    resources: list[ResourceRecord] = []


encode_segment = msgspec.msgpack.Encoder().encode
#: a segment object: the parts one PUT carried, applied in order
decode_segments = msgspec.msgpack.Decoder(list[Segment]).decode


def segment_of(batch: Batch, writer: str) -> Segment:
    """The segment of a batch whose appended rows already carry their ids."""
    return Segment(
        writer=writer,
        runs=batch.runs,
        pipelines=batch.pipelines,
        progress=batch.progress,
        tasks=batch.tasks,
        finals_cleared=list(batch.finals_cleared),
        artifacts=batch.artifacts,
        attempts=batch.attempts,
        events=batch.events,
        metrics=batch.metrics,
        metric_points=batch.metric_points,
        resources=batch.resources,
    )


class Rows:
    """Every row of a store, keyed for upserts, built by applying segments in order."""

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

    def apply(self, seg: Segment) -> None:
        """Apply one segment (the order of ``Batch``'s docstring)."""
        for run in seg.runs:
            self.runs[run.run_id] = run
        for p in seg.pipelines:
            old = self.pipelines.get(p.pipeline_id)
            self.pipelines[p.pipeline_id] = (
                p if old is None else msgspec.structs.replace(p, created_at=old.created_at)
            )
        for prog in seg.progress:
            old = self.pipelines.get(prog.pipeline_id)
            if old is not None:  # an unknown id is ignored
                self.pipelines[prog.pipeline_id] = msgspec.structs.replace(
                    old, cursor=prog.cursor, attempts_total=prog.attempts_total
                )
        for t in seg.tasks:
            self.tasks[t.task_run_id] = t
        for pid in seg.finals_cleared:
            for aid in self.finals.pop(pid, ()):
                a = self.artifacts.get(aid)
                if a is not None and a.is_final:
                    self.artifacts[aid] = msgspec.structs.replace(a, is_final=False)
        for a in seg.artifacts:
            self.artifacts[a.artifact_id] = a
            if a.is_final:
                self.finals.setdefault(a.pipeline_id, set()).add(a.artifact_id)
        for attempt in seg.attempts:
            self.attempts.append(attempt)
            self.next_attempt_id = max(self.next_attempt_id, (attempt.attempt_id or 0) + 1)
        for event in seg.events:
            self.events.append(event)
            self.next_event_id = max(self.next_event_id, (event.event_id or 0) + 1)
        for m in seg.metrics:
            self.metrics[(m.run_id, m.pipeline_id, m.name)] = m
        for point in seg.metric_points:
            if point.op_id not in self.op_ids:  # appends are idempotent by op_id
                self.op_ids.add(point.op_id)
                self.metric_points.append(point)
        for r in seg.resources:
            self.resources[(r.run_id, r.pool, r.resource_id)] = r

    def table(self, kind: str) -> Iterable[Any]:
        return {
            "pipelines": self.pipelines.values,
            "tasks": self.tasks.values,
            "attempts": lambda: self.attempts,
            "events": lambda: self.events,
            "artifacts": self.artifacts.values,
        }[kind]()

    def interrupted(self, run_id: str, now: float) -> tuple[Segment, int]:
        """The segment marking every ``running`` row not of ``run_id`` interrupted, and how many
        pipelines it changes."""
        seg = Segment()
        for p in self.pipelines.values():
            if p.state == "running" and p.run_id != run_id:
                seg.pipelines.append(msgspec.structs.replace(p, state="interrupted"))
        for t in self.tasks.values():
            if t.state == "running" and t.run_id != run_id:
                seg.tasks.append(msgspec.structs.replace(t, state="interrupted"))
        for r in self.runs.values():
            if r.status == "running" and r.run_id != run_id:
                ended = now if r.ended_at is None else r.ended_at
                seg.runs.append(msgspec.structs.replace(r, status="interrupted", ended_at=ended))
        return seg, len(seg.pipelines)
