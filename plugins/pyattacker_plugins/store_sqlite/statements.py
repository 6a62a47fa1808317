"""Write statements specialised per NULL pattern, so ``None`` is never bound as a parameter.

CPython's ``sqlite3`` binds exact ``int``/``float``/``str``/``bytearray`` values directly but
sends every other value, ``None`` included, through its adapter lookup first, a cost per value
on top of the binding itself. A statement therefore writes the columns that are ``None`` in a
row as literal ``NULL``s and binds only the others.

Per pattern of ``None``s, the statement compiles one small function that turns records (and
their clustering key ``pk``) straight into the parameters of that variant, one flat list for all
the rows, and one per table that computes every record's pattern (a list comprehension): no
Python call per row. Rows are
applied in their original order (consecutive rows with the same pattern share one statement),
so an upsert of the same key twice in one batch still ends with the last row.

Consecutive rows of one variant go to SQLite as multi-row ``INSERT ... VALUES (...), (...)``
statements, not an ``executemany``: SQLite then steps once per statement instead of once per
row (``write_rows``).

Text columns whose value the rows of one commit usually share (a table's ``RowCodec.shared``:
the run id, a state, the decision of a success) are bound once per statement when every row of
a group holds the same text: SQLite reads a bound parameter without a copy, where a text bound
per row is copied into fresh memory (``write_shared_rows``). Such a statement declares the
shared values first, in a common table expression nobody reads (``WITH _shared AS (SELECT ?1,
?2) INSERT ... VALUES (?1, ?, ?2, ?), ...``), so that they take the numbers 1..k and every other
marker is a plain ``?`` that SQLite numbers after them in the text's order. Only those k markers
have a name: from Python 3.12 on, ``sqlite3`` asks SQLite for the name of every value it binds
from a sequence (to warn about named placeholders, gh-101693), and SQLite looks a numbered
parameter's name up by a linear search of the statement's named ones, so a statement that
numbered each of its n values would cost O(n²). A group whose rows differ there binds every
value. Either way the same values are stored.

CPython 3.12.0 to 3.12.3 (Ubuntu 24.04's Python among them) also issue a ``DeprecationWarning``
for every numbered value bound from a sequence (gh-117995, fixed in 3.12.4): where they run
(``BIND_ONCE`` false), nothing is bound once and every marker is a plain ``?``.
"""

from __future__ import annotations

import itertools
import operator
import sqlite3
import sys
from collections.abc import Callable, Sequence
from typing import Any

from .rows import PIPELINE_ID, RowCodec, compile_block, compile_function

__all__ = ["Statement", "write_rows", "write_shared_rows"]

#: rows per multi-row statement, at most; a group is cut into power-of-two chunks so a table
#: needs at most seven texts per variant in the connection's statement cache
MAX_ROWS_PER_STATEMENT = 64
_chain = itertools.chain.from_iterable
#: the types of a group's shared values when they are bound once
_TEXT = {str}
#: (one-row SQL, rows) -> the same statement with its VALUES row repeated
_MULTI: dict[tuple[str, int], str] = {}


#: shared values bound once (as ``?1..?k``): not where ``sqlite3`` warns per numbered value
BIND_ONCE = not ((3, 12, 0) <= sys.version_info[:3] < (3, 12, 4))


def _rows_per_statement(conn: sqlite3.Connection, width: int, extra: int = 0) -> int:
    """The most rows of ``width`` parameters (plus ``extra`` for the statement) one statement may
    carry on ``conn``: SQLite allows 32,766 parameters per statement since 3.32, and 999 before
    (a system library may be older)."""
    limit = conn.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER)
    most = MAX_ROWS_PER_STATEMENT
    while most > 1 and most * width + extra > limit:
        most >>= 1
    return most


def _split_values(sql: str) -> tuple[str, str, str]:
    """``(head, "(row)", tail)`` of a one-row ``INSERT ... VALUES (row) tail`` statement."""
    head, sep, rest = sql.partition(" VALUES (")
    if not sep:
        raise ValueError(f"not a one-row INSERT ... VALUES statement: {sql}")
    depth, end = 1, 0
    while depth:
        depth += {"(": 1, ")": -1}.get(rest[end], 0)
        end += 1
    return head, "(" + rest[:end], rest[end:]


def _repeat_values(sql: str, n: int) -> str:
    """``sql`` with its single ``VALUES (...)`` row written ``n`` times."""
    head, row, tail = _split_values(sql)
    return f"{head} VALUES {', '.join([row] * n)}{tail}"


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


def write_shared_rows(
    conn: sqlite3.Connection, sql_for: Callable[[int], str], k: int, params: list[Any], n: int
) -> None:
    """Like ``write_rows``, for ``n`` rows whose parameters are already one flat list: the ``k``
    values every row shares first (``sql_for(rows)``, the statement of that many rows, reads
    them as ``?1..?k``, bound once), then each row's own values, row after row."""
    width = (len(params) - k) // n
    most = _rows_per_statement(conn, width, k)
    if n <= most and not n & (n - 1):  # one statement of all the rows: the list as it is
        conn.execute(sql_for(n), params)
        return
    shared = params[:k]
    start = 0
    while start < n:
        size = most
        while size > n - start:
            size >>= 1
        first = k + start * width
        conn.execute(sql_for(size), shared + params[first : first + size * width])
        start += size


#: renders the SQL for one tuple of value markers ("?", "?N" or "NULL"), one per parameter
Render = Callable[[tuple[str, ...]], str]
#: ``(records, pk_of) -> one tuple per record``: the keys (NULL pattern and shared values)
RowsFunction = Callable[[Sequence[Any], Any], list[tuple[Any, ...]]]
#: ``(records, keys, pk_of, out) -> out``: one variant's parameters of every record, appended
#: to ``out`` (the shared values) as one flat list
ParamsFunction = Callable[[Sequence[Any], list[tuple[Any, ...]], Any, list[Any]], list[Any]]
#: a variant: its SQL (rows -> statement text), its parameters and the positions in a key of
#: the shared values it binds once
Variant = tuple[Callable[[int], str], ParamsFunction, tuple[int, ...]]
#: every compiled function takes the records and the ``pk`` lookup; tables without a pk ignore it
_ARGS = "rows, pk_of"
#: a clustered row's first parameter, its pipeline's ``pk``
_PK = "pk_of(r.pipeline_id)"


def _per_row(
    name: str, expressions: list[str], label: str, args: str = _ARGS, each: str = "r in rows"
) -> Any:
    """``[(expressions...) for r in rows]`` compiled once: a list comprehension runs no Python
    call per row, where a function per row would cost two (the pattern and the parameters). ``each``
    is the comprehension's loop (``r, k in zip(rows, keys)`` reads values from the keys too)."""
    body = f"[({', '.join(expressions)},) for {each}]" if expressions else f"[() for {each}]"
    return compile_function(name, args, body, label)


class Statement:
    """One INSERT/UPSERT of ``codec`` rows, optionally preceded by the row's ``pk``.

    ``run(conn, records, pk_of)`` writes records; ``pk_of`` (clustered tables) maps every
    non-empty pipeline id to its ``pk``; rows that belong to no pipeline (an empty or None id)
    are written with a NULL ``pk``.

    Each record's key is its pattern (which columns are None) followed by the values of the
    codec's ``shared`` columns. Rows are grouped by pattern; a group whose rows also agree on
    the shared values binds them once (unless ``bind_once`` is false). The pattern also says
    which of the codec's derived values a row may leave out (schema 4): its pipeline id when it
    has a ``pk`` (written ``NULL``), a slot id equal to ``pipeline_id:seq`` and the shared OK
    decision (``x''``).
    """

    __slots__ = (
        "_cache", "_codec", "_keys", "_m", "_markers", "_nullable", "_of_pk", "_render", "_shared",
        "bind_once", "clustered", "full_sql",
    )  # fmt: skip

    def __init__(self, render: Render, codec: RowCodec[Any], *, clustered: bool = False) -> None:
        self._render = render
        self._codec = codec
        self.clustered = clustered
        #: shared values bound once per statement (``BIND_ONCE``; an attribute, so a test may force
        #: either mode on any Python)
        self.bind_once = BIND_ONCE
        width = len(codec.columns) + clustered
        self.full_sql = render(("?",) * width)
        tests = [f"r.{f} is None" for f in codec.nullable_fields]
        if clustered:  # (``pk_of`` maps every non-empty id: no lookup per row for the pattern)
            tests.insert(0, "not r.pipeline_id")
        #: parameter positions that may be None, in the order of the pattern key
        self._nullable = ((0,) if clustered else ()) + tuple(i + clustered for i in codec.nullable)
        # derived ids (schema 4, ``rows.PIPELINE_ID`` / ``SLOT_ID``): only a row with a pk has them
        derived = codec.derived if clustered else {}
        #: parameter positions of the pipeline id columns (stored NULL when the row has a pk)
        self._of_pk = tuple(i + 1 for i, kind in derived.items() if kind == PIPELINE_ID)
        markers = [i for i, kind in derived.items() if kind != PIPELINE_ID]
        #: parameter positions of the columns stored as x'' when their value is the derived one
        #: (a slot's own id, the shared OK decision)
        self._markers = tuple(i + 1 for i in markers)
        tests += [codec.marker_test(i) for i in markers]
        #: parameter positions of the shared columns, in the order their values end a key
        self._shared = tuple(i + clustered for i in codec.shared)
        #: the length of a key's pattern (the shared values follow it)
        self._m = len(tests)
        exprs = ((_PK,) if clustered else ()) + codec.expressions
        shared = [exprs[p] for p in self._shared]
        self._keys: RowsFunction = _per_row("keys", tests + shared, f"{codec.table} null patterns")
        self._cache: dict[tuple[tuple[Any, ...], bool], Variant] = {}

    def _variant(self, pattern: tuple[bool, ...], shared: bool) -> Variant:
        """The statement and parameters of one pattern; ``shared``: with the shared columns
        bound once, declared as ``?1..?k`` ahead of the INSERT, each row's own values after them
        as plain markers."""
        n_null = len(self._nullable)
        null = {p for p, is_none in zip(self._nullable, pattern[:n_null], strict=True) if is_none}
        if self._of_pk and not pattern[0]:  # (the first test of a clustered row: no pk)
            null.update(self._of_pk)  # the pk names the pipeline
        bits = pattern[n_null : self._m]
        marked = {p for p, same in zip(self._markers, bits, strict=True) if same} - null
        literal = null | marked
        width = len(self._codec.columns) + self.clustered
        exprs = ((_PK,) if self.clustered else ()) + self._codec.expressions
        #: where a shared column's value is in the key (computed once per row, never twice)
        at = {p: self._m + j for j, p in enumerate(self._shared)}
        bound = [p for p in self._shared if p not in literal] if shared else []
        number = {p: f"?{j + 1}" for j, p in enumerate(bound)}
        own = [p for p in range(width) if p not in literal and p not in number]
        marks = ["NULL" if p in null else "x''" if p in marked else number.get(p, "?") for p in range(width)]
        row = "(" + ", ".join(marks) + ")"
        head, _, tail = _split_values(self._render(("?",) * width))
        if bound:  # the shared values first in the text: SQLite numbers the plain markers after them
            head = f"WITH _shared AS (SELECT {', '.join(number[p] for p in bound)}) {head}"
        texts: dict[int, str] = {}

        def sql_for(rows: int) -> str:
            text = texts.get(rows)
            if text is None:
                text = texts[rows] = f"{head} VALUES {', '.join([row] * rows)}{tail}"
            return text

        kept = [f"k[{at[p]}]" if p in at else exprs[p] for p in own]
        each = "r, k in zip(rows, keys)" if any(p in at for p in own) else "r in rows"
        # one flat list, each row's values added as a tuple (copied in C): SQLite takes the
        # parameters of a multi-row statement as one sequence, and flattening a list of row
        # tuples afterwards would cost as much again, value by value
        params = compile_block(
            "params",
            "rows, keys, pk_of, out",
            f"    for {each}:\n        out += ({''.join(e + ', ' for e in kept)})\n    return out\n",
            f"{self._codec.table} row parameters",
        )
        entry: Variant = (sql_for, params, tuple(at[p] for p in bound))
        self._cache[(pattern, shared)] = entry
        return entry

    def run(
        self, conn: sqlite3.Connection, records: Sequence[Any], pk_of: Callable[[str], Any] | None = None
    ) -> None:
        """Apply ``records`` in order: each run of consecutive rows with one pattern is one
        variant's statements."""
        if not records:
            return
        keys = self._keys(records, pk_of)
        first = keys[0]
        if keys.count(first) == len(keys):  # one pattern and shared values, the usual case: no cutting
            self._write(conn, records, keys, True, pk_of)
            return
        # where the pattern changes: the positions whose key differs from the one before (in C)
        m = self._m
        patterns = [k[:m] for k in keys] if self._shared else keys
        cuts = list(itertools.compress(range(1, len(keys)), map(operator.ne, patterns[1:], patterns)))
        start = 0
        for end in (*cuts, len(keys)):
            part = keys[start:end]
            self._write(conn, records[start:end], part, part.count(part[0]) == end - start, pk_of)
            start = end

    def _write(
        self,
        conn: sqlite3.Connection,
        records: Sequence[Any],
        keys: list[tuple[Any, ...]],
        same: bool,
        pk_of: Callable[[str], Any] | None,
    ) -> None:
        """Write rows of one pattern; ``same``: their keys are equal (shared values too)."""
        pattern = keys[0][: self._m]
        cache = self._cache
        if same and self._shared and len(keys) > 1 and self.bind_once:
            sql_for, params, picked = cache.get((pattern, True)) or self._variant(pattern, True)
            key = keys[0]
            values = tuple([key[i] for i in picked])
            # only texts: a value equal to another of another type (1 and 1.0) may store differently
            if values and set(map(type, values)) == _TEXT:  # (in C: no generator per group)
                flat = params(records, keys, pk_of, list(values))
                write_shared_rows(conn, sql_for, len(values), flat, len(records))
                return
        sql_for, params, _ = cache.get((pattern, False)) or self._variant(pattern, False)
        write_shared_rows(conn, sql_for, 0, params(records, keys, pk_of, []), len(records))
