"""The records a run produces: msgspec Structs shared by the runner, every store and every view.

Rows are plain Structs (cheap to build, encode and compare) and carry only facts; application
metrics are a separate, explicit channel (invariant 6). Timestamps are Unix seconds (float).
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = [
    "OK_DECISION",
    "PIPELINE_STATES",
    "STATE_RANK",
    "TERMINAL_STATES",
    "ArtifactRecord",
    "AttemptRecord",
    "Batch",
    "EventRecord",
    "HandoffRecord",
    "LogRecord",
    "MetricPoint",
    "MetricRecord",
    "NoteRecord",
    "PipelineProgress",
    "PipelineRecord",
    "PipelineReset",
    "ResourceRecord",
    "RunRecord",
    "TaskRecord",
]

#: Every state a pipeline row can be in.
PIPELINE_STATES = ("pending", "running", "succeeded", "failed", "interrupted", "canceled")
TERMINAL_STATES = frozenset({"succeeded", "failed"})
#: Merge rank: when two stores hold the same pipeline, the higher rank wins.
STATE_RANK = {"succeeded": 4, "failed": 3, "interrupted": 2, "pending": 1, "canceled": 0}


class RunRecord(msgspec.Struct, kw_only=True, gc=False):
    """One invocation of a runner against a store, with its owner for stale-row detection."""

    run_id: str
    status: str = "running"  # running | completed | interrupted | failed
    label: str = ""
    started_at: float = 0.0
    ended_at: float | None = None
    heartbeat_at: float | None = None
    host: str = ""
    pid: int = 0
    pid_started_at: float | None = None
    python: str = ""
    version: str = ""
    config: dict[str, Any] = {}
    notes: str = ""
    stop_reason: str | None = None
    stats: dict[str, Any] = {}


class NoteRecord(msgspec.Struct, kw_only=True, gc=False):
    """One revision of a run's notes. Revisions count from 1 (the config's ``run.notes``, when
    it says anything); a write names the revision it edited, so a stale edit is refused."""

    run_id: str
    revision: int
    text: str
    author: str = ""
    written_at: float = 0.0


class PipelineRecord(msgspec.Struct, kw_only=True, gc=False):
    """Current state and checkpoint cursor of one pipeline (overwritten in place)."""

    pipeline_id: str
    run_id: str
    name: str
    key: str
    state: str = "pending"
    created_at: float = 0.0
    started_at: float | None = None
    finished_at: float | None = None
    n_tasks_total: int = 0
    cursor: int = 0  # tasks whose artifact is durable (n_tasks_done)
    attempts_total: int = 0
    failed_task: str | None = None
    error_class: str | None = None
    error_type: str | None = None
    error_message: str | None = None
    traceback: str | None = None
    seed_digest: str = ""
    spec_digest: str = ""
    seed_key: str | None = None
    repeat: int = 0
    resume_of: str | None = None
    tags: dict[str, Any] = {}


class TaskRecord(msgspec.Struct, kw_only=True, gc=False):
    """Current state of one task slot of a pipeline (``task_run_id`` = ``pipeline_id:seq``)."""

    task_run_id: str
    pipeline_id: str
    run_id: str
    name: str
    seq: int
    state: str = "running"
    attempts_used: int = 0
    started_at: float | None = None
    ended_at: float | None = None
    duration_ms: float | None = None
    output_artifact_id: str | None = None
    error_class: str | None = None
    error_type: str | None = None
    error_message: str | None = None
    resource: str | None = None


#: the ``decision`` of every successful attempt, one shared dict (never mutated): the SQLite
#: store writes its JSON text encoded once instead of once per attempt row
OK_DECISION: dict[str, Any] = {"retry": False, "reason": "ok", "delay_s": 0.0}


class AttemptRecord(msgspec.Struct, kw_only=True, gc=False):
    """One execution of a task body: append-only, with the retry decision that followed it."""

    run_id: str
    pipeline_id: str
    task_run_id: str
    task_name: str
    seq: int
    attempt: int
    started_at: float
    ended_at: float
    duration_ms: float
    outcome: str  # succeeded | failed | timeout | cancelled
    error_class: str | None = None
    error_type: str | None = None
    error_message: str | None = None
    decision: dict[str, Any] = {}
    leases: list[dict[str, Any]] = []
    metric_failures: int = 0
    attempt_id: int | None = None


class HandoffRecord(msgspec.Struct, kw_only=True, gc=False):
    """One row of a pipeline's control ledger (append-only): the source of truth for resuming a
    pipeline that jumped, where events are only its audit trail.

    ``operation`` is ``forward`` (a task handed off) or ``restart`` (the traversal began again
    from the seed: the rows before it no longer drive recovery). ``to_seq``/``to_task`` are None
    for END. ``entry_*`` name the artifact the destination receives: the source's own input
    (``entry_reused``) or the value the task handed over, stored at ``seq >= n_tasks``.
    """

    pipeline_id: str
    run_id: str
    from_seq: int
    from_task: str
    to_seq: int | None
    to_task: str | None
    entry_seq: int
    entry_artifact_id: str
    entry_reused: bool
    reason: str = ""
    ts: float = 0.0
    operation: str = "forward"
    handoff_id: int | None = None


class EventRecord(msgspec.Struct, kw_only=True, gc=False):
    """One structured event; ``scope`` is run | pipeline | task | resource."""

    ts: float
    kind: str
    scope: str
    run_id: str | None = None
    pipeline_id: str | None = None
    task_run_id: str | None = None
    pool: str | None = None
    resource_id: str | None = None
    data: dict[str, Any] = {}
    event_id: int | None = None


class LogRecord(msgspec.Struct, kw_only=True, gc=False):
    """The log of one attempt (``ctx.log``, Python ``logging`` in the task, ``shell_run`` output),
    stored as one row with the attempt's commit: never a write per line.

    ``lines`` are ``(ts, stream, text)``; ``stream`` is ``log``, a logging level name, ``stdout``
    or ``stderr``. An attempt keeps at most ``run.log_bytes_per_attempt`` bytes of text: the
    first lines are kept, the rest counted in ``dropped_lines`` / ``dropped_bytes``.
    ``log_id`` is assigned by the store (ascending in commit order): the offset a follower
    resumes after.
    """

    run_id: str
    pipeline_id: str
    task_run_id: str
    task_name: str
    seq: int
    attempt: int
    ts: float
    lines: list[tuple[float, str, str]] = []
    dropped_lines: int = 0
    dropped_bytes: int = 0
    log_id: int | None = None


class ArtifactRecord(msgspec.Struct, kw_only=True, gc=False):
    """A task output (or the seed at ``seq=-1``): content-addressed, written when produced.

    ``payload`` is None when the bytes live elsewhere (``blob_ref``) or were never kept
    (summary journal, null backend); ``available`` says whether resume can reuse it.
    """

    artifact_id: str
    pipeline_id: str
    task_name: str
    seq: int
    type_name: str
    codec: str
    digest: str
    size: int
    created_at: float
    payload: bytes | None = None
    is_final: bool = False
    blob_ref: str | None = None

    @property
    def available(self) -> bool:
        return self.payload is not None


class MetricRecord(msgspec.Struct, kw_only=True, gc=False):
    """Latest application value for (run, pipeline or '' for the run, name)."""

    run_id: str
    pipeline_id: str
    name: str
    value: Any
    updated_at: float
    attempt: int = 0


class MetricPoint(msgspec.Struct, kw_only=True, gc=False):
    """One point of an application curve (``ctx.track``); ``op_id`` makes appends idempotent."""

    run_id: str
    pipeline_id: str
    key: str
    value: Any
    step: int
    ts: float
    op_id: str
    attempt: int = 0


class ResourceRecord(msgspec.Struct, kw_only=True, gc=False):
    """Latest known state of one resource in a pool (secrets masked)."""

    run_id: str
    pool: str
    resource_id: str
    kind: str
    state: str
    spec: dict[str, Any] = {}
    stats: dict[str, Any] = {}
    updated_at: float = 0.0


class PipelineProgress(msgspec.Struct, kw_only=True, gc=False):
    """A cursor advance of a pipeline whose full row the store already has.

    Intermediate checkpoints carry this instead of the whole pipeline row: applying it is a
    narrow update (two columns), where a full upsert would rewrite the row and its indexes.
    """

    pipeline_id: str
    cursor: int
    attempts_total: int


class PipelineReset(msgspec.Struct, kw_only=True, gc=False):
    """A pipeline with control flow starting again from its seed: its current rows go.

    A traversal of such a chain writes only the slots it visits, so rows an earlier traversal
    left in a slot the new one skips would be counted as if this one ran them. The store
    deletes the pipeline's task rows and its artifacts at ``seq`` ``start .. slots - 1`` (the
    chain's outputs, ids ``pipeline_id:seq``); the seed (``seq -1``) and the handed-over entries
    (``seq >= slots``, named by ledger rows) stay, as do attempts, events and the ledger.
    """

    pipeline_id: str
    #: the chain's length (``len(template.tasks)``)
    slots: int
    #: the first slot deleted: ``0`` from the seed; a rewind's target keeps the slots before it
    start: int = 0


class Batch:
    """Rows that a store must apply in one transaction (all or nothing).

    Upserts: runs, pipelines (``created_at`` of an existing row is kept), tasks, artifacts,
    metrics, resources. Progress: after the pipeline upserts, set ``cursor`` and
    ``attempts_total`` of an existing pipeline row (an unknown id is ignored). Appends:
    attempts, events, metric points (a point whose ``op_id`` exists is ignored), handoffs
    (``handoff_id`` assigned like ``attempt_id``), task logs (``log_id`` as read back; a store
    that keeps no logs drops them). ``finals_cleared``: pipeline ids whose stored
    artifacts lose their final flag before this batch's artifacts are written (a pipeline with
    control flow keeps exactly one final artifact). ``resets``: applied before this batch's
    tasks and artifacts (the new traversal's rows in the same batch stay); an unknown pipeline
    id is ignored. A checkpoint is a batch; so is a flush of buffered history.
    """

    __slots__ = (
        "artifacts",
        "attempts",
        "events",
        "finals_cleared",
        "handoffs",
        "logs",
        "metric_points",
        "metrics",
        "pipelines",
        "progress",
        "resets",
        "resources",
        "runs",
        "tasks",
    )

    def __init__(self) -> None:
        self.runs: list[RunRecord] = []
        self.pipelines: list[PipelineRecord] = []
        #: applied after ``pipelines``: cursor advances of rows the store already holds
        self.progress: list[PipelineProgress] = []
        self.tasks: list[TaskRecord] = []
        self.artifacts: list[ArtifactRecord] = []
        self.attempts: list[AttemptRecord] = []
        self.events: list[EventRecord] = []
        self.metrics: list[MetricRecord] = []
        self.metric_points: list[MetricPoint] = []
        self.resources: list[ResourceRecord] = []
        self.handoffs: list[HandoffRecord] = []
        #: attempts' logs, one row per attempt that wrote any (see ``LogRecord``)
        self.logs: list[LogRecord] = []
        self.finals_cleared: list[str] = []
        #: pipelines with control flow that start again from the seed (see ``PipelineReset``)
        self.resets: list[PipelineReset] = []

    def __len__(self) -> int:
        return (
            len(self.runs)
            + len(self.pipelines)
            + len(self.progress)
            + len(self.tasks)
            + len(self.artifacts)
            + len(self.attempts)
            + len(self.events)
            + len(self.metrics)
            + len(self.metric_points)
            + len(self.resources)
            + len(self.handoffs)
            + len(self.logs)
            + len(self.finals_cleared)
            + len(self.resets)
        )

    def extend(self, other: Batch) -> None:
        for name in self.__slots__:
            getattr(self, name).extend(getattr(other, name))
