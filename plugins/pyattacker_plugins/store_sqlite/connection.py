"""``StoreConnection``: the one connection every part of ``SqliteStore`` goes through.

It holds what the writer and the readers share: the connection and the mutex around it, the
schema features the file has (a reader may see an older file, or one a writer migrates while it
is open), where a statement looks pipeline ids up, and the writer's memory of the keys it has
numbered. Every query goes through ``_query`` or ``_snapshot``, which name the file when
SQLite fails.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from pyattacker.errors import CorruptRow, StoreUnavailable
from pyattacker.store.writer_lock import WriterLock

from . import schema
from .read_sql import IDS_INDEXED, IDS_OLD, RUN_CREATED, rows_where
from .rows import RowCodec

__all__ = ["LOOKUP_CHUNK", "StoreConnection"]

#: ids per ``IN (...)`` query in ``lookup_pipelines`` (well under SQLite's variable limit)
LOOKUP_CHUNK = 512
_HAS_TABLE = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"


class StoreConnection:
    """The connection, its mutex and what the file holds; the base of ``SqliteStore``'s parts."""

    def __init__(
        self,
        path: str,
        conn: sqlite3.Connection,
        *,
        read_only: bool,
        lock: WriterLock | None,
        synchronous: str,
    ) -> None:
        self.location = path
        self.path = path
        self.read_only = read_only
        self.synchronous = synchronous
        self._conn: sqlite3.Connection | None = conn
        self._writer_lock = lock
        self._mutex = threading.RLock()
        #: the tables of later schema versions that the file has (``_has_table``): a reader of an
        #: older file has no ledger (schema 3), finds a run's rows through its run indexes
        #: (before 5) and looks ids up in the key table's own index (before 6)
        self._tables: set[str] = set() if read_only else set(schema.ADDED_TABLES)  # (a writer migrated it)
        #: pipeline id -> pk of committed key rows. Rows carry the pk itself (resolved here, not
        #: by a sub-select per row); bounded, since only pipelines in flight need to be here.
        self._known: dict[str, int] = {}
        #: ids that a lookup found without a key row: their first commit registers them without
        #: looking again (sound because this connection is the file's only writer: the writer
        #: lock; a commit that registers one takes it out, and clearing the set is always safe)
        self._absent: set[str] = set()
        self._next_pk = self._next_id("pipeline_keys", "pk")
        #: the writer's keys above ``store_meta.keys_indexed`` (id -> pk), which ``pipeline_ids``
        #: does not hold yet: complete, because the writer merges whatever a crash left before
        #: its first commit (``_merge_keys``), and nobody else registers keys (the writer lock)
        self._tail: dict[str, int] = {}
        self._indexed = 0

    def _has_table(self, name: str) -> bool:
        """Whether the file has ``name``, a table a later schema version added. Known for good once
        seen; a reader of an older file asks again until it is there: a writer may migrate the
        file while ``watch`` or ``serve`` keeps it open (a writer has migrated it already)."""
        if name not in self._tables and self._conn is not None and self._query(_HAS_TABLE, (name,)):
            self._tables.add(name)
        return name in self._tables

    @property
    def has_ledger(self) -> bool:
        """Whether the file has the control ledger (schema 3)."""
        return self._has_table("handoffs")

    @property
    def has_spans(self) -> bool:
        """Whether the file has ``run_spans`` (schema 5, see ``run_spans``)."""
        return self._has_table("run_spans")

    @property
    def has_ids(self) -> bool:
        """Whether the file has ``pipeline_ids`` (schema 6)."""
        return self._has_table("pipeline_ids")

    @property
    def _ids(self) -> str:
        """Where a statement looks pipeline ids up (see ``IDS_OLD``)."""
        return schema.KEY_IDS if self.has_ids else IDS_OLD

    def _ids_for(self, ids: Sequence[str]) -> str:
        """``_ids``, or for the writer the sorted index alone when none of ``ids`` is one of its
        own newer keys (the usual case: a resume's lookups then skip the scan of those rows)."""
        if self.read_only or not self.has_ids:
            return self._ids
        tail = self._tail
        return schema.KEY_IDS if tail and not tail.keys().isdisjoint(ids) else IDS_INDEXED

    def _next_id(self, table: str, column: str) -> int:
        row = self._db().execute(f'SELECT COALESCE(MAX("{column}"), 0) FROM "{table}"').fetchone()
        return int(row[0]) + 1

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreUnavailable(f"store {self.path} is closed")
        return self._conn

    def _writer(self) -> sqlite3.Connection:
        if self.read_only:
            raise StoreUnavailable(f"store {self.path} is open read-only")
        return self._db()

    @staticmethod
    def _rollback(conn: sqlite3.Connection) -> None:
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass

    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._mutex:
            try:
                return self._db().execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise StoreUnavailable(f"store {self.path}: read failed: {exc}") from exc

    def _run_in_order(self, run_id: str) -> tuple[str, Any, Any]:
        """The parameters of ``read_sql.PAGE_ORDER_RUN``: the run, its first and last ``created_at``."""
        lo, hi = self._query(RUN_CREATED, [run_id] * RUN_CREATED.count("?"))[0]
        return run_id, lo, hi

    def _query_snapshot(self, sqls: list[str], params: Sequence[Any]) -> list[list[Any]]:
        """The rows of each of ``sqls`` (same ``params``), all read in one transaction."""
        if len(sqls) == 1:
            return [self._query(sqls[0], params)]
        with self._snapshot() as conn:
            return [conn.execute(sql, params).fetchall() for sql in sqls]

    @contextmanager
    def _snapshot(self, what: str = "read") -> Iterator[sqlite3.Connection]:
        """The connection inside one read transaction (what the block reads agrees with itself)."""
        with self._mutex:
            conn = self._db()
            try:
                conn.execute("BEGIN")
                try:
                    yield conn
                finally:
                    conn.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback(conn)
                raise StoreUnavailable(f"store {self.path}: {what} failed: {exc}") from exc

    def _raise_corrupt(self, codec: RowCodec[Any], where: str, params: Sequence[Any] = ()) -> None:
        """Raise the ``CorruptRow`` of the first row of ``codec``'s table matching ``where`` (a
        narrow read saw a bad value: decoding the whole row names its column)."""
        rows = self._query(rows_where(codec, f"{where} LIMIT 1"), params)
        if rows:
            raise codec.corrupt(rows[0]).at(self.path)
        raise CorruptRow(f"table {codec.table}: a row changed while it was read", self.path)
