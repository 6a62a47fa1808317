"""Segments (what one commit writes), and the rows they replay into (a ``RowSet``).

A ``Segment`` is a commit batch with its ids assigned, encoded with msgspec-msgpack: the writer
applies the bytes it wrote, a reader the bytes it read, so both hold the same rows, and no row
shares anything with the caller's batch (a runner may reuse its record objects).
"""

from __future__ import annotations

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
from pyattacker.plugins.api import RowSet

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


class Rows(RowSet):
    """Every row of a store, built by applying segments in order (``RowSet``'s rules)."""

    def interrupted(self, run_id: str, now: float) -> tuple[Segment, int]:
        """The segment marking every ``running`` row not of ``run_id`` interrupted, and how many
        pipelines it changes."""
        stale = self.stale_running(run_id, now)
        seg = Segment(runs=stale.runs, pipelines=stale.pipelines, tasks=stale.tasks)
        return seg, len(seg.pipelines)
