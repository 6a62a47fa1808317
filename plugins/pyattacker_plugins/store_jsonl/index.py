"""The in-memory index a JSONL store rebuilds from its journal.

Latest rows for upserted kinds, append lists for history, and artifact metadata with the
journal offset of each line so payloads are read back lazily. Sorted key lists for paging are
rebuilt only when a new key appears, so walking a big store page by page stays cheap.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from pyattacker.model import (
    ArtifactRecord,
    AttemptRecord,
    EventRecord,
    HandoffRecord,
    LogRecord,
    MetricPoint,
    MetricRecord,
    PipelineRecord,
    PipelineReset,
    ResourceRecord,
    RunRecord,
    TaskRecord,
)
from pyattacker.plugins.api import PAGE_KINDS

from .journal import Entry

__all__ = ["Index"]


class _Sorted:
    """Keys of one upserted kind in page order; rebuilt lazily after a key changes."""

    def __init__(self, fields: tuple[str, ...]) -> None:
        self._fields = fields
        self._keys: list[tuple[Any, ...]] | None = []

    def key_of(self, row: Any) -> tuple[Any, ...]:
        return tuple(getattr(row, f) for f in self._fields)

    def invalidate(self) -> None:
        self._keys = None

    def keys(self, rows: Iterable[Any]) -> list[tuple[Any, ...]]:
        if self._keys is None:
            self._keys = sorted(self.key_of(r) for r in rows)
        return self._keys


class _Appended:
    """An append-only history kind (ids are positions + 1) with per-run/pipeline positions."""

    def __init__(self) -> None:
        self.rows: list[Any] = []
        self.by_run: dict[str | None, list[int]] = {}
        self.by_pipeline: dict[str | None, list[int]] = {}

    def add(self, row: Any) -> None:
        pos = len(self.rows)
        self.rows.append(row)
        self.by_run.setdefault(row.run_id, []).append(pos)
        self.by_pipeline.setdefault(row.pipeline_id, []).append(pos)

    def page(self, run_id: str | None, pipeline_id: str | None, after: int, limit: int) -> list[Any]:
        positions: Iterable[int]
        if pipeline_id is not None:
            candidates = self.by_pipeline.get(pipeline_id, [])
            positions = candidates[bisect_right(candidates, after - 1) :]
        elif run_id is not None:
            candidates = self.by_run.get(run_id, [])
            positions = candidates[bisect_right(candidates, after - 1) :]
        else:
            positions = range(after, len(self.rows))
        out = []
        for pos in positions:
            row = self.rows[pos]
            if run_id is not None and row.run_id != run_id:
                continue
            out.append(row)
            if len(out) >= limit:
                break
        return out


class Index:
    """Every committed row, as the journal says after the last commit marker."""

    def __init__(self) -> None:
        self.runs: dict[str, RunRecord] = {}
        self.pipelines: dict[str, PipelineRecord] = {}
        self.tasks: dict[str, TaskRecord] = {}
        self.artifacts: dict[str, ArtifactRecord] = {}
        self.artifact_lines: dict[str, tuple[int, int]] = {}
        self.attempts = _Appended()
        self.events = _Appended()
        self.metrics: dict[tuple[str, str, str], MetricRecord] = {}
        self.points: list[MetricPoint] = []
        self.point_ops: set[str] = set()
        self.resources: dict[tuple[str, str, str], ResourceRecord] = {}
        #: pipeline id -> its control ledger (handoff ids count across pipelines)
        self.ledgers: dict[str, list[HandoffRecord]] = {}
        self.handoffs_total = 0
        #: attempts' logs in ``log_id`` order (log id n at index n - 1)
        self.logs: list[LogRecord] = []
        #: run id -> its ``forward`` ledger rows (what a live view's refresh counts)
        self.jumps_by_run: dict[str, dict[str, int]] = {}
        #: pipeline id -> ids of its artifacts marked final (what an ``unfinal`` line unmarks)
        self.finals: dict[str, set[str]] = {}
        # page order plus the row's id last (the id is the dict key the row is stored under)
        self._order = {
            "pipelines": _Sorted(PAGE_KINDS["pipelines"]),
            "tasks": _Sorted((*PAGE_KINDS["tasks"], "task_run_id")),
            "artifacts": _Sorted((*PAGE_KINDS["artifacts"], "artifact_id")),
        }
        self._apply: dict[str, Callable[[Entry], None]] = {
            "run": self._run,
            "pipeline": self._pipeline,
            "progress": self._progress,
            "task": self._task,
            "artifact": self._artifact,
            "attempt": self._attempt,
            "event": self._event,
            "metric": self._metric,
            "point": self._point,
            "resource": self._resource,
            "handoff": self._handoff,
            "log": self._log,
            "unfinal": self._unfinal,
            "reset": self._reset,
        }

    # -- applying committed entries ----------------------------------------------------------
    def apply(self, entries: Iterable[Entry]) -> None:
        table = self._apply
        for entry in entries:
            table[entry.tag](entry)

    def _run(self, e: Entry) -> None:
        self.runs[e.record.run_id] = e.record

    def _pipeline(self, e: Entry) -> None:
        row: PipelineRecord = e.record
        old = self.pipelines.get(row.pipeline_id)
        if old is None:
            self._order["pipelines"].invalidate()
        else:
            row.created_at = old.created_at
        self.pipelines[row.pipeline_id] = row

    def _progress(self, e: Entry) -> None:
        current = self.pipelines.get(e.record.pipeline_id)
        if current is not None:
            current.cursor = e.record.cursor
            current.attempts_total = e.record.attempts_total

    def _keyed(self, kind: str, rows: dict[str, Any], key: str, row: Any) -> None:
        old = rows.get(key)
        order = self._order[kind]
        if old is None or order.key_of(old) != order.key_of(row):
            order.invalidate()
        rows[key] = row

    def _task(self, e: Entry) -> None:
        self._keyed("tasks", self.tasks, e.record.task_run_id, e.record)

    def _artifact(self, e: Entry) -> None:
        row: ArtifactRecord = e.record
        self._keyed("artifacts", self.artifacts, row.artifact_id, row)
        if row.is_final:
            self.finals.setdefault(row.pipeline_id, set()).add(row.artifact_id)
        elif row.pipeline_id in self.finals:
            self.finals[row.pipeline_id].discard(row.artifact_id)
        if e.has_payload:
            self.artifact_lines[row.artifact_id] = (e.offset, e.length)
        else:
            self.artifact_lines.pop(row.artifact_id, None)

    def _attempt(self, e: Entry) -> None:
        row: AttemptRecord = e.record
        row.attempt_id = len(self.attempts.rows) + 1
        self.attempts.add(row)

    def _event(self, e: Entry) -> None:
        row: EventRecord = e.record
        row.event_id = len(self.events.rows) + 1
        self.events.add(row)

    def _handoff(self, e: Entry) -> None:
        row: HandoffRecord = e.record
        self.handoffs_total += 1
        row.handoff_id = self.handoffs_total
        self.ledgers.setdefault(row.pipeline_id, []).append(row)
        if row.operation != "restart":
            ops = self.jumps_by_run.setdefault(row.run_id, {})
            ops[row.operation] = ops.get(row.operation, 0) + 1

    def _log(self, e: Entry) -> None:
        row: LogRecord = e.record
        row.log_id = len(self.logs) + 1
        self.logs.append(row)

    def _unfinal(self, e: Entry) -> None:
        for artifact_id in self.finals.pop(e.record.pipeline_id, ()):
            row = self.artifacts.get(artifact_id)
            if row is not None:
                row.is_final = False

    def _reset(self, e: Entry) -> None:
        """A pipeline starting again from its seed: its task rows and chain outputs go."""
        reset: PipelineReset = e.record
        pid = reset.pipeline_id
        finals = self.finals.get(pid)
        removed = False
        for seq in range(reset.start, reset.slots):
            slot = f"{pid}:{seq}"
            removed = self.tasks.pop(slot, None) is not None or removed
            if self.artifacts.pop(slot, None) is not None:
                removed = True
                self.artifact_lines.pop(slot, None)
                if finals is not None:
                    finals.discard(slot)
        if removed:  # the page order drops the keys
            self._order["tasks"].invalidate()
            self._order["artifacts"].invalidate()

    def _metric(self, e: Entry) -> None:
        m: MetricRecord = e.record
        self.metrics[(m.run_id, m.pipeline_id, m.name)] = m

    def _point(self, e: Entry) -> None:
        if e.record.op_id not in self.point_ops:
            self.point_ops.add(e.record.op_id)
            self.points.append(e.record)

    def _resource(self, e: Entry) -> None:
        r: ResourceRecord = e.record
        self.resources[(r.run_id, r.pool, r.resource_id)] = r

    def keyed_rows(self, kind: str) -> dict[str, Any]:
        if kind == "pipelines":
            return self.pipelines
        if kind == "tasks":
            return self.tasks
        return self.artifacts

    # -- paging --------------------------------------------------------------------------------
    def page_keyed(
        self,
        kind: str,
        filters: dict[str, Any],
        after: tuple[Any, ...] | None,
        limit: int,
    ) -> list[Any]:
        """Rows of an upserted kind in key order strictly after ``after``, filtered."""
        rows: dict[str, Any] = self.keyed_rows(kind)
        keys = self._order[kind].keys(rows.values())
        if after is not None and len(after) < len(keys[0] if keys else after):
            after = (*after, "\U0010ffff")  # strictly after every id sharing the page key
        start = 0 if after is None else bisect_right(keys, tuple(after))
        prefix = filters.get("pipeline_id") if kind != "pipelines" else None
        if prefix is not None:
            start = max(start, bisect_left(keys, (prefix,)))
        out = []
        for i in range(start, len(keys)):
            key = keys[i]
            if prefix is not None and key[0] != prefix:
                break
            row = rows[key[-1]]
            if all(getattr(row, f) == v for f, v in filters.items()):
                out.append(row)
                if len(out) >= limit:
                    break
        return out


def copy(row: Any) -> Any:
    """A shallow copy, so callers never hold (or mutate) the index's own rows."""
    return msgspec.structs.replace(row)
