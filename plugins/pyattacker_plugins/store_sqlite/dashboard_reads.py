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
    FailureCount,
    PipelineQuery,
    TimeBucket,
    nearest_rank,
    sample_step,
)

from . import run_spans
from .connection import LOOKUP_CHUNK, StoreConnection
from .read_sql import PAGE_ORDER_RUN, lookup_sql
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
        't."error_type" = ? OR t."error_class" = ?'
        if f == "error_class"
        else _run_filter(sort, filters)
        if f == "run_id"
        else f't."{f}" = ?'
        for f in filters
    ]
    where = [f"({w})" for w in where]
    if text:
        where.append(_TEXT_SQL)
    value = _SORT_SQL[sort]
    if keyset:
        where.append(f'({value}, t."pipeline_id") {"<" if descending else ">"} (?, ?)')
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    way = " DESC" if descending else ""
    return (
        f'SELECT {PIPELINES.read_list()} FROM "pipelines" AS t{clause}'
        f' ORDER BY {value}{way}, t."pipeline_id"{way} LIMIT ?'
    )


#: the ``text`` filter (``_like`` of its needle five times). SQLite's LIKE ignores ASCII case
#: (what ``ascii_lower`` does), without lowering a copy of each column as ``instr(lower())`` did
_TEXT_SQL = "(" + " OR ".join(f"t.\"{f}\" LIKE ? ESCAPE '\\'" for f in TEXT_FIELDS) + ")"


def _like(text: str) -> str:
    """The LIKE pattern that finds ``text`` anywhere (its ``%``, ``_`` and ``\\`` taken literally)."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def _in_order(sort: str, filters: tuple[str, ...]) -> bool:
    """Whether the run's pipelines are walked in creation order (``PAGE_ORDER_RUN``): without a
    state, SQLite would read the run through ``pipelines_by_run_state`` and sort every pipeline
    of it for one page; it walks ``pipelines_by_created`` instead and stops at the page's end."""
    return sort == "created" and "state" not in filters


def _run_filter(sort: str, filters: tuple[str, ...]) -> str:
    """The run's condition (three parameters when ``_in_order``, else one)."""
    return PAGE_ORDER_RUN if _in_order(sort, filters) else 't."run_id" = ?'


@lru_cache(maxsize=64)
def _scan_sql(filters: tuple[str, ...], sort: str, descending: bool, keyset: bool) -> tuple[str, str]:
    """``scan_pipelines``' statements over the window of the next ``?`` pipelines of the run (and
    state) in page order: the ids of the matches among them (``?``: at most this many), and the
    keyset of the window's last pipeline (``?``: the window's size less one). ``text`` in
    ``filters`` is the text filter. Parameters: the other filters (the text five times; the
    first statement only), the run and state, the keyset pair, then the statement's own."""
    indexed = [f for f in filters if f in ("run_id", "state")]
    where = [_run_filter(sort, tuple(indexed)) if f == "run_id" else f't."{f}" = ?' for f in indexed]
    value = _SORT_SQL[sort]
    if keyset:
        where.append(f'({value}, t."pipeline_id") {"<" if descending else ">"} (?, ?)')
    tests = [
        '(t."error_type" = ? OR t."error_class" = ?)'
        if f == "error_class"
        else _TEXT_SQL
        if f == "text"
        else f't."{f}" = ?'
        for f in filters
        if f not in ("run_id", "state")
    ]
    matched = " AND ".join(tests) or "1"
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    way = " DESC" if descending else ""
    window = f' FROM "pipelines" AS t{clause} ORDER BY {value}{way}, t."pipeline_id"{way}'
    looked = f'SELECT t."pipeline_id" AS pid, ({matched}) AS m{window} LIMIT ?'
    matches = f"SELECT pid FROM ({looked}) WHERE m LIMIT ?"
    last = f'SELECT {value}, t."pipeline_id"{window} LIMIT 1 OFFSET ?'
    return matches, last


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


#: attempts in a run's span of ids up to which ``attempt_timeline`` counts every one
TIMELINE_EXACT = 200_000
#: attempts an estimated timeline reads (one in ``span // TIMELINE_SAMPLE``, by id)
TIMELINE_SAMPLE = 20_000


@lru_cache(maxsize=4)
def _sampled_sql(by_run: bool) -> str:
    """Bucket, duration and failure of the attempts with ids ``lo, lo + step, ... <= hi``, each
    read by its id (parameters: lo, step, step, hi, origin, width, then the run)."""
    run = ' AND t."run_id" = ?' if by_run else ""
    return (
        "WITH RECURSIVE ids(i) AS (SELECT ? UNION ALL SELECT i + ? FROM ids WHERE i + ? <= ?)"
        ' SELECT CAST((t."ended_at" - ?) / ? AS INTEGER), t."duration_ms", t."outcome" != \'succeeded\''
        f' FROM ids JOIN attempts AS t ON t."attempt_id" = ids.i WHERE 1{run}'
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
            if f == "run_id" and _in_order(query.sort, filters):
                params.extend(self._run_in_order(value))
            else:
                params.extend((value, value) if f == "error_class" else (value,))
        text = bool(query.text)
        if text:
            params.extend([_like(query.text or "")] * len(TEXT_FIELDS))
        if after is not None:
            params.extend(after)
        params.append(limit)
        columns = tuple(_FILTER_COLUMNS[f] if f != "error_class" else f for f in filters)
        sql = _find_sql(columns, text, query.sort, query.descending, after is not None)
        return [PIPELINES.decode(r) for r in self._query(sql, params)]

    @_names_store
    def scan_pipelines(
        self, query: PipelineQuery, after: tuple[Any, Any] | None, limit: int, scan: int
    ) -> tuple[list[PipelineRecord], tuple[Any, Any] | None]:
        """``find_pipelines`` looking at the next ``scan`` pipelines of the run (and state) only:
        the matches among them, and where the look stopped when it stopped before ``limit``
        matches with pipelines left to look at (else None). One pass over the page order's
        index, reading the filtered columns of each row and the whole rows of the matches."""
        if limit <= 0:
            return [], None
        filters = tuple(f for f in _FILTER_COLUMNS if getattr(query, f) is not None)
        head = [getattr(query, f) for f in filters if f in ("run_id", "state")]
        if query.run_id is not None and _in_order(query.sort, filters):
            head[0:1] = self._run_in_order(query.run_id)
        tail: list[Any] = []
        for f in filters:
            if f not in ("run_id", "state"):
                value = getattr(query, f)
                tail.extend((value, value) if f == "error_class" else (value,))
        columns = tuple(_FILTER_COLUMNS[f] if f != "error_class" else f for f in filters)
        if query.text:
            columns += ("text",)
            tail.extend([_like(query.text)] * len(TEXT_FIELDS))
        matches, last = _scan_sql(columns, query.sort, query.descending, after is not None)
        head = [*head, *(after or ())]
        with self._snapshot("pipelines") as conn:  # (the window's end as the matches saw it)
            keys = [pid for (pid,) in conn.execute(matches, [*tail, *head, scan, limit])]
            end = conn.execute(last, [*head, scan - 1]).fetchall() if len(keys) < limit else []
        found: dict[str, PipelineRecord] = {}
        for start in range(0, len(keys), LOOKUP_CHUNK):
            chunk = keys[start : start + LOOKUP_CHUNK]
            for row in self._query(lookup_sql(len(chunk), self._ids_for(chunk)), chunk):
                found[row[0]] = PIPELINES.decode(row)
        rows = [found[k] for k in keys if k in found]
        return rows, ((end[0][0], end[0][1]) if end else None)

    def failure_counts(self, run_id: str | None = None) -> list[FailureCount]:
        """One GROUP BY over the run's failed pipelines (``pipelines_by_run_state``), then each
        group's first in page order by the same index: no row leaves SQLite but the counts."""
        run = "run_id = ? AND " if run_id is not None else ""
        head = [run_id] if run_id is not None else []
        where = f"{run}state = 'failed'"
        groups = self._query(
            f"SELECT error_type, error_class, failed_task, COUNT(*), MIN(created_at) FROM pipelines"
            f" WHERE {where} GROUP BY error_type, error_class, failed_task",
            head,
        )
        first = (
            f"SELECT pipeline_id FROM pipelines WHERE {where} AND created_at = ? AND error_type IS ?"
            " AND error_class IS ? AND failed_task IS ? ORDER BY pipeline_id LIMIT 1"
        )
        out = []
        for etype, eclass, task, n, at in groups:
            ids = self._query(first, [*head, at, etype, eclass, task])
            if ids:
                out.append(FailureCount(etype, eclass, task, int(n), float(at), ids[0][0]))
        return sorted(out, key=lambda c: (c.first_created_at, c.first_id))

    def _attempt_span(self, run_id: str | None) -> tuple[int, int] | None:
        """The ids the run's attempts lie between (``run_spans``; every attempt for None)."""
        if run_id is None:
            rows = self._query("SELECT MIN(attempt_id), MAX(attempt_id) FROM attempts")
        elif self.has_spans:
            spans = "SELECT lo, hi FROM run_spans WHERE run_id = ? AND kind = 'attempts'"
            rows = self._query(spans, [run_id])
        else:
            return None
        return (int(rows[0][0]), int(rows[0][1])) if rows and rows[0][0] is not None else None

    def attempt_timeline(self, run_id: str | None, origin: float, width: float) -> list[TimeBucket]:
        """Every attempt counted up to ``TIMELINE_EXACT`` attempts in the run's span of ids;
        beyond, an estimate from ``TIMELINE_SAMPLE`` attempts spread evenly over the span (each
        read by its id), so the chart of a run of any size costs the same."""
        span = self._attempt_span(run_id)
        if span is not None and span[1] - span[0] + 1 > TIMELINE_EXACT:
            return self._sampled_timeline(run_id, origin, width, span)
        return self._counted_timeline(run_id, origin, width)

    def _sampled_timeline(
        self, run_id: str | None, origin: float, width: float, span: tuple[int, int]
    ) -> list[TimeBucket]:
        lo, hi = span
        step = max(1, (hi - lo + 1) // TIMELINE_SAMPLE)
        params: list[Any] = [lo, step, step, hi, float(origin), float(width)]
        if run_id is not None:
            params.append(run_id)
        rows = self._query(_sampled_sql(run_id is not None), params)
        by_bucket: dict[int, list[float]] = {}
        failed: dict[int, int] = {}
        for b, d, bad in rows:
            by_bucket.setdefault(int(b), []).append(float(d))
            failed[int(b)] = failed.get(int(b), 0) + int(bad)
        out = []
        for b in sorted(by_bucket):
            durations = sorted(by_bucket[b])
            p50, p95, p99 = (durations[nearest_rank(len(durations), q) - 1] for q in PERCENTILES)
            out.append(
                TimeBucket(b, len(durations) * step, failed[b] * step, durations[-1], p50, p95, p99, step)
            )
        return out

    def _counted_timeline(self, run_id: str | None, origin: float, width: float) -> list[TimeBucket]:
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
