"""The report of one store from its own aggregates, and reading one store into a report.

One store holds each pipeline once, so nothing needs folding: ``StoreReport`` keeps the totals
the store computes (``pipeline_totals``, ``task_counts``) and whole rows of the failed
pipelines only. The helpers here also read what every report shows of a store beside its
pipeline rows (``source_info``, ``read_extras``: repair failures and application metrics),
whether the report folds rows or not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pyattacker.plugins.store_base import StoreBase, iter_rows
from pyattacker.views.common import RunChoice, choose_run, read_only_store
from pyattacker.views.fold import MergedReport, SourceInfo, slim_row

__all__ = [
    "REPAIR_FAILED",
    "StoreReport",
    "TaskCounts",
    "Totals",
    "read_extras",
    "source_info",
    "store_report",
    "store_report_of",
]

#: the event of a failed pipeline whose terminal state could not be recorded (the report lists them)
REPAIR_FAILED = "pipeline.terminal_repair_failed"
#: above this many failed rows per store, repair failures are found by one scan of the events
_PER_PIPELINE_LOOKUPS = 2000
#: ``task_counts``: ``{task name: {state: count}}``
TaskCounts = dict[str, dict[str, int]]
#: ``pipeline_totals``: ``({state: count}, sorted durations in ms, attempts)``
Totals = tuple[dict[str, int], Sequence[float], int]


class StoreReport(MergedReport):
    """The report of ONE store from its aggregates, without folding every pipeline row.

    One store holds each pipeline once, so nothing needs folding: the store counts states,
    sorts the durations and sums the attempts (``pipeline_totals``), and whole rows are read
    for the failed pipelines only. The output equals ``merge_stores([store])``; it keeps 8
    bytes per pipeline (the sorted durations, for the percentiles) where the fold keeps a
    ``Folded`` entry. ``rows`` stays empty: use ``stats()``, or ``merge_stores`` for the
    per-pipeline fold.
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

    def totals(self) -> Totals:
        """The pipeline totals the report was built from (``pipeline_totals``' shape)."""
        return self._by_state, self._durations, self._attempts


def store_report(location: str, run_id: str | None) -> StoreReport | None:
    """``store_report_of`` the store at ``location``, opened read-only."""
    with read_only_store(location) as store:
        return store_report_of(store, location, run_id)


def store_report_of(
    store: StoreBase,
    location: str,
    run_id: str | None,
    totals: Callable[[str | None], Totals | None] | None = None,
    *,
    task_counts: bool = True,
) -> StoreReport | None:
    """One store's report from its aggregates (None: the store holds no run, or ``totals``
    returned None). ``totals``: how the pipeline totals are read (default ``pipeline_totals``);
    ``task_counts=False``: leave the task counts empty (see ``shard_part``)."""
    totals = totals or store.pipeline_totals
    choice = choose_run(store, run_id)
    if choice.how == "empty":
        return None  # nothing to aggregate: the fold of nothing says the same
    read = totals(choice.run_id)
    if read is None:
        return None
    by_state, durations, attempts = read
    report = StoreReport(by_state, durations, attempts)
    info = source_info(location, choice)
    report.sources.append(info)
    info.rows = sum(by_state.values())
    info.events_total = report.source_events_total = store.count_rows("events", choice.run_id)
    report.handoffs_total = store.count_handoffs(choice.run_id)
    report.handoffs_by_operation = store.handoffs_by_operation(choice.run_id)
    for row in iter_rows(store, "pipelines", run_id=choice.run_id, state="failed"):
        report.details[row.pipeline_id] = slim_row(row)
    if task_counts:
        report.task_counts = store.task_counts(choice.run_id)
    read_extras(report, store, 0, choice, lambda ids: _in_selection(store, ids, choice.run_id))
    return report


def _in_selection(store: StoreBase, ids: set[str], run_id: str | None) -> set[str]:
    """The ids whose pipeline row is of ``run_id`` (a resumed pipeline's row moves to the
    resuming run; the metrics it recorded in an earlier run are not shown with that run)."""
    if not ids:
        return set()
    return {pid for pid, (_s, _spec, _seed, rid) in store.lookup_states(sorted(ids)).items() if rid == run_id}


def source_info(location: str, choice: RunChoice) -> SourceInfo:
    """What the report says of the store at ``location`` and the run ``choice`` shows from it."""
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


def read_extras(
    report: MergedReport,
    store: StoreBase,
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


def _repair_events(store: StoreBase, failed: Sequence[str]) -> Iterable[Any]:
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
