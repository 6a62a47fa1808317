"""Write statements specialised per NULL pattern, so ``None`` is never bound as a parameter.

CPython's ``sqlite3`` binds exact ``int``/``float``/``str``/``bytearray`` values directly but
sends every other value, ``None`` included, through its adapter lookup first; on this workload
that lookup cost more than the rest of the binding. A statement therefore writes the columns
that are ``None`` in a row as literal ``NULL``s and binds only the others.

Per pattern of ``None``s, the statement compiles one small function that turns a record (and
its clustering key ``pk``) straight into the parameters of that variant: one call per row, no
intermediate tuple. Rows are applied in their original order (consecutive rows with the same
pattern share one ``executemany``), so an upsert of the same key twice in one batch still ends
with the last row.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from typing import Any

from .rows import RowCodec, compile_function

__all__ = ["Statement"]

#: renders the SQL for one tuple of value markers ("?" or "NULL"), one per parameter
Render = Callable[[tuple[str, ...]], str]
Encoder = Callable[..., tuple[Any, ...]]
#: every compiled function takes (record, pk); tables without a pk ignore it
_ARGS = "r, pk"


class Statement:
    """One INSERT/UPSERT of ``codec`` rows, optionally preceded by the row's ``pk``.

    ``run(conn, records, pk_of)`` writes records; ``pk_of`` (clustered tables) maps a pipeline
    id to its ``pk``, which may be None for rows that belong to no pipeline.
    """

    __slots__ = ("_cache", "_codec", "_key", "_nullable", "_render", "clustered", "full_sql")

    def __init__(self, render: Render, codec: RowCodec[Any], *, clustered: bool = False) -> None:
        self._render = render
        self._codec = codec
        self.clustered = clustered
        width = len(codec.columns) + clustered
        self.full_sql = render(("?",) * width)
        tests = [f"r.{f} is None" for f in codec.nullable_fields]
        if clustered:
            tests.insert(0, "pk is None")
        #: parameter positions that may be None, in the order of the pattern key
        self._nullable = ((0,) if clustered else ()) + tuple(i + clustered for i in codec.nullable)
        self._key: Callable[..., tuple[bool, ...]] = compile_function(
            "key", _ARGS, f"({', '.join(tests)},)" if tests else "()", f"{codec.table} null pattern"
        )
        self._cache: dict[tuple[bool, ...], tuple[str, Encoder]] = {}

    def _variant(self, key: tuple[bool, ...]) -> tuple[str, Encoder]:
        null = {p for p, is_none in zip(self._nullable, key, strict=True) if is_none}
        width = len(self._codec.columns) + self.clustered
        exprs = (("pk",) if self.clustered else ()) + self._codec.expressions
        marks = tuple("NULL" if i in null else "?" for i in range(width))
        kept = [e for i, e in enumerate(exprs) if i not in null]
        encode = compile_function(
            "params", _ARGS, f"({', '.join(kept)},)", f"{self._codec.table} row parameters"
        )
        entry = (self._render(marks), encode)
        self._cache[key] = entry
        return entry

    def run(
        self, conn: sqlite3.Connection, records: Iterable[Any], pk_of: Callable[[str], Any] | None = None
    ) -> None:
        """Apply ``records`` in order."""
        key_of, cache = self._key, self._cache
        current: tuple[bool, ...] | None = None
        sql = ""
        encode: Encoder | None = None
        group: list[tuple[Any, ...]] = []
        for rec in records:
            pk = None if pk_of is None else pk_of(rec.pipeline_id)
            key = key_of(rec, pk)
            if key != current:
                if group:
                    conn.executemany(sql, group)
                    group = []
                current = key
                sql, encode = cache.get(key) or self._variant(key)
            assert encode is not None
            group.append(encode(rec, pk))
        if group:
            conn.executemany(sql, group)
