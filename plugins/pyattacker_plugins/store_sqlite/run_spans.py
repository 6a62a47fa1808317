"""The span of ids each run wrote to ``attempts`` and ``events`` (schema 5, ``run_spans``).

Why: ``report --run-id``, ``watch`` and ``export`` read one run's rows, and an index on
``run_id`` for them would take an entry per row on the hot path. One writer at a time numbers
both tables in commit order, so a run's rows sit in a few ranges of the rowid. The writer
keeps the lowest and highest id each run wrote (one upsert per table and commit), and a read
by run scans the table between the two, keeping the rows whose ``run_id`` matches: exact
whatever the order of the rows, and as cheap as the index when runs follow each other (the
way one store is written).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .schema import SPAN_KINDS

__all__ = ["SOURCE", "UPSERT", "run_condition", "spans_of"]

#: widen (or start) a run's span in one table; ``?`` = run_id, kind, lo, hi
UPSERT = (
    "INSERT INTO run_spans (run_id, kind, lo, hi) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (run_id, kind) DO UPDATE SET lo = MIN(lo, excluded.lo), hi = MAX(hi, excluded.hi)"
)


def spans_of(kind: str, rows: Sequence[Any], first: int) -> list[tuple[str, str, int, int]]:
    """The span parameters of ``rows`` of ``kind`` numbered ``first, first + 1, ...``: one tuple
    per run among them (rows without a run have no span)."""
    run = rows[0].run_id
    last = first + len(rows) - 1
    for row in rows:
        if row.run_id != run:
            break
    else:  # (the usual batch: one run's rows)
        return [] if run is None else [(run, kind, first, last)]
    bounds: dict[str, list[int]] = {}
    for i, row in enumerate(rows, first):
        if row.run_id is not None:
            span = bounds.setdefault(row.run_id, [i, i])
            span[1] = i
    return [(run_id, kind, lo, hi) for run_id, (lo, hi) in bounds.items()]


#: the table that leads a read by run: its one row bounds the scan of the other table
SOURCE = "run_spans AS s CROSS JOIN "


def run_condition(kind: str, alias: str = "t") -> str:
    """The condition that keeps the rows of ``kind`` (as ``alias``) written by run ``?``, in
    place of ``alias.run_id = ?`` (one parameter too), for a statement whose FROM starts with
    ``SOURCE``: the run's span first (CROSS JOIN keeps it the outer loop), then a range of the
    rowid, then the run of each row in it."""
    column = SPAN_KINDS[kind]
    return (
        f"s.run_id = ? AND s.kind = '{kind}'"
        f' AND {alias}."{column}" BETWEEN s.lo AND s.hi AND {alias}."run_id" = s.run_id'
    )
