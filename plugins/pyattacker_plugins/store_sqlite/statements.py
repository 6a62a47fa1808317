"""Write statements specialised per NULL pattern, so ``None`` is never bound as a parameter.

CPython's ``sqlite3`` binds exact ``int``/``float``/``str``/``bytearray`` values directly but
sends every other value, ``None`` included, through its adapter lookup first; on this workload
that lookup cost more than the rest of the binding. A statement therefore writes the columns
that are ``None`` in a row as literal ``NULL``s and binds only the others. Rows are applied in
their original order (consecutive rows with the same pattern share one ``executemany``), so an
upsert of the same key twice in one batch still ends with the last row.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from itertools import compress
from operator import is_, itemgetter
from typing import Any

__all__ = ["Statement"]

#: renders the SQL for one tuple of value markers ("?" or "NULL"), one per parameter
Render = Callable[[tuple[str, ...]], str]


class Statement:
    """One INSERT/UPSERT whose parameters at ``nullable`` positions may be ``None``."""

    __slots__ = ("_cache", "_nones", "_pick", "_positions", "_render", "_width", "full_sql")

    def __init__(self, render: Render, width: int, nullable: Iterable[int]) -> None:
        positions = tuple(nullable)
        self._render = render
        self._width = width
        self.full_sql = render(("?",) * width)
        # itemgetter of one index returns the item, not a tuple: always ask for two or more
        self._pick = (
            itemgetter(*positions, *positions) if len(positions) == 1 else itemgetter(*positions or (0,))
        )
        self._nones = (None,) * (2 if len(positions) == 1 else len(positions))
        self._cache: dict[tuple[bool, ...], tuple[str, tuple[bool, ...] | None]] = {}
        self._positions = positions

    def _variant(self, key: tuple[bool, ...]) -> tuple[str, tuple[bool, ...] | None]:
        null = {p for p, is_none in zip(self._positions, key, strict=False) if is_none}
        if not null:
            entry: tuple[str, tuple[bool, ...] | None] = (self.full_sql, None)
        else:
            marks = tuple("NULL" if i in null else "?" for i in range(self._width))
            entry = (self._render(marks), tuple(i not in null for i in range(self._width)))
        self._cache[key] = entry
        return entry

    def run(self, conn: sqlite3.Connection, rows: Iterable[tuple[Any, ...]]) -> None:
        """Apply ``rows`` (full parameter tuples) in order."""
        if not self._positions:
            conn.executemany(self.full_sql, rows)
            return
        pick, nones, cache = self._pick, self._nones, self._cache
        current: tuple[bool, ...] | None = None
        sql = ""
        keep: tuple[bool, ...] | None = None
        group: list[tuple[Any, ...]] = []
        for row in rows:
            key = tuple(map(is_, pick(row), nones))
            if key != current:
                if group:
                    conn.executemany(sql, group)
                    group = []
                current = key
                sql, keep = cache.get(key) or self._variant(key)
            group.append(row if keep is None else tuple(compress(row, keep)))
        if group:
            conn.executemany(sql, group)
