"""One coherent view of several stores (shards, or copies of one store).

``merge_stores`` folds the pipeline rows of every store by ``pipeline_id`` (``fold``);
``StoreMerger`` does it one store at a time, in any order. ``report_stores`` is what ``report``
shows: the same report, read the cheapest way the stores allow (``StoreReport`` for one store,
``ShardsReport`` for the stores of distinct shards, else the fold).
"""

from __future__ import annotations

from collections.abc import Sequence

from pyattacker.plugins.store_base import StoreBase, iter_rows
from pyattacker.views.common import RunChoice, choose_run, read_only_store
from pyattacker.views.fold import MergedReport, SourceInfo, add_operations, slim_row
from pyattacker.views.shard_report import shard_part, shards_report
from pyattacker.views.store_report import read_extras, source_info, store_report

__all__ = ["StoreMerger", "merge_stores", "report_stores"]


def report_stores(locations: Sequence[str], run_id: str | None = None) -> MergedReport:
    """What ``report`` shows: ``merge_stores``; or, with the same output, a ``StoreReport`` for one
    store that can aggregate in SQL (``pipeline_totals``, ``task_counts``), and a ``ShardsReport``
    for the stores of distinct shards of one sharded run (``shard_part``)."""
    if len(locations) == 1:
        single = store_report(locations[0], run_id)
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
            info = source_info(location, choice)
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


def _complete_failed(report: MergedReport, store: StoreBase, index: int) -> None:
    """Whole rows for the failed pipelines this store won that were folded from summaries:
    the report lists their errors; every other row only ever feeds counts."""
    wanted = [pid for pid in report.failed_winners(index) if pid not in report.details]
    if not wanted:
        return
    for pid, row in store.lookup_pipelines(wanted).items():
        report.details[pid] = slim_row(row)


def _read_rows(
    report: MergedReport, store: StoreBase, index: int, choice: RunChoice, info: SourceInfo
) -> None:
    if choice.how == "empty":
        return
    # folding needs five columns; whole rows are read later for the failed winners only
    info.rows += report.add_summaries(store.pipeline_summaries(choice.run_id), index)
    info.events_total = store.count_rows("events", choice.run_id)
    report.source_events_total += info.events_total
    report.handoffs_total += store.count_handoffs(choice.run_id)
    add_operations(report.handoffs_by_operation, store.handoffs_by_operation(choice.run_id))


def _read_details(
    report: MergedReport,
    store: StoreBase,
    index: int,
    choice: RunChoice,
) -> None:
    """Task counts, repair failures and metrics of the rows this store won."""
    if choice.how == "empty":
        return
    won = report.origin
    won_here = sum(1 for entry in report.rows.values() if entry.source == index)
    if won_here == report.sources[index].rows:
        # every pipeline row read from this store won (always so for disjoint stores): "its
        # pipeline won" is "its pipeline row is in the same run selection", which the store can
        # count in SQL instead of handing over every task row
        for name, states in store.task_counts(choice.run_id).items():
            into = report.task_counts.setdefault(name, {})
            for state, n in states.items():
                into[state] = into.get(state, 0) + n
    else:
        for t in iter_rows(store, "tasks", run_id=choice.run_id):
            if won(t.pipeline_id) == index:
                states = report.task_counts.setdefault(t.name, {})
                states[t.state] = states.get(t.state, 0) + 1
    read_extras(report, store, index, choice, lambda ids: {pid for pid in ids if won(pid) == index})
