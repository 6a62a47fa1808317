"""``DashboardReads``: the viewer's filtered pipeline pages and time-bucketed attempts, in SQL.

Both answer what ``StoreBase``'s defaults (``pyattacker.plugins.store_queries``) answer, with
the same arithmetic, but only the page (``LIMIT``) or one row per time bucket leaves SQLite:
the viewer's memory does not grow with the store. Percentiles are nearest-rank over a window
partitioned by bucket, over a sample of at most about ``PERCENTILE_SAMPLE`` attempts.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from pyattacker.model import PipelineRecord
from pyattacker.plugins.store_queries import (
    MISSING,
    PERCENTILES,
    TEXT_FIELDS,
    PipelineQuery,
    TimeBucket,
    ascii_lower,
    sample_step,
)

from . import run_spans
from .connection import StoreConnection
from .reads import _names_store
from .rows import PIPELINES

__all__ = ["DashboardReads"]

#: the SQL of each ``PipelineQuery.sort`` (over the pipelines table as ``t``)
_SORT_SQL = {
    "created": 't."created_at"',
    "key": 't."key"',
    "attempts": 't."attempts_total"',
    "finished": f'COALESCE(t."finished_at", {MISSING!r})',
    "duration": (
        f'CASE WHEN t."finished_at" IS NULL OR t."started_at" IS NULL THEN {MISSING!r}'
        ' ELSE t."finished_at" - t."started_at" END'
    ),
}


@lru_cache(maxsize=128)
def _find_sql(filters: tuple[str, ...], text: bool, sort: str, descending: bool, keyset: bool) -> str:
    """The statement of one shape of ``find_pipelines`` (parameters in ``filters`` order, the
    text five times, the keyset pair, the limit)."""
    where = [
        't."error_type" = ? OR t."error_class" = ?' if f == "error_class" else f't."{f}" = ?' for f in filters
    ]
    where = [f"({w})" for w in where]
    if text:
        found = " OR ".join(f'instr(lower(t."{f}"), ?) > 0' for f in TEXT_FIELDS)
        where.append(f"({found})")
    value = _SORT_SQL[sort]
    if keyset:
        where.append(f'({value}, t."pipeline_id") {"<" if descending else ">"} (?, ?)')
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    way = " DESC" if descending else ""
    return (
        f'SELECT {PIPELINES.read_list()} FROM "pipelines" AS t{clause}'
        f' ORDER BY {value}{way}, t."pipeline_id"{way} LIMIT ?'
    )


#: ``PipelineQuery`` field -> pipelines column it filters (``error_class`` is two columns)
_FILTER_COLUMNS = {"run_id": "run_id", "state": "state", "task": "failed_task", "error_class": "error_class"}


def _timeline_source(by_span: bool, by_run: bool, sampled: bool) -> str:
    """``a(b, d, bad)``: bucket, duration and failure of the run's attempts (parameters: origin,
    width, then the run, then the sample step)."""
    source, where = "attempts AS t", []
    if by_run:
        source = run_spans.SOURCE + source if by_span else source
        where.append(run_spans.run_condition("attempts") if by_span else 't."run_id" = ?')
    if sampled:
        where.append('t."attempt_id" % ? = 0')
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    return (
        'WITH a AS (SELECT CAST((t."ended_at" - ?) / ? AS INTEGER) AS b, t."duration_ms" AS d,'
        f" t.\"outcome\" != 'succeeded' AS bad FROM {source}{clause})"
    )


@lru_cache(maxsize=8)
def _counts_sql(by_span: bool, by_run: bool) -> str:
    """One row per bucket: index, attempts, failed, longest."""
    return (
        _timeline_source(by_span, by_run, False) + " SELECT b, COUNT(*), SUM(bad), MAX(d) FROM a GROUP BY b"
    )


@lru_cache(maxsize=8)
def _percentiles_sql(by_span: bool, by_run: bool) -> str:
    """One row per bucket with sampled attempts: index and the nearest-rank percentiles."""
    ranks = ", ".join(f"MAX(CASE WHEN rn = MAX(1, (n * {q} + 99) / 100) THEN d END)" for q in PERCENTILES)
    return _timeline_source(by_span, by_run, True) + (
        ", r AS (SELECT b, d, ROW_NUMBER() OVER (PARTITION BY b ORDER BY d) AS rn,"
        f" COUNT(*) OVER (PARTITION BY b) AS n FROM a) SELECT b, {ranks} FROM r GROUP BY b"
    )


class DashboardReads(StoreConnection):
    """``find_pipelines`` and ``attempt_timeline`` answered by SQLite."""

    @_names_store
    def find_pipelines(
        self, query: PipelineQuery, after: tuple[Any, Any] | None = None, limit: int = 50
    ) -> list[PipelineRecord]:
        if limit <= 0:
            return []
        filters = tuple(f for f in _FILTER_COLUMNS if getattr(query, f) is not None)
        params: list[Any] = []
        for f in filters:
            value = getattr(query, f)
            params.extend((value, value) if f == "error_class" else (value,))
        text = bool(query.text)
        if text:
            params.extend([ascii_lower(query.text or "")] * len(TEXT_FIELDS))
        if after is not None:
            params.extend(after)
        params.append(limit)
        columns = tuple(_FILTER_COLUMNS[f] if f != "error_class" else f for f in filters)
        sql = _find_sql(columns, text, query.sort, query.descending, after is not None)
        return [PIPELINES.decode(r) for r in self._query(sql, params)]

    def attempt_timeline(self, run_id: str | None, origin: float, width: float) -> list[TimeBucket]:
        """Counts over every attempt, then percentiles over the sample (``sample_step``): the
        window that ranks durations sorts only the sample, so a large run costs about a group-by."""
        by_run = run_id is not None
        params: list[Any] = [float(origin), float(width), *([run_id] if by_run else [])]
        with self._snapshot("timeline") as conn:  # the two statements read the same rows
            counts = conn.execute(_counts_sql(self.has_spans, by_run), params).fetchall()
            step = sample_step(sum(n for _b, n, _bad, _top in counts))
            ranked = conn.execute(_percentiles_sql(self.has_spans, by_run), [*params, step]).fetchall()
        percentiles = {b: tuple(ps) for b, *ps in ranked}
        out = []
        for b, n, bad, top in sorted(counts):
            p50, p95, p99 = percentiles.get(b, (None, None, None))
            out.append(TimeBucket(int(b), int(n), int(bad or 0), float(top), p50, p95, p99))
        return out
