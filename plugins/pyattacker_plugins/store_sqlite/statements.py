"""Write statements specialised per NULL pattern, so ``None`` is never bound as a parameter.

CPython's ``sqlite3`` binds exact ``int``/``float``/``str``/``bytearray`` values directly but
sends every other value, ``None`` included, through its adapter lookup first; on this workload
that lookup cost more than the rest of the binding. A statement therefore writes the columns
that are ``None`` in a row as literal ``NULL``s and binds only the others.

Per pattern of ``None``s, the statement compiles one small function that turns records (and
their clustering key ``pk``) straight into the parameters of that variant, and one per table
that computes every record's pattern: list comprehensions, so no Python call per row. Rows are
applied in their original order (consecutive rows with the same pattern share one statement),
so an upsert of the same key twice in one batch still ends with the last row.

Consecutive rows of one variant go to SQLite as multi-row ``INSERT ... VALUES (...), (...)``
statements, not an ``executemany``: SQLite then steps once per statement instead of once per
row, which saves about 9 % of all instructions per task on the overhead workload (``write_rows``;
docs/performance.md, eleventh pass).
"""

from __future__ import annotations

import itertools
import operator
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from .rows import RowCodec, compile_function

__all__ = ["Statement", "write_rows"]

#: rows per multi-row statement, at most; a group is cut into power-of-two chunks so a table
#: needs at most seven texts per variant in the connection's statement cache
MAX_ROWS_PER_STATEMENT = 64
_chain = itertools.chain.from_iterable
#: (one-row SQL, rows) -> the same statement with its VALUES row repeated
_MULTI: dict[tuple[str, int], str] = {}


def _rows_per_statement(conn: sqlite3.Connection, width: int) -> int:
    """The most rows of ``width`` parameters one statement may carry on ``conn``: SQLite allows
    32,766 parameters per statement since 3.32, and 999 before (a system library may be older)."""
    limit = conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
    most = MAX_ROWS_PER_STATEMENT
    while most > 1 and most * width > limit:
        most >>= 1
    return most


def _repeat_values(sql: str, n: int) -> str:
    """``sql`` with its single ``VALUES (...)`` row written ``n`` times."""
    head, sep, rest = sql.partition(" VALUES (")
    if not sep:
        raise ValueError(f"not a one-row INSERT ... VALUES statement: {sql}")
    depth, end = 1, 0
    while depth:
        depth += {"(": 1, ")": -1}.get(rest[end], 0)
        end += 1
    row = "(" + rest[:end]
    return f"{head} VALUES {', '.join([row] * n)}{rest[end:]}"


def write_rows(conn: sqlite3.Connection, sql: str, rows: list[tuple[Any, ...]]) -> None:
    """Apply the one-row INSERT (or upsert) ``sql`` to every row of ``rows``, in order."""
    n = len(rows)
    if n == 1:
        conn.execute(sql, rows[0])
        return
    most = _rows_per_statement(conn, len(rows[0]))
    start = 0
    while start < n:
        size = most
        while size > n - start:
            size >>= 1
        multi = _MULTI.get((sql, size))
        if multi is None:
            multi = _MULTI[(sql, size)] = _repeat_values(sql, size)
        conn.execute(multi, tuple(_chain(rows[start : start + size])))
        start += size


#: renders the SQL for one tuple of value markers ("?" or "NULL"), one per parameter
Render = Callable[[tuple[str, ...]], str]
#: ``(records, pk_of) -> one tuple per record``: the NULL patterns, or one variant's parameters
RowsFunction = Callable[[Sequence[Any], Any], list[tuple[Any, ...]]]
#: every compiled function takes the records and the ``pk`` lookup; tables without a pk ignore it
_ARGS = "rows, pk_of"
#: a clustered row's first parameter, its pipeline's ``pk``
_PK = "pk_of(r.pipeline_id)"


def _per_row(name: str, expressions: list[str], label: str) -> RowsFunction:
    """``[(expressions...) for r in rows]`` compiled once: a list comprehension runs no Python
    call per row, where a function per row cost two (the pattern and the parameters)."""
    body = f"[({', '.join(expressions)},) for r in rows]" if expressions else "[() for r in rows]"
    function: RowsFunction = compile_function(name, _ARGS, body, label)
    return function


class Statement:
    """One INSERT/UPSERT of ``codec`` rows, optionally preceded by the row's ``pk``.

    ``run(conn, records, pk_of)`` writes records; ``pk_of`` (clustered tables) maps every
    non-empty pipeline id to its ``pk``; rows that belong to no pipeline (an empty or None id)
    are written with a NULL ``pk``.
    """

    __slots__ = ("_cache", "_codec", "_keys", "_nullable", "_render", "clustered", "full_sql")

    def __init__(self, render: Render, codec: RowCodec[Any], *, clustered: bool = False) -> None:
        self._render = render
        self._codec = codec
        self.clustered = clustered
        width = len(codec.columns) + clustered
        self.full_sql = render(("?",) * width)
        tests = [f"r.{f} is None" for f in codec.nullable_fields]
        if clustered:  # (``pk_of`` maps every non-empty id: no lookup per row for the pattern)
            tests.insert(0, "not r.pipeline_id")
        #: parameter positions that may be None, in the order of the pattern key
        self._nullable = ((0,) if clustered else ()) + tuple(i + clustered for i in codec.nullable)
        self._keys = _per_row("keys", tests, f"{codec.table} null patterns")
        self._cache: dict[tuple[bool, ...], tuple[str, RowsFunction]] = {}

    def _variant(self, key: tuple[bool, ...]) -> tuple[str, RowsFunction]:
        null = {p for p, is_none in zip(self._nullable, key, strict=True) if is_none}
        width = len(self._codec.columns) + self.clustered
        exprs = ((_PK,) if self.clustered else ()) + self._codec.expressions
        marks = tuple("NULL" if i in null else "?" for i in range(width))
        kept = [e for i, e in enumerate(exprs) if i not in null]
        entry = (self._render(marks), _per_row("params", kept, f"{self._codec.table} row parameters"))
        self._cache[key] = entry
        return entry

    def run(
        self, conn: sqlite3.Connection, records: Sequence[Any], pk_of: Callable[[str], Any] | None = None
    ) -> None:
        """Apply ``records`` in order: each run of consecutive rows with one NULL pattern is
        one variant's statements."""
        if not records:
            return
        keys = self._keys(records, pk_of)
        cache = self._cache
        first = keys[0]
        if keys.count(first) == len(keys):  # one pattern, the usual case: no cutting
            sql, params = cache.get(first) or self._variant(first)
            write_rows(conn, sql, params(records, pk_of))
            return
        # where the pattern changes: the positions whose key differs from the one before (in C)
        cuts = list(itertools.compress(range(1, len(keys)), map(operator.ne, keys[1:], keys)))
        start = 0
        for end in (*cuts, len(keys)):
            key = keys[start]
            sql, params = cache.get(key) or self._variant(key)
            write_rows(conn, sql, params(records[start:end], pk_of))
            start = end
