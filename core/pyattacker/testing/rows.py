"""Row builders for store tests: each makes a valid record with small defaults, any field
overridable by keyword (``pipeline("p1", state="failed")``)."""

from __future__ import annotations

from typing import Any

from pyattacker.model import (
    ArtifactRecord,
    AttemptRecord,
    Batch,
    EventRecord,
    LogRecord,
    MetricPoint,
    MetricRecord,
    PipelineRecord,
    ResourceRecord,
    RunRecord,
    TaskRecord,
)
from pyattacker.plugins.api import Store

__all__ = [
    "artifact",
    "attempt",
    "batch_of",
    "commit",
    "event",
    "log_row",
    "metric",
    "pipeline",
    "point",
    "resource",
    "run",
    "task",
]


def run(run_id: str = "r1", **kw: Any) -> RunRecord:
    return RunRecord(run_id=run_id, started_at=kw.pop("started_at", 1.0), **kw)


def pipeline(pid: str, run_id: str = "r1", **kw: Any) -> PipelineRecord:
    kw.setdefault("created_at", 10.0)
    return PipelineRecord(pipeline_id=pid, run_id=run_id, name="pipe", key=f"k-{pid}", **kw)


def task(pid: str, seq: int, run_id: str = "r1", **kw: Any) -> TaskRecord:
    return TaskRecord(
        task_run_id=f"{pid}:{seq}", pipeline_id=pid, run_id=run_id, name=f"t{seq}", seq=seq, **kw
    )


def artifact(pid: str, seq: int, payload: bytes | None = b"data", **kw: Any) -> ArtifactRecord:
    return ArtifactRecord(
        artifact_id=f"{pid}:{seq}",
        pipeline_id=pid,
        task_name=f"t{seq}",
        seq=seq,
        type_name="bytes",
        codec="bytes",
        digest=kw.pop("digest", "00" * 16),
        size=len(payload or b""),
        created_at=kw.pop("created_at", 5.0),
        payload=payload,
        **kw,
    )


def attempt(pid: str, seq: int = 0, run_id: str = "r1", n: int = 1, **kw: Any) -> AttemptRecord:
    return AttemptRecord(
        run_id=run_id,
        pipeline_id=pid,
        task_run_id=f"{pid}:{seq}",
        task_name=f"t{seq}",
        seq=seq,
        attempt=n,
        started_at=1.0,
        ended_at=2.0,
        duration_ms=1000.0,
        outcome=kw.pop("outcome", "succeeded"),
        **kw,
    )


def event(
    kind: str = "pipeline.started", run_id: str | None = "r1", pid: str | None = None, **kw: Any
) -> EventRecord:
    return EventRecord(
        ts=kw.pop("ts", 3.0), kind=kind, scope="pipeline", run_id=run_id, pipeline_id=pid, **kw
    )


def metric(name: str, value: Any, run_id: str = "r1", pid: str = "", **kw: Any) -> MetricRecord:
    return MetricRecord(
        run_id=run_id, pipeline_id=pid, name=name, value=value, updated_at=kw.pop("updated_at", 1.0)
    )


def point(
    op_id: str, step: int, value: Any = 1.0, key: str = "loss", run_id: str = "r1", pid: str = "p1"
) -> MetricPoint:
    return MetricPoint(run_id=run_id, pipeline_id=pid, key=key, value=value, step=step, ts=1.0, op_id=op_id)


def resource(pool: str, rid: str, run_id: str = "r1", **kw: Any) -> ResourceRecord:
    return ResourceRecord(
        run_id=run_id, pool=pool, resource_id=rid, kind="http", state=kw.pop("state", "ready"), **kw
    )


def batch_of(**rows: list[Any]) -> Batch:
    b = Batch()
    for name, items in rows.items():
        getattr(b, name).extend(items)
    return b


def commit(store: Store, **rows: list[Any]) -> Batch:
    b = batch_of(**rows)
    store.commit(b)
    return b


def log_row(pid: str, seq: int = 0, run_id: str = "r1", n: int = 1, **kw: Any) -> LogRecord:
    """An attempt's log with ``lines`` (default: one line of each stream)."""
    return LogRecord(
        run_id=run_id,
        pipeline_id=pid,
        task_run_id=f"{pid}:{seq}",
        task_name=kw.pop("task_name", f"t{seq}"),
        seq=seq,
        attempt=n,
        ts=kw.pop("ts", 1.0),
        lines=kw.pop("lines", [(1.0, "log", "hello"), (1.5, "stderr", "<b>é</b>")]),
        **kw,
    )
