"""``DashboardReads``: the viewer's filtered pipeline pages and time-bucketed attempts, in SQL.

Both answer what ``StoreBase``'s defaults (``pyattacker.plugins.store_queries``) answer, with
the same arithmetic, but only the page (``LIMIT``) or one row per time bucket leaves SQLite:
the viewer's memory does not grow with the store. Percentiles are nearest-rank over a window
partitioned by bucket.
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


def _timeline_sql(by_span: bool, by_run: bool) -> str:
    """One row per bucket: index, attempts, failed, the percentiles and the maximum."""
    source = "attempts AS t"
    where = ""
    if by_run:
        source = run_spans.SOURCE + source if by_span else source
        where = " WHERE " + (run_spans.run_condition("attempts") if by_span else 't."run_id" = ?')
    ranks = ", ".join(f"MAX(CASE WHEN rn = MAX(1, (n * {q} + 99) / 100) THEN d END)" for q in PERCENTILES)
    return (
        'WITH a AS (SELECT CAST((t."ended_at" - ?) / ? AS INTEGER) AS b, t."duration_ms" AS d,'
        f" t.\"outcome\" != 'succeeded' AS bad FROM {source}{where}),"
        " r AS (SELECT b, d, bad, ROW_NUMBER() OVER (PARTITION BY b ORDER BY d) AS rn,"
        " COUNT(*) OVER (PARTITION BY b) AS n FROM a)"
        f" SELECT b, COUNT(*), SUM(bad), {ranks}, MAX(d) FROM r GROUP BY b ORDER BY b"
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
        sql = _timeline_sql(self.has_spans, run_id is not None)
        params: list[Any] = [float(origin), float(width), *([run_id] if run_id is not None else [])]
        return [
            TimeBucket(int(b), int(n), int(bad or 0), float(p50), float(p95), float(p99), float(top))
            for b, n, bad, p50, p95, p99, top in self._query(sql, params)
        ]
