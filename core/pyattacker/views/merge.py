"""One coherent view of several stores (shards, or copies of one store).

The same pipeline can sit in several stores (a shard count changed, a store was copied, the
same file was named twice). Rows are folded by ``pipeline_id`` and every count is recomputed
from the surviving rows, never summed from the stores' own totals, so ``report a.db a.db``
shows exactly what ``report a.db`` shows. Only ``source_events_total`` stays a raw sum: events
do not hang off pipeline rows, so there is nothing to fold them by.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Sequence
from itertools import chain
from typing import Any, NamedTuple

import msgspec

from pyattacker.errors import ConfigError
from pyattacker.model import PipelineRecord, RunRecord
from pyattacker.shard.plan import parse_shard, shard_index
from pyattacker.store.base import Store, iter_rows
from pyattacker.views.common import RunChoice, choose_run, read_only_store
from pyattacker.views.stats import count_handoffs, count_rows, duration_summary

__all__ = [
    "Folded",
    "MergedReport",
    "ShardPart",
    "ShardsReport",
    "SourceInfo",
    "StoreMerger",
    "StoreReport",
    "merge_stores",
    "report_stores",
    "shard_part",
    "shard_stores",
    "shard_task_counts",
    "shards_report",
    "state_rank",
    "wins",
]

_RANK = {"succeeded": 4, "failed": 3, "interrupted": 2, "pending": 1, "canceled": 0}
#: one shared string per known state: a folded entry does not keep a copy per pipeline
_STATES = {state: state for state in (*_RANK, "running")}
REPAIR_FAILED = "pipeline.terminal_repair_failed"
#: above this many failed rows per store, repair failures are found by one scan of the events
_PER_PIPELINE_LOOKUPS = 2000


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
            self.details[pid] = _slim(row)

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


class StoreReport(MergedReport):
    """The report of ONE store from its aggregates, without folding every pipeline row.

    One store holds each pipeline once, so nothing needs folding: the store counts states,
    sorts the durations and sums the attempts (``pipeline_totals``), and whole rows are read
    for the failed pipelines only. The output equals ``merge_stores([store])``; it keeps 8
    bytes per pipeline (the sorted durations, for the percentiles) where the fold kept about
    0.4 KB. ``rows`` stays empty: use ``stats()``, or ``merge_stores`` for the per-pipeline fold.
    """

    def __init__(self, by_state: dict[str, int], durations: Sequence[float], attempts: int) -> None:
        super().__init__()
        self._by_state = by_state
        self._durations = durations
        self._attempts = attempts

    def origin(self, pid: str) -> int | None:
        """0 for a failed pipeline of the run selection (the only ones known by id here)."""
        return 0 if pid in self.details else None

    def failed_winners(self, source: int | None = None) -> list[str]:
        return list(self.details) if source in (None, 0) else []

    def _store_of(self, pid: str) -> str:
        return self.sources[0].store

    @property
    def attempts_total(self) -> int:
        return self._attempts

    def _states_and_durations(self) -> tuple[dict[str, int], Sequence[float]]:
        return self._by_state, self._durations


class ShardsReport(StoreReport):
    """The report of the stores of one sharded run, combined from each store's aggregates.

    Each store holds only the pipelines of its own shard (``shard_part`` checks every key), so
    no pipeline is in two of them and nothing needs folding: counts and attempts add up, the
    sorted durations merge, and each failed pipeline's store is the one it was read from. The
    output equals ``merge_stores`` over the same stores, in about 8 bytes per pipeline instead of
    the fold's 0.2-0.4 KB (a million-pipeline run's merged report no longer holds a million
    entries).
    """

    def __init__(self, parts: Sequence[StoreReport]) -> None:
        by_state: dict[str, int] = {}
        for part in parts:
            for state, n in part._by_state.items():
                by_state[state] = by_state.get(state, 0) + n
        durations = array("d", sorted(chain.from_iterable(part._durations for part in parts)))
        super().__init__(by_state, durations, sum(part._attempts for part in parts))
        self._origin: dict[str, int] = {}
        for index, part in enumerate(parts):
            self.sources.append(part.sources[0])
            self.source_events_total += part.source_events_total
            self.handoffs_total += part.handoffs_total
            for pid, row in part.details.items():
                self.details[pid] = row
                self._origin[pid] = index
            for name, states in part.task_counts.items():
                into = self.task_counts.setdefault(name, {})
                for state, n in states.items():
                    into[state] = into.get(state, 0) + n
            self.repair_failures.update(part.repair_failures)
            for run, values in part.run_metrics.items():
                self.run_metrics.setdefault(run, {}).update(values)
            self.pipeline_metrics.update(part.pipeline_metrics)

    def origin(self, pid: str) -> int | None:
        return self._origin.get(pid)

    def failed_winners(self, source: int | None = None) -> list[str]:
        return [pid for pid, index in self._origin.items() if source is None or index == source]

    def _store_of(self, pid: str) -> str:
        return self.sources[self._origin[pid]].store


#: ``pipeline_summaries``: ``(pipeline_id, state, started_at, finished_at, attempts_total)``
_Summary = tuple[str, str, float | None, float | None, int]
#: ``task_counts``: ``{task name: {state: count}}``
TaskCounts = dict[str, dict[str, int]]
#: ``pipeline_totals``: ``({state: count}, sorted durations in ms, attempts)``
_Totals = tuple[dict[str, int], Sequence[float], int]


class ShardPart(NamedTuple):
    """One shard store's aggregates, and which shard (``shard`` of ``shards``) it provably holds."""

    shard: int
    shards: int
    report: StoreReport


def report_stores(locations: Sequence[str], run_id: str | None = None) -> MergedReport:
    """What ``report`` shows: ``merge_stores``; or, with the same output, a ``StoreReport`` for one
    store that can aggregate in SQL (``pipeline_totals``, ``task_counts``), and a ``ShardsReport``
    for the stores of distinct shards of one sharded run (``shard_part``)."""
    if len(locations) == 1:
        single = _store_report(locations[0], run_id)
        if single is not None:
            return single
    elif len(set(locations)) == len(locations):
        parts = []
        for location in locations:
            part = shard_part(location, run_id)
            if part is None:
                break
            parts.append(part)
        else:
            combined = shards_report(parts)
            if combined is not None:
                return combined
    return merge_stores(locations, run_id)


def shard_part(
    location: str, run_id: str | None, *, task_counts: bool = True, written_by: str | None = None
) -> ShardPart | None:
    """The aggregates of a shard store whose shown pipelines are provably of its shard: every run
    in it says the same ``meta.shard`` ``I/N`` (what ``--shard I/N`` records), and the key of every
    pipeline of the run selection is of shard ``I`` of ``N`` (``shard_index``; checked while the
    totals are read). None when either does not hold, or the store cannot aggregate: fold it.

    ``task_counts=False``: the report's task counts are left empty, for a caller that reads them
    at the same time elsewhere (``shard_task_counts``) and sets them.

    ``written_by``: the run a shard process of the caller's own ``--shards`` command reported
    (``--shard I/N``, this store). If it is the store's only run and the run shown, every row
    shown was admitted by that run, which kept only the keys of its shard, so the keys are not
    checked again one by one: the totals are read in SQL (``pipeline_totals``), which halves the
    read the command's end waits for. Any other run in the store, or another selection, and
    every key is checked as without it."""
    with read_only_store(location) as store:
        runs = store.runs()
        claim = _shard_claim(runs)
        if claim is None:
            return None
        shard, shards = claim
        sql_totals = getattr(store, "pipeline_totals", None)
        # one run, the one reported: it admitted every row, and only keys of its shard
        sole = sql_totals if written_by is not None and [r.run_id for r in runs] == [written_by] else None

        def totals(selected: str | None) -> _Totals | None:
            if sole is not None and selected == written_by:
                return sole(selected)
            return _shard_totals(store, selected, shard, shards)

        report = _store_report_of(store, location, run_id, totals, task_counts=task_counts)
    return None if report is None else ShardPart(shard, shards, report)


def shard_task_counts(location: str, run_id: str | None) -> tuple[str | None, TaskCounts] | None:
    """The task counts ``shard_part`` reads, with the run they are of (None: it reads none).

    About half of a shard store's read: after a sharded run's last shard, its parent reads them
    in a second process beside ``shard_part(..., task_counts=False)``, so that the command's end
    waits for the longer half instead of both. The caller checks that the run is the one the
    other half shows."""
    with read_only_store(location) as store:
        counts = getattr(store, "task_counts", None)
        if counts is None:
            return None
        choice = choose_run(store, run_id)
        if choice.how == "empty":
            return None
        return choice.run_id, counts(choice.run_id)


def shards_report(parts: Sequence[ShardPart]) -> ShardsReport | None:
    """``parts`` combined, in their order, if they are distinct shards of one count (else None)."""
    if not _distinct_shards([(p.shard, p.shards) for p in parts]):
        return None
    return ShardsReport([p.report for p in parts])


def _distinct_shards(claims: Sequence[tuple[int, int]]) -> bool:
    """Whether ``(shard, shards)`` claims name different shards of one shard count."""
    return len({shards for _shard, shards in claims}) == 1 and len(set(claims)) == len(claims)


def _shard_claim(runs: Iterable[RunRecord]) -> tuple[int, int] | None:
    """The ``I/N`` every run of a store says it ran as (``meta.shard``), if they all say one."""
    claims = set()
    for run in runs:
        meta = run.config.get("meta") if isinstance(run.config, dict) else None
        claims.add(meta.get("shard") if isinstance(meta, dict) else None)
    if len(claims) != 1:
        return None
    (claim,) = claims
    if not isinstance(claim, str):
        return None
    try:
        return parse_shard(claim)
    except ConfigError:
        return None


def shard_stores(locations: Sequence[str], run_id: str | None = None) -> bool:
    """Whether ``locations`` are stores of distinct shards of one count (``shard_part``'s rule)
    whose pipelines of ``run_id`` (None: every run) are all of their store's shard: then no
    pipeline is in two of them, and rows need no merging (``export`` uses it)."""
    claims = []
    for location in locations:
        with read_only_store(location) as store:
            claim = _shard_claim(store.runs())
            if claim is None:
                return False
            shard, shards = claim
            if any(shard_index(row[0], shards) != shard for row in _summaries(store, run_id)):
                return False
            claims.append(claim)
    return _distinct_shards(claims)


def _summaries(store: Store, run_id: str | None) -> Iterable[_Summary]:
    """``pipeline_summaries`` of the store, or the same five values of its whole rows."""
    summaries = getattr(store, "pipeline_summaries", None)
    if summaries is not None:
        return summaries(run_id)
    return (
        (r.pipeline_id, r.state, r.started_at, r.finished_at, r.attempts_total)
        for r in iter_rows(store, "pipelines", run_id=run_id)
    )


def _shard_totals(store: Store, run_id: str | None, shard: int, shards: int) -> _Totals | None:
    """``pipeline_totals`` of ``run_id`` read from its summaries in the same pass that checks
    every key is of shard ``shard`` of ``shards`` (None as soon as one is not)."""
    by_state: dict[str, int] = {}
    durations = array("d")
    attempts = 0
    for pid, state, started, finished, tries in _summaries(store, run_id):
        if shard_index(pid, shards) != shard:
            return None
        by_state[state] = by_state.get(state, 0) + 1
        if started is not None and finished is not None:
            durations.append((finished - started) * 1000.0)
        attempts += tries
    return by_state, array("d", sorted(durations)), attempts


def _store_report(location: str, run_id: str | None) -> StoreReport | None:
    with read_only_store(location) as store:
        return _store_report_of(store, location, run_id)


def _store_report_of(
    store: Store,
    location: str,
    run_id: str | None,
    totals: Callable[[str | None], _Totals | None] | None = None,
    *,
    task_counts: bool = True,
) -> StoreReport | None:
    """One store's report from its aggregates (None: the store cannot aggregate, or ``totals``
    returned None). ``totals``: how the pipeline totals are read (default ``pipeline_totals``);
    ``task_counts=False``: leave the task counts empty (see ``shard_part``)."""
    totals = totals or getattr(store, "pipeline_totals", None)
    counts = getattr(store, "task_counts", None)
    if totals is None or counts is None:
        return None
    choice = choose_run(store, run_id)
    if choice.how == "empty":
        return None  # nothing to aggregate: the fold of nothing says the same
    read = totals(choice.run_id)
    if read is None:
        return None
    by_state, durations, attempts = read
    report = StoreReport(by_state, durations, attempts)
    info = _source_info(location, choice)
    report.sources.append(info)
    info.rows = sum(by_state.values())
    info.events_total = report.source_events_total = count_rows(store, "events", choice.run_id)
    report.handoffs_total = count_handoffs(store, choice.run_id)
    for row in iter_rows(store, "pipelines", run_id=choice.run_id, state="failed"):
        report.details[row.pipeline_id] = _slim(row)
    if task_counts:
        report.task_counts = counts(choice.run_id)
    _read_extras(report, store, 0, choice, lambda ids: _in_selection(store, ids, choice.run_id))
    return report


def _in_selection(store: Store, ids: set[str], run_id: str | None) -> set[str]:
    """The ids whose pipeline row is of ``run_id`` (a resumed pipeline's row moves to the
    resuming run; the metrics it recorded in an earlier run are not shown with that run)."""
    if not ids:
        return set()
    states = getattr(store, "lookup_states", None)
    if states is not None:
        return {pid for pid, (_s, _spec, _seed, rid) in states(sorted(ids)).items() if rid == run_id}
    return {pid for pid, row in store.lookup_pipelines(sorted(ids)).items() if row.run_id == run_id}


def _slim(row: PipelineRecord) -> PipelineRecord:
    """Drop the traceback: a report holds every row in memory and never prints it."""
    return msgspec.structs.replace(row, traceback=None) if row.traceback else row


def _source_info(location: str, choice: RunChoice) -> SourceInfo:
    run = choice.run
    return SourceInfo(
        store=location,
        run_id=choice.run_id,
        run_selected=choice.how,
        run_status=None if run is None else run.status,
        run_label="" if run is None else run.label,
        started_at=None if run is None else run.started_at,
        ended_at=None if run is None else run.ended_at,
        description=choice.describe(),
        stop_reason=None if run is None else run.stop_reason,
    )


def _read_rows(report: MergedReport, store: Store, index: int, choice: RunChoice, info: SourceInfo) -> None:
    if choice.how == "empty":
        return
    summaries = getattr(store, "pipeline_summaries", None)
    if summaries is not None:
        # folding needs five columns; whole rows are read later for the failed winners only
        info.rows += _fold_summaries(report, summaries(choice.run_id), index)
    else:
        for row in iter_rows(store, "pipelines", run_id=choice.run_id):
            info.rows += 1
            report.add(row, index)
    info.events_total = count_rows(store, "events", choice.run_id)
    report.source_events_total += info.events_total
    report.handoffs_total += count_handoffs(store, choice.run_id)


def _fold_summaries(
    report: MergedReport, summaries: Iterable[tuple[str, str, float | None, float | None, int]], index: int
) -> int:
    """``add_summary`` for every row, with the common case (an id not seen yet) inlined: a
    sharded run's report folds every pipeline once, while the run's last shard is ending."""
    rows, failed_seen, states, fold = report.rows, report.failed_seen, _STATES, report._fold
    n = 0
    for pid, state, started, finished, attempts in summaries:
        n += 1
        entry = _new_folded(Folded, (states.get(state, state), started, finished, attempts, index))
        if pid in rows:
            fold(pid, entry, None)
            continue
        rows[pid] = entry
        if state == "failed":
            failed_seen.add(pid)
    return n


def _read_details(
    report: MergedReport,
    store: Store,
    index: int,
    choice: RunChoice,
) -> None:
    """Task counts, repair failures and metrics of the rows this store won."""
    if choice.how == "empty":
        return
    won = report.origin
    counts = getattr(store, "task_counts", None)
    won_here = sum(1 for entry in report.rows.values() if entry.source == index)
    if counts is not None and won_here == report.sources[index].rows:
        # every pipeline row read from this store won (always so for disjoint stores): "its
        # pipeline won" is "its pipeline row is in the same run selection", which the store can
        # count in SQL instead of handing over every task row
        for name, states in counts(choice.run_id).items():
            into = report.task_counts.setdefault(name, {})
            for state, n in states.items():
                into[state] = into.get(state, 0) + n
    else:
        for t in iter_rows(store, "tasks", run_id=choice.run_id):
            if won(t.pipeline_id) == index:
                states = report.task_counts.setdefault(t.name, {})
                states[t.state] = states.get(t.state, 0) + 1
    _read_extras(report, store, index, choice, lambda ids: {pid for pid in ids if won(pid) == index})


def _read_extras(
    report: MergedReport,
    store: Store,
    index: int,
    choice: RunChoice,
    kept: Callable[[set[str]], set[str]],
) -> None:
    """Repair failures of the failed winners of store ``index``, and the application metrics
    of the pipelines ``kept`` says are shown from it (whose rows won, in the run selection)."""
    failed = report.failed_winners(index)
    for ev in _repair_events(store, failed):
        if ev.pipeline_id is None or ev.pipeline_id in report.repair_failures:
            continue
        report.repair_failures[ev.pipeline_id] = {
            "pipeline_id": ev.pipeline_id,
            "key": report.details[ev.pipeline_id].key,
            "store": report.sources[index].store,
            "phase": ev.data.get("phase"),
            "error": ev.data.get("error"),
            "run_id": ev.run_id,
            "ts": ev.ts,
        }
    if choice.run_id is None:
        return  # the aggregate view shows no application metrics
    metrics = store.metrics(run_id=choice.run_id)
    shown = kept({m.pipeline_id for m in metrics if m.pipeline_id != ""})
    for m in metrics:
        if m.pipeline_id == "":
            report.run_metrics.setdefault(m.run_id, {})[m.name] = m.value
        elif m.pipeline_id in shown:
            report.pipeline_metrics.setdefault(m.pipeline_id, {})[m.name] = m.value


def _repair_events(store: Store, failed: Sequence[str]) -> Iterable[Any]:
    if not failed:
        return
    if len(failed) <= _PER_PIPELINE_LOOKUPS:
        for pid in sorted(failed):
            for ev in iter_rows(store, "events", pipeline_id=pid):
                if ev.kind == REPAIR_FAILED:
                    yield ev
        return
    wanted = set(failed)
    for ev in iter_rows(store, "events"):
        if ev.kind == REPAIR_FAILED and ev.pipeline_id in wanted:
            yield ev


def merge_stores(locations: Sequence[str], run_id: str | None = None) -> MergedReport:
    """Fold the pipelines of ``locations`` (each opened read-only) into one report.

    ``run_id``: None = each store's latest started run, ``"all"`` = every run, else that run
    (which must exist in every store named).
    """
    merger = StoreMerger(run_id)
    for index, location in enumerate(locations):
        merger.add(index, location)
    return merger.result()


class StoreMerger:
    """``merge_stores`` one store at a time, in any order.

    ``key`` orders the stores: the report lists them by key, and a full tie between two rows
    goes to the lower key, so the result is the same whatever order they are added in (a caller
    can fold each store as soon as it is complete).
    """

    def __init__(self, run_id: str | None = None) -> None:
        self.run_id = run_id
        self._report = MergedReport()
        self._added: dict[int, tuple[str, RunChoice, SourceInfo]] = {}

    def add(self, key: int, location: str) -> None:
        """Fold the rows of the store at ``location`` (opened read-only); ``key`` must be new."""
        if key in self._added or key < 0:
            raise ValueError(f"store key {key} is negative or was added already")
        with read_only_store(location) as store:
            choice = choose_run(store, self.run_id)
            info = _source_info(location, choice)
            # while folding, a row's ``source`` is the key; ``result`` turns keys into positions
            _read_rows(self._report, store, key, choice, info)
        self._added[key] = (location, choice, info)

    def result(self) -> MergedReport:
        """The report over every store added (reads the details of the stores that won rows)."""
        report = self._report
        keys = sorted(self._added)
        report.sources = [self._added[k][2] for k in keys]
        if keys != list(range(len(keys))):  # keys with gaps (a shard wrote no store): positions
            position = {k: i for i, k in enumerate(keys)}
            report.rows = {pid: e._replace(source=position[e.source]) for pid, e in report.rows.items()}
        winners = {entry.source for entry in report.rows.values()}
        for index, key in enumerate(keys):
            location, choice, _info = self._added[key]
            if index in winners:
                with read_only_store(location) as store:
                    _complete_failed(report, store, index)
                    _read_details(report, store, index, choice)
        return report


def _complete_failed(report: MergedReport, store: Store, index: int) -> None:
    """Whole rows for the failed pipelines this store won that were folded from summaries:
    the report lists their errors; every other row only ever feeds counts."""
    wanted = [pid for pid in report.failed_winners(index) if pid not in report.details]
    if not wanted:
        return
    for pid, row in store.lookup_pipelines(wanted).items():
        report.details[pid] = _slim(row)
