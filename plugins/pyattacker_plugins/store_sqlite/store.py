"""``SqliteStore``: the embedded default store, one SQLite file in WAL mode.

One writer connection (guarded by the sidecar writer lock) applies each ``Batch`` as one
``BEGIN IMMEDIATE ... COMMIT`` with a few multi-row statements per table; readers open ``mode=ro``
connections that never create or migrate anything and see consistent snapshots beside a live
writer. Every SQL string is built once; rows travel as tuples.

The class is its parts, each a mixin over the shared ``StoreConnection`` so that the commit
path calls its own methods directly: ``CommitPath`` (writes), ``RunRepair`` (what dead runs
left running), ``RowReads`` (whole rows) and ``StoreAggregates`` (numbers computed in SQL).
This module opens and closes it (``opening`` makes the connections).
"""

from __future__ import annotations

import logging
import os
import sqlite3

from pyattacker.errors import StoreUnavailable
from pyattacker.plugins.api import StoreBase
from pyattacker.store.writer_lock import WriterLock

from ..sync_behind import SyncBehind
from .aggregates import StoreAggregates
from .checkpointer import Checkpointer
from .commit import CommitPath
from .connection import LOOKUP_CHUNK
from .contents import KINDS, keep_log_aside, read_marker, shortfall
from .dashboard_reads import DashboardReads
from .opening import BUSY_TIMEOUT_MS, reader_connection, writer_connection
from .reads import RowReads
from .repair import RunRepair
from .run_notes import RunNotes
from .schema import probe
from .state_lookup import StateLookup
from .wal_bound import WalBound, truncate_wal

__all__ = ["SqliteStore"]

log = logging.getLogger("pyattacker")


class SqliteStore(CommitPath, RunRepair, RowReads, StoreAggregates, RunNotes, DashboardReads, StoreBase):
    """A pyattacker store in one SQLite file. Build it with ``open_writer`` / ``open_reader``."""

    #: keeps a control ledger (``has_ledger``: unless the file predates it) and applies
    #: ``Batch.resets``
    supports_handoffs = True
    #: ``commit_behind`` may return before the log is synced (``synchronous=full``)
    commits_behind = True
    #: stores ``Batch.logs`` (schema 8)
    keeps_logs = True

    def __init__(
        self,
        path: str,
        conn: sqlite3.Connection,
        *,
        read_only: bool,
        lock: WriterLock | None,
        synchronous: str,
    ) -> None:
        recorded = read_marker(path)  # before counting: a live writer only ever adds to both
        super().__init__(path, conn, read_only=read_only, lock=lock, synchronous=synchronous)
        self._next_attempt_id = self._next_id("attempts", "attempt_id")
        self._next_event_id = self._next_id("events", "event_id")
        self._next_handoff_id = self._next_id("handoffs", "handoff_id") if self.has_ledger else 1
        #: what is missing from the file compared with ``<file>.contents`` (None: nothing). A
        #: reader refuses the file; a writer keeps the log as it was aside, and a run refuses to
        #: start on it unless told to accept the loss (``fresh_restart``)
        self.lost_contents = shortfall(path, recorded, self.held())
        if self.lost_contents is not None:
            if read_only:
                conn.close()
                raise StoreUnavailable(self.lost_contents)
            self.lost_contents += keep_log_aside(path)
        if not read_only:
            self._indexed = self._merge_keys()
        self._states = StateLookup(
            self._query, LOOKUP_CHUNK, None if read_only else self._absent, self._ids_for
        )
        self.checkpointer = None if read_only else Checkpointer(path, synchronous)
        self.wal_bound = (
            None
            if self.checkpointer is None
            else WalBound(path + "-wal", BUSY_TIMEOUT_MS, exclusive=self.checkpointer.lock)
        )
        self.sync_behind = SyncBehind(path + "-wal") if not read_only and synchronous == "full" else None

    @classmethod
    def open_writer(cls, path: str, synchronous: str = "normal") -> SqliteStore:
        """Create/open the file for writing, holding the writer lock for the store's lifetime."""
        path = os.path.abspath(os.path.expanduser(path))
        with writer_connection(path, synchronous) as (conn, lock):
            return cls(path, conn, read_only=False, lock=lock, synchronous=synchronous)

    @classmethod
    def open_reader(cls, path: str) -> SqliteStore:
        """Open an existing store read-only (works beside a live writer; never writes)."""
        path = os.path.abspath(os.path.expanduser(path))
        recorded = read_marker(path)
        if recorded is not None and os.path.isfile(path) and probe(path) == 0:
            # an empty database that once held a run: name the loss, not "not a store"
            lost = shortfall(path, recorded, dict.fromkeys(KINDS, 0))
            if lost is not None:
                raise StoreUnavailable(lost)
        with reader_connection(path) as conn:
            return cls(path, conn, read_only=True, lock=None, synchronous="normal")

    def close(self) -> None:
        """Close the connection (WAL checkpointed by SQLite) and free the writer lock."""
        with self._mutex:
            if not self.read_only and self._conn is not None:
                # the newer keys into the sorted index, so readers after the run probe it alone
                # (if that fails they stay where they are, and are still found)
                try:
                    self._indexed = self._merge_keys()
                except StoreUnavailable as exc:
                    log.warning("pyattacker: %s (at close)", exc)
            conn, self._conn = self._conn, None
            if self.sync_behind is not None:
                self.sync_behind.stop()  # after the syncs requested so far
            if self.checkpointer is not None:
                self.checkpointer.stop()
            self._close_contents()
            try:
                if conn is not None:
                    if not self.read_only:
                        try:
                            conn.execute("PRAGMA optimize")
                        except sqlite3.Error:
                            pass
                        # SQLite removes the WAL when its last connection closes; a viewer
                        # still open would keep it at full size: empty it now if no reader is in it
                        truncate_wal(conn, BUSY_TIMEOUT_MS)
                    conn.close()
            finally:
                if self._writer_lock is not None:
                    self._writer_lock.release()

    def __enter__(self) -> SqliteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "read-only" if self.read_only else "writer"
        return f"SqliteStore({self.path!r}, {mode})"
