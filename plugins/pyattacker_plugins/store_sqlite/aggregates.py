"""``StoreAggregates``: counts, totals and narrow summaries computed in SQLite.

Reports and live views need numbers and a few columns, not decoded rows: state counts, sorted
durations, task counts, and the summary columns of pipelines, attempts and events. The types of
those columns are tested in SQL next to the values, so a hand-edited row still raises the
``CorruptRow`` a whole-row read would, without a Python test per row.
"""

from __future__ import annotations

import operator
import sqlite3
from array import array
from collections.abc import Iterator, Sequence
from typing import Any

from pyattacker.errors import CorruptRow
from pyattacker.plugins.api import PAGE_KINDS
from pyattacker.plugins.store_stats import duration_summary

from .connection import StoreConnection
from .read_sql import PAGE_CODECS, PAGE_FILTERS, count_sql, page_sql, rows_where
from .rows import ATTEMPTS, EVENTS, PIPELINES, TASKS, RowCodec

__all__ = ["StoreAggregates"]

#: ``pipeline_summaries``' five columns of a row that also carries its ``pk`` (for the next page)
_SUMMARY = operator.itemgetter(0, 1, 2, 3, 4)
#: a row's last column: whether the columns read hold what they should (``*_TYPED``)
_LAST = operator.itemgetter(-1)
#: the columns of a pipeline row that its summary and the totals read hold what they should
#: (computed in SQLite next to the values: a hand-edited row is found without a Python test per row)
_SUMMARY_TYPED = PIPELINES.typed_sql(("pipeline_id", "state", "started_at", "finished_at", "attempts_total"))
_STATE_TYPED = PIPELINES.typed_sql(("state", "started_at", "finished_at", "attempts_total"))
_TASK_COUNT_TYPED = TASKS.typed_sql(("name", "state"), "t.")
_TASK_STATS_TYPED = TASKS.typed_sql(("name", "state"))
_SUMMARY_TYPES = {
    "attempts": ATTEMPTS.typed_sql(("attempt_id", "duration_ms", "ended_at", "outcome"), "t."),
    "events": EVENTS.typed_sql(("event_id", "kind", "pipeline_id", "ts"), "t."),
}
#: the columns a live view folds per attempt (``attempt_summaries``), and per event
_ATTEMPT_SUMMARY = 't."attempt_id", t."duration_ms", t."ended_at", t."outcome"'
_EVENT_SUMMARY = ", ".join(
    EVENTS.read_columns()[EVENTS.columns.index(c)] for c in ("event_id", "kind", "pipeline_id", "ts")
)


class StoreAggregates(StoreConnection):
    """``stats``, ``pipeline_totals``, ``task_counts``, counts and the narrow summaries."""

    def pipeline_summaries(
        self, run_id: str | None = None, page: int = 5000
    ) -> Iterator[tuple[str, str, float | None, float | None, int]]:
        """``(pipeline_id, state, started_at, finished_at, attempts_total)`` of every pipeline
        row of ``run_id`` (None: all), in storage order and read in pages. Optional method: a
        merged report folds stores on these five columns and reads whole rows only for the
        failed pipelines it shows."""
        # a range scan of the table in pk order (``+run_id``: not through the (run_id, state)
        # index, whose rows would have to be sorted by pk again for every page)
        where = "WHERE pk > ? AND +run_id = ?" if run_id is not None else "WHERE pk > ?"
        sql = (
            "SELECT pipeline_id, state, started_at, finished_at, ifnull(attempts_total, 0), pk,"
            f" {_SUMMARY_TYPED} FROM pipelines {where} ORDER BY pk LIMIT ?"
        )
        after = 0
        while True:
            params = (after, run_id, page) if run_id is not None else (after, page)
            rows = self._query(sql, params)
            if not all(map(_LAST, rows)):
                self._raise_corrupt(PIPELINES, "pk = ?", (next(r[5] for r in rows if not r[6]),))
            yield from map(_SUMMARY, rows)  # the first five columns, without a Python loop
            if len(rows) < page:
                return
            after = rows[-1][5]

    def pipeline_totals(self, run_id: str | None = None) -> tuple[dict[str, int], Sequence[float], int]:
        """``({state: count}, sorted durations in ms, sum of attempts_total)`` over the pipeline
        rows of ``run_id`` (None: all), read in one transaction. Optional method: a report over
        one store needs these three, not a fold of every row (a duration is
        ``(finished_at - started_at) * 1000.0`` of a row that has both, as the fold computes it).
        The durations are a packed array: 8 bytes per pipeline, however large the run."""
        where, params = _run_filter(run_id)
        with self._snapshot() as conn:
            totals = conn.execute(
                f"SELECT state, COUNT(*), SUM(ifnull(attempts_total, 0)), SUM(NOT {_STATE_TYPED})"
                f" FROM pipelines{where} GROUP BY state",
                params,
            ).fetchall()
            durations = _sorted_durations(conn, run_id)
        if any(bad for *_, bad in totals):
            and_run, run_params = _run_filter(run_id, " AND")
            self._raise_corrupt(PIPELINES, f"NOT {_STATE_TYPED}{and_run}", run_params)
        by_state = {state: int(n) for state, n, _, _ in totals}
        return by_state, durations, sum(int(a) for _, _, a, _ in totals)

    def pipeline_counts(self, run_id: str | None = None) -> dict[str, int]:
        """``{state: count}`` of the pipeline rows of ``run_id`` (None: all), counted in the
        ``(run_id, state)`` index alone: no row read, no duration sorted. Grouped in the index's
        own order (by run, then state), so SQLite builds no temporary tree for the groups."""
        if run_id is not None:
            sql = "SELECT state, COUNT(*) FROM pipelines WHERE run_id = ? GROUP BY state"
            return {state: int(n) for state, n in self._query(sql, (run_id,))}
        out: dict[str, int] = {}
        for _run, state, n in self._query(
            "SELECT run_id, state, COUNT(*) FROM pipelines GROUP BY run_id, state", ()
        ):
            out[state] = out.get(state, 0) + int(n)
        return out

    def task_counts(self, run_id: str | None = None) -> dict[str, dict[str, int]]:
        """``{task name: {state: count}}`` over the task rows of ``run_id`` whose pipeline row is
        of ``run_id`` too (None: every task row that has a pipeline row). Optional method: a
        merged report asks for it instead of reading every task row.

        The types are tested once per group, not per row: ``name`` and ``state`` may only be
        text, and a text value never groups with a value of another type, so a group's own
        value is bad exactly when one of its rows is (a read after a shard's run waits on this)."""
        head = f"SELECT t.name, t.state, COUNT(*), NOT {_TASK_COUNT_TYPED}"
        if run_id is None:
            sql = f"{head} FROM tasks AS t JOIN pipelines AS p ON p.pk = t.pk GROUP BY t.name, t.state"
            params: tuple[Any, ...] = ()
        else:
            sql = (
                f"{head} FROM tasks AS t JOIN pipelines AS p ON p.pk = t.pk"
                " WHERE t.run_id = ? AND p.run_id = ? GROUP BY t.name, t.state"
            )
            params = (run_id, run_id)
        rows = self._query(sql, params)
        if any(bad for *_, bad in rows):
            self._raise_corrupt(TASKS, f"NOT {_TASK_STATS_TYPED}")
        out: dict[str, dict[str, int]] = {}
        for name, state, n, _ in rows:
            out.setdefault(name, {})[state] = int(n)
        return out

    def count_rows(self, kind: str, run_id: str | None = None) -> int:
        """Rows of ``kind`` that ``page(kind, run_id=run_id)`` would return, counted in SQL
        (optional method: a merged report needs the event count, not the events)."""
        if kind not in PAGE_CODECS:
            raise ValueError(f"unknown row kind {kind!r}; expected one of {', '.join(PAGE_KINDS)}")
        by_run = run_id is not None and "run_id" in PAGE_FILTERS[kind]
        sql = count_sql(kind, by_run, self.has_spans)
        return int(self._query(sql, (run_id,) if by_run else ())[0][0])

    def count_handoffs(self, run_id: str | None = None) -> int:
        """Handoffs committed by ``run_id`` (restarts of a traversal are not counted)."""
        if not self.has_ledger:
            return 0
        return sum(self.handoffs_by_operation(run_id).values())

    def handoffs_by_operation(self, run_id: str | None = None) -> dict[str, int]:
        """``{operation: count}`` of the handoffs of ``run_id`` (restart rows are not handoffs)."""
        if not self.has_ledger:
            return {}
        and_run, params = _run_filter(run_id, " AND")
        rows = self._query(
            "SELECT operation, COUNT(*) FROM handoffs WHERE operation != 'restart'"
            f"{and_run} GROUP BY operation ORDER BY operation",
            params,
        )
        return {str(op): int(n) for op, n in rows}

    def attempt_summaries(
        self, run_id: str | None, after: int | None, limit: int
    ) -> list[tuple[int, float, float, str]]:
        """``(attempt_id, duration_ms, ended_at, outcome)`` of the attempts ``page("attempts",
        run_id=run_id, after=(after,), limit=limit)`` would return (optional method): a live
        view folds these four columns, and decoding whole rows (their JSON included) would make
        its first catch-up with a large run slow."""
        return self._summaries("attempts", _ATTEMPT_SUMMARY, run_id, after, limit)

    def event_summaries(
        self, run_id: str | None, after: int | None, limit: int
    ) -> list[tuple[int, str, str | None, float]]:
        """``(event_id, kind, pipeline_id, ts)`` of the events ``page("events", run_id=run_id,
        after=(after,), limit=limit)`` would return (optional method): a live view counts kinds
        and follows parked pipelines from these, without decoding every event's JSON."""
        return self._summaries("events", _EVENT_SUMMARY, run_id, after, limit)

    def _summaries(
        self, kind: str, select: str, run_id: str | None, after: int | None, limit: int
    ) -> list[Any]:
        if limit <= 0:
            return []
        filters = ("run_id",) if run_id is not None else ()
        params = [*([run_id] if run_id is not None else []), *([after] if after is not None else []), limit]
        typed = _SUMMARY_TYPES[kind]
        sql = page_sql(kind, filters, after is not None, f"{select}, {typed}", self.has_spans, self._ids)
        rows = self._query(sql, params)
        if not all(map(_LAST, rows)):
            codec = PAGE_CODECS[kind]
            bad = next(r[0] for r in rows if not r[-1])
            self._raise_corrupt(codec, f'"{codec.plain[0]}" = ?', (bad,))
        return [r[:-1] for r in rows]

    def stats(self, run_id: str | None = None) -> dict[str, Any]:
        """Aggregates in SQL, read in one transaction so the numbers agree with each other."""
        try:
            with self._snapshot("stats") as conn:
                return _stats(conn, run_id, self.has_ledger, self.has_spans)
        except CorruptRow as exc:
            raise exc.at(self.path) from None


def _run_filter(run_id: str | None, prefix: str = " WHERE") -> tuple[str, tuple[Any, ...]]:
    return (f"{prefix} run_id = ?", (run_id,)) if run_id is not None else ("", ())


def _sorted_durations(conn: sqlite3.Connection, run_id: str | None) -> array[float]:
    """``(finished_at - started_at) * 1000.0`` of the pipeline rows of ``run_id`` that have both,
    ascending, packed (8 bytes each: a report over a million pipelines keeps 8 MB of them)."""
    and_run, params = _run_filter(run_id, " AND")
    rows = conn.execute(
        "SELECT (finished_at - started_at) * 1000.0 AS d FROM pipelines"
        f" WHERE finished_at IS NOT NULL AND started_at IS NOT NULL{and_run} ORDER BY d",
        params,
    )
    return array("d", (d for (d,) in rows))


def _stats(conn: sqlite3.Connection, run_id: str | None, ledger: bool, spans: bool) -> dict[str, Any]:
    params = (run_id,) if run_id is not None else ()
    states = _typed_counts(conn, PIPELINES, _STATE_TYPED, "state", run_id)
    by_state = {state: n for state, n, _ in states}
    durations = _sorted_durations(conn, run_id)
    by_name: dict[str, dict[str, int]] = {}
    tasks = _typed_counts(conn, TASKS, _TASK_STATS_TYPED, "name, state", run_id)
    for name, state, n, _ in tasks:
        by_name.setdefault(name, {})[state] = n
    attempts = conn.execute(count_sql("attempts", run_id is not None, spans), params).fetchone()[0]
    events = conn.execute(count_sql("events", run_id is not None, spans), params).fetchone()[0]
    by_operation: dict[str, int] = {}
    if ledger:
        and_run, _ = _run_filter(run_id, " AND")
        rows = conn.execute(
            "SELECT operation, COUNT(*) FROM handoffs WHERE operation != 'restart'"
            f"{and_run} GROUP BY operation ORDER BY operation",
            params,
        )
        by_operation = {str(op): int(n) for op, n in rows}
    return {
        "pipelines": {
            "total": sum(by_state.values()),
            "by_state": by_state,
            "duration_ms": duration_summary(durations),
        },
        "tasks": {"by_name": by_name},
        "attempts_total": attempts,
        "events_total": events,
        "handoffs_total": sum(by_operation.values()),
    }


def _typed_counts(
    conn: sqlite3.Connection, codec: RowCodec[Any], typed: str, columns: str, run_id: str | None
) -> list[Any]:
    """``(*columns, count, rows failing typed)`` per group of ``codec``'s table (of ``run_id``),
    in ``columns`` order; a failing row is raised as ``CorruptRow`` (``_check_counted``)."""
    where, params = _run_filter(run_id)
    groups = conn.execute(
        f'SELECT {columns}, COUNT(*), SUM(NOT {typed}) FROM "{codec.table}"{where}'
        f" GROUP BY {columns} ORDER BY {columns}",
        params,
    ).fetchall()
    _check_counted(conn, codec, typed, groups, run_id)
    return groups


def _check_counted(
    conn: sqlite3.Connection, codec: RowCodec[Any], typed: str, groups: list[Any], run_id: str | None
) -> None:
    """Groups whose last column counts rows failing ``typed``: raise the first such row's
    ``CorruptRow`` (without the store's path; ``stats`` adds it)."""
    if any(group[-1] for group in groups):
        and_run, params = _run_filter(run_id, " AND")
        row = conn.execute(rows_where(codec, f"NOT {typed}{and_run} LIMIT 1"), params).fetchone()
        if row is not None:
            raise codec.corrupt(row)
