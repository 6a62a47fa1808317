"""Two dashboard reads with defaults any store answers: a filtered, sorted keyset page of
pipelines (``PipelineQuery``) and a run's attempts bucketed by time (``TimeBucket``).

The defaults here page through ``page`` and keep only what the answer needs (``limit`` rows for
the pipelines; one bucket's durations at a time is not possible without an order, so the
default holds the durations of the run: fine for the memory and JSON-lines stores, which hold
every row anyway). SQLite answers both in SQL. Both sides use the same arithmetic, so an
override agrees with the default to the bit: nearest-rank percentiles (``ceil(q * n)`` in
integers), bucket ``int((ended_at - origin) / width)``, text matched after ASCII lowercasing.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pyattacker.model import PipelineRecord

__all__ = [
    "PERCENTILES",
    "PIPELINE_SORTS",
    "FailureCount",
    "PipelineQuery",
    "TimeBucket",
    "ascii_lower",
    "bucket_attempts",
    "count_failures",
    "nearest_rank",
    "pipeline_sort_value",
    "sample_step",
    "select_pipelines",
]

#: ``sort`` names of ``PipelineQuery`` (keyset order: the value, then ``pipeline_id``)
PIPELINE_SORTS = ("created", "finished", "duration", "attempts", "key")
#: the percentiles ``TimeBucket`` carries, in percent
PERCENTILES = (50, 95, 99)
#: the sort value of a pipeline that has none yet (not finished): before every real one
MISSING = -1.0
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
#: the columns ``text`` is looked for in
TEXT_FIELDS = ("pipeline_id", "key", "name", "error_type", "error_message")


def ascii_lower(text: str) -> str:
    """``text`` with A-Z lowercased and nothing else (what SQLite's ``lower`` does)."""
    return text.translate(_ASCII_LOWER)


@dataclass(frozen=True)
class PipelineQuery:
    """Which pipelines, in which order: every filter given must hold.

    ``task`` is the task a pipeline failed at; ``error_class`` matches its exception type
    (``ValueError``) or its retry class (``fatal``); ``text`` is found (ASCII case-insensitive)
    in its id, key, name, error type or message. ``sort`` is one of ``PIPELINE_SORTS``.
    """

    run_id: str | None = None
    state: str | None = None
    task: str | None = None
    error_class: str | None = None
    text: str | None = None
    sort: str = "created"
    descending: bool = False

    def __post_init__(self) -> None:
        if self.sort not in PIPELINE_SORTS:
            raise ValueError(f"sort must be one of {', '.join(PIPELINE_SORTS)}, not {self.sort!r}")

    def matches(self, p: PipelineRecord) -> bool:
        if self.run_id is not None and p.run_id != self.run_id:
            return False
        if self.state is not None and p.state != self.state:
            return False
        if self.task is not None and p.failed_task != self.task:
            return False
        if self.error_class is not None and self.error_class not in (p.error_type, p.error_class):
            return False
        if self.text:
            needle = ascii_lower(self.text)
            return any(
                needle in ascii_lower(v) for v in (getattr(p, f) for f in TEXT_FIELDS) if isinstance(v, str)
            )
        return True


def pipeline_sort_value(p: PipelineRecord, sort: str) -> float | int | str:
    """The value ``sort`` orders ``p`` by (``MISSING`` for an unfinished one's finish/duration)."""
    if sort == "created":
        return p.created_at
    if sort == "key":
        return p.key
    if sort == "attempts":
        return p.attempts_total
    if p.finished_at is None:
        return MISSING
    if sort == "finished":
        return p.finished_at
    return MISSING if p.started_at is None else p.finished_at - p.started_at


def select_pipelines(
    rows: Iterable[PipelineRecord], query: PipelineQuery, after: tuple[Any, Any] | None, limit: int
) -> list[PipelineRecord]:
    """The first ``limit`` of ``rows`` that match ``query``, in its order, strictly past the
    keyset ``after`` (``(sort value, pipeline_id)`` of the previous page's last row); memory
    holds ``limit`` rows whatever the number of rows."""

    def key(p: PipelineRecord) -> tuple[Any, str]:
        return (pipeline_sort_value(p, query.sort), p.pipeline_id)

    picked = (p for p in rows if query.matches(p))
    if after is not None:
        mark = tuple(after)
        picked = (p for p in picked if (key(p) < mark if query.descending else key(p) > mark))
    if limit <= 0:
        return []
    if query.descending:
        return heapq.nlargest(limit, picked, key=key)
    return heapq.nsmallest(limit, picked, key=key)


@dataclass(frozen=True)
class FailureCount:
    """The failed pipelines of one ``(error_type, error_class, failed_task)`` (as stored, None
    included): how many, and the first of them in page order (``(created_at, pipeline_id)``)."""

    error_type: str | None
    error_class: str | None
    failed_task: str | None
    count: int
    first_created_at: float
    first_id: str


def count_failures(rows: Iterable[PipelineRecord]) -> list[FailureCount]:
    """``FailureCount`` of the failed pipelines among ``rows`` (given in page order)."""
    seen: dict[tuple[str | None, str | None, str | None], list[Any]] = {}
    for p in rows:
        if p.state != "failed":
            continue
        name = (p.error_type, p.error_class, p.failed_task)
        group = seen.get(name)
        if group is None:
            seen[name] = [1, p.created_at, p.pipeline_id]
        else:
            group[0] += 1
    return [FailureCount(*name, n, at, pid) for name, (n, at, pid) in seen.items()]


@dataclass(frozen=True)
class TimeBucket:
    """The attempts that ended in ``[origin + index * width, origin + (index + 1) * width)``:
    how many, how many did not succeed, the longest (ms), and duration percentiles (ms, nearest
    rank) over the sampled ones among them (None when none was sampled; see ``sample_step``)."""

    index: int
    attempts: int
    failed: int
    max_ms: float
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    #: 1: counted over every attempt; n: estimated from one attempt in n (a store may sample a
    #: large run: ``attempts`` and ``failed`` are then the sample's counts times n, ``max_ms``
    #: the sample's longest)
    counted_one_in: int = 1


#: percentiles are computed over about this many attempts at most, whatever the run's size
PERCENTILE_SAMPLE = 20_000


def sample_step(attempts: int) -> int:
    """Percentiles use the attempts whose ``attempt_id`` is a multiple of this: every one up to
    ``PERCENTILE_SAMPLE`` attempts, then one in ``step`` (ids are numbered in commit order, so the
    sample is spread evenly over time). Counts, failures and maxima use every attempt."""
    return max(1, -(-attempts // PERCENTILE_SAMPLE))


def nearest_rank(n: int, percent: int) -> int:
    """The 1-based rank of the ``percent`` percentile among ``n`` sorted values: ceil(p * n)."""
    return max(1, (n * percent + 99) // 100)


def bucket_attempts(
    rows: Iterable[tuple[int, float, float, str]], origin: float, width: float
) -> list[TimeBucket]:
    """``(attempt_id, ended_at, duration_ms, outcome)`` rows folded into ``TimeBucket`` s, by index."""
    rows = list(rows)
    step = sample_step(len(rows))
    counts: dict[int, list[Any]] = {}  # index -> [attempts, failed, max, sampled durations]
    for attempt_id, ended, duration, outcome in rows:
        index = int((ended - origin) / width)
        bucket = counts.setdefault(index, [0, 0, duration, []])
        bucket[0] += 1
        bucket[1] += outcome != "succeeded"
        bucket[2] = max(bucket[2], duration)
        if attempt_id % step == 0:
            bucket[3].append(duration)
    out = []
    for index in sorted(counts):
        n, failed, top, sampled = counts[index]
        sampled.sort()
        p50, p95, p99 = (sampled[nearest_rank(len(sampled), q) - 1] if sampled else None for q in PERCENTILES)
        out.append(TimeBucket(index, n, failed, top, p50, p95, p99))
    return out
