"""Reports over the stores of one sharded run, without folding their pipelines.

A store is a provable shard when every run in it says the same ``meta.shard`` ``I/N`` and the
key of every pipeline it shows is of shard ``I`` of ``N`` (``shard_part``). Stores of distinct
shards of one count hold no pipeline twice, so their aggregates add up (``ShardsReport``) and
``export`` can write their rows one store after the other (``shard_stores``).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from itertools import chain
from typing import NamedTuple

from pyattacker.errors import ConfigError
from pyattacker.model import RunRecord
from pyattacker.plugins.store_base import StoreBase
from pyattacker.shard.plan import parse_shard, shard_index, shard_layouts, shard_store_pattern
from pyattacker.views.common import choose_run, read_only_store
from pyattacker.views.fold import add_operations
from pyattacker.views.store_report import StoreReport, TaskCounts, Totals, store_report_of

__all__ = [
    "ShardPart",
    "ShardsReport",
    "find_shard_stores",
    "shard_part",
    "shard_stores",
    "shard_task_counts",
    "shards_report",
]

#: ``pipeline_summaries``: ``(pipeline_id, state, started_at, finished_at, attempts_total)``
_Summary = tuple[str, str, float | None, float | None, int]


class ShardsReport(StoreReport):
    """The report of the stores of one sharded run, combined from each store's aggregates.

    Each store holds only the pipelines of its own shard (``shard_part`` checks every key), so
    no pipeline is in two of them and nothing needs folding: counts and attempts add up, the
    sorted durations merge, and each failed pipeline's store is the one it was read from. The
    output equals ``merge_stores`` over the same stores, in 8 bytes per pipeline (its duration)
    instead of the fold's entry per pipeline.
    """

    def __init__(self, parts: Sequence[StoreReport]) -> None:
        totals = [part.totals() for part in parts]
        by_state: dict[str, int] = {}
        for states, _durations, _attempts in totals:
            for state, n in states.items():
                by_state[state] = by_state.get(state, 0) + n
        durations = array("d", sorted(chain.from_iterable(d for _states, d, _attempts in totals)))
        super().__init__(by_state, durations, sum(a for _states, _durations, a in totals))
        self._origin: dict[str, int] = {}
        for index, part in enumerate(parts):
            self.sources.append(part.sources[0])
            self.source_events_total += part.source_events_total
            self.handoffs_total += part.handoffs_total
            add_operations(self.handoffs_by_operation, part.handoffs_by_operation)
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


class ShardPart(NamedTuple):
    """One shard store's aggregates, and which shard (``shard`` of ``shards``) it provably holds."""

    shard: int
    shards: int
    report: StoreReport


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
    checked again one by one: the totals are read in SQL (``pipeline_totals``), which shortens
    the read the command's end waits for. Any other run in the store, or another selection, and
    every key is checked as without it."""
    with read_only_store(location) as store:
        runs = store.runs()
        claim = _shard_claim(runs)
        if claim is None:
            return None
        shard, shards = claim
        # one run, the one reported: it admitted every row, and only keys of its shard
        sole = written_by is not None and [r.run_id for r in runs] == [written_by]

        def totals(selected: str | None) -> Totals | None:
            if sole and selected == written_by:
                return store.pipeline_totals(selected)
            return _shard_totals(store, selected, shard, shards)

        report = store_report_of(store, location, run_id, totals, task_counts=task_counts)
    return None if report is None else ShardPart(shard, shards, report)


def shard_task_counts(location: str, run_id: str | None) -> tuple[str | None, TaskCounts] | None:
    """The task counts ``shard_part`` reads, with the run they are of (None: it reads none).

    A separable part of a shard store's read: after a sharded run's last shard, its parent reads
    them in a second process beside ``shard_part(..., task_counts=False)``, so that the
    command's end waits for the longer of the two instead of both. The caller checks that the
    run is the one the other part shows."""
    with read_only_store(location) as store:
        choice = choose_run(store, run_id)
        if choice.how == "empty":
            return None
        return choice.run_id, store.task_counts(choice.run_id)


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


def find_shard_stores(locations: Sequence[str]) -> list[str]:
    """``locations`` with each store that does not exist replaced by the stores of its sharded
    run (``run --shards N --store runs/x.db`` writes ``runs/x.shard{i}ofN.db``), found as
    ``resume`` finds them (``shard_layouts``). Stores of several shard counts are ambiguous:
    a ``ConfigError`` naming each pattern. Anything else is left for the store to report."""
    out: list[str] = []
    for location in locations:
        layouts = shard_layouts(location)
        sharded = {n: paths for n, paths in layouts.items() if n >= 2}
        if 1 in layouts or not sharded:
            out.append(location)
        elif len(sharded) == 1:
            out.extend(next(iter(sharded.values())))
        else:
            patterns = ", ".join(f"'{shard_store_pattern(location, n)}'" for n in sharded)
            raise ConfigError(
                f"store {location} does not exist, but the stores of runs with"
                f" {' and '.join(f'--shards {n}' for n in sharded)} do: name one of {patterns}"
            )
    return out


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
            if any(shard_index(row[0], shards) != shard for row in store.pipeline_summaries(run_id)):
                return False
            claims.append(claim)
    return _distinct_shards(claims)


def _shard_totals(store: StoreBase, run_id: str | None, shard: int, shards: int) -> Totals | None:
    """``pipeline_totals`` of ``run_id`` read from its summaries in the same pass that checks
    every key is of shard ``shard`` of ``shards`` (None as soon as one is not)."""
    by_state: dict[str, int] = {}
    durations = array("d")
    attempts = 0
    for pid, state, started, finished, tries in store.pipeline_summaries(run_id):
        if shard_index(pid, shards) != shard:
            return None
        by_state[state] = by_state.get(state, 0) + 1
        if started is not None and finished is not None:
            durations.append((finished - started) * 1000.0)
        attempts += tries
    return by_state, array("d", sorted(durations)), attempts
