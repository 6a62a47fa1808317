"""Folding pipeline rows of several stores by ``pipeline_id`` into one ``MergedReport``.

The same pipeline can sit in several stores (a shard count changed, a store was copied, the
same file was named twice). Of its rows, one wins (``state_rank``, then the later finish, then
the store named first), and every count is recomputed from the winners, never summed from the
stores' own totals, so ``report a.db a.db`` shows exactly what ``report a.db`` shows. Only
``source_events_total`` stays a raw sum: events do not hang off pipeline rows, so there is
nothing to fold them by.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

import msgspec

from pyattacker.model import PipelineRecord
from pyattacker.plugins.store_stats import duration_summary

__all__ = ["Folded", "MergedReport", "SourceInfo", "add_operations", "slim_row", "state_rank", "wins"]

_RANK = {"succeeded": 4, "failed": 3, "interrupted": 2, "pending": 1, "canceled": 0}
#: one shared string per known state: a folded entry does not keep a copy per pipeline
_STATES = {state: state for state in (*_RANK, "running")}


class Folded(NamedTuple):
    """What the fold keeps of a pipeline's winning row. Five values instead of a whole
    ``PipelineRecord``: a report over a million pipelines holds one of these per pipeline, and
    whole rows only for the failed ones it lists."""

    state: str
    started_at: float | None
    finished_at: float | None
    attempts_total: int
    source: int


_new_folded = tuple.__new__  # builds a Folded without the Python-level __new__ (one per row)


def state_rank(state: str) -> int:
    """Merge rank of a pipeline state; unknown states (``running``) rank below everything."""
    return _RANK.get(state, -1)


def _wins(new: Folded, old: Folded) -> bool:
    a, b = state_rank(new.state), state_rank(old.state)
    if a != b:
        return a > b
    new_end, old_end = new.finished_at or 0.0, old.finished_at or 0.0
    if new_end != old_end:
        return new_end > old_end
    # a full tie goes to the store named first, so the result does not depend on the order
    # in which stores are folded (a sharded run folds each shard's store as soon as it ends)
    return new.source < old.source


def wins(new: PipelineRecord, old: PipelineRecord) -> bool:
    """Whether ``new`` replaces ``old``: better state, or same rank and strictly later finish."""
    return _wins(_entry(new, 0), _entry(old, 0))


def _entry(row: PipelineRecord, source: int) -> Folded:
    state = _STATES.get(row.state, row.state)
    return _new_folded(Folded, (state, row.started_at, row.finished_at, row.attempts_total, source))


class SourceInfo(msgspec.Struct, kw_only=True):
    """One store named on the command line and the run shown from it."""

    store: str
    run_id: str | None
    run_selected: str  # latest | explicit | all | empty
    run_status: str | None = None
    run_label: str = ""
    started_at: float | None = None
    ended_at: float | None = None
    rows: int = 0
    events_total: int = 0
    description: str = ""
    stop_reason: str | None = None


class MergedReport:
    """Folded pipeline rows of several stores plus everything recomputed from them."""

    def __init__(self) -> None:
        #: pipeline id -> its winning row, folded to five values
        self.rows: dict[str, Folded] = {}
        #: whole rows (traceback dropped) of the failed winners: the report lists their errors
        self.details: dict[str, PipelineRecord] = {}
        self.sources: list[SourceInfo] = []
        self.duplicates = 0
        self.task_counts: dict[str, dict[str, int]] = {}
        self.source_events_total = 0
        #: handoffs the selected runs committed (a sum over the stores, like the events)
        self.handoffs_total = 0
        self.handoffs_by_operation: dict[str, int] = {}
        self.repair_failures: dict[str, dict[str, Any]] = {}
        self.run_metrics: dict[str, dict[str, Any]] = {}
        self.pipeline_metrics: dict[str, dict[str, Any]] = {}
        #: ids of every row added as failed: a failed winner is among them (the report lists
        #: failures, so nothing has to walk every pipeline to find them)
        self.failed_seen: set[str] = set()

    # -- folding -------------------------------------------------------------------------------
    def add(self, row: PipelineRecord, source: int) -> None:
        """Fold a whole row (its details are kept only if it is a failed winner)."""
        self._fold(row.pipeline_id, _entry(row, source), row)

    def add_summary(
        self, pid: str, state: str, started: float | None, finished: float | None, attempts: int, source: int
    ) -> None:
        """Fold a row known by its five summary columns (``Store.pipeline_summaries``)."""
        entry = _new_folded(Folded, (_STATES.get(state, state), started, finished, attempts, source))
        self._fold(pid, entry, None)

    def add_summaries(
        self, summaries: Iterable[tuple[str, str, float | None, float | None, int]], source: int
    ) -> int:
        """``add_summary`` for every row, with the common case (an id not seen yet) inlined: a
        sharded run's report folds every pipeline once, while the run's last shard is ending.
        Returns the number of rows folded."""
        rows, failed_seen, states, fold = self.rows, self.failed_seen, _STATES, self._fold
        n = 0
        for pid, state, started, finished, attempts in summaries:
            n += 1
            entry = _new_folded(Folded, (states.get(state, state), started, finished, attempts, source))
            if pid in rows:
                fold(pid, entry, None)
                continue
            rows[pid] = entry
            if state == "failed":
                failed_seen.add(pid)
        return n

    def _fold(self, pid: str, entry: Folded, row: PipelineRecord | None) -> None:
        if entry.state == "failed":
            self.failed_seen.add(pid)
        old = self.rows.get(pid)
        if old is not None:
            self.duplicates += 1
            if not _wins(entry, old):
                return
            self.details.pop(pid, None)  # the details of the row that lost
        self.rows[pid] = entry
        if row is not None and entry.state == "failed":
            self.details[pid] = slim_row(row)

    def origin(self, pid: str) -> int | None:
        """Index of the source whose row won for ``pid`` (None: not folded)."""
        entry = self.rows.get(pid)
        return None if entry is None else entry.source

    def failed_winners(self, source: int | None = None) -> list[str]:
        """Ids whose winning row is failed (of ``source`` only, when given)."""
        out = []
        for pid in self.failed_seen:
            entry = self.rows[pid]
            if entry.state == "failed" and (source is None or entry.source == source):
                out.append(pid)
        return out

    # -- derived numbers -----------------------------------------------------------------------
    @property
    def run_ids(self) -> list[str]:
        return [s.run_id for s in self.sources if s.run_id is not None]

    @property
    def attempts_total(self) -> int:
        return sum(e.attempts_total for e in self.rows.values())

    def _states_and_durations(self) -> tuple[dict[str, int], Sequence[float]]:
        """Pipelines per state, and the sorted durations (ms) of those with a start and an end."""
        by_state: dict[str, int] = {}
        durations: list[float] = []
        for state, started, finished, _attempts, _source in self.rows.values():
            by_state[state] = by_state.get(state, 0) + 1
            if started is not None and finished is not None:
                durations.append((finished - started) * 1000.0)
        durations.sort()
        return by_state, durations

    def stats(self) -> dict[str, Any]:
        by_state, durations = self._states_and_durations()
        return {
            "pipelines": {
                "total": sum(by_state.values()),
                "by_state": dict(sorted(by_state.items())),
                "duration_ms": duration_summary(durations),
            },
            "tasks": {"by_name": {n: dict(sorted(s.items())) for n, s in sorted(self.task_counts.items())}},
            "attempts_total": self.attempts_total,
            "source_events_total": self.source_events_total,
            "handoffs_total": self.handoffs_total,
            "handoffs_by_operation": dict(sorted(self.handoffs_by_operation.items())),
            "duplicates": self.duplicates,
        }

    def failed_rows(self) -> list[PipelineRecord]:
        """Failed pipelines (whole rows), most recently finished first."""
        failed = [self.details[pid] for pid in self.failed_winners()]
        failed.sort(key=lambda r: (-(r.finished_at or 0.0), r.pipeline_id))
        return failed

    def errors(self, limit: int | None = None) -> list[dict[str, Any]]:
        rows = self.failed_rows()
        if limit is not None:
            rows = rows[: max(0, limit)]
        return [
            {
                "pipeline_id": r.pipeline_id,
                "key": r.key,
                "seed_key": r.seed_key,
                "name": r.name,
                "run_id": r.run_id,
                "store": self._store_of(r.pipeline_id),
                "failed_task": r.failed_task,
                "error_class": r.error_class,
                "error_type": r.error_type,
                "error_message": r.error_message,
                "finished_at": r.finished_at,
            }
            for r in rows
        ]

    def _store_of(self, pid: str) -> str:
        return self.sources[self.rows[pid].source].store

    def metrics(self) -> dict[str, Any]:
        return {"run": self.run_metrics, "pipelines": dict(sorted(self.pipeline_metrics.items()))}

    def to_dict(self, errors: int | None = None) -> dict[str, Any]:
        """The whole report as one JSON-ready object (``report --json``)."""
        out: dict[str, Any] = {"schema_version": 1, "sources": [msgspec.to_builtins(s) for s in self.sources]}
        out["run_ids"] = self.run_ids
        out.update(self.stats())
        out["failed_total"] = len(self.failed_winners())
        out["errors"] = self.errors(errors)
        out["repair_failures"] = {
            "count": len(self.repair_failures),
            "pipelines": [self.repair_failures[k] for k in sorted(self.repair_failures)],
        }
        out["metrics"] = self.metrics()
        return out


def slim_row(row: PipelineRecord) -> PipelineRecord:
    """Drop the traceback: a report holds every row in memory and never prints it."""
    return msgspec.structs.replace(row, traceback=None) if row.traceback else row


def add_operations(into: dict[str, int], more: dict[str, int]) -> None:
    """Add handoff counts by operation (``handoffs_by_operation`` of another store or shard)."""
    for op, n in more.items():
        into[op] = into.get(op, 0) + n
