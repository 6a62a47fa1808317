"""Keep the WAL file bounded beside readers that never leave a gap.

SQLite starts its write-ahead log again from the beginning only at a moment when no reader holds a
snapshot in it. A dashboard polled by many clients can keep a reader in the log at every moment,
and the file then grows by everything the run writes. So the writer looks at the file's size now
and then, and past ``RESTART_AT`` bytes asks for a RESTART checkpoint: SQLite folds the log into
the database and waits, at most ``WAIT_MS``, for the readers still in the log to finish their
statement. Readers that start meanwhile read the database file, so the wait is short; the next
commit starts the log from the beginning, and ``journal_size_limit`` cuts the file back. A
checkpoint that still finds readers is retried after ``RETRY_S``, so a reader holding a long
snapshot costs the run at most ``WAIT_MS`` per ``RETRY_S``.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Callable

__all__ = ["CHECK_EVERY", "RESTART_AT", "RETRY_S", "WAIT_MS", "WalBound", "truncate_wal"]

#: size of the WAL file past which the writer asks for a restart (4x journal_size_limit)
RESTART_AT = 64 * 2**20
#: the longest the writer waits for readers in one restart (its loop is blocked meanwhile)
WAIT_MS = 200
#: commits between two looks at the file's size (one ``stat`` each)
CHECK_EVERY = 16
#: seconds before a restart that found readers is tried again
RETRY_S = 2.0


class WalBound:
    """Called after each commit of one writer connection."""

    def __init__(
        self,
        wal_path: str,
        busy_timeout_ms: int,
        *,
        now: Callable[[], float] = time.monotonic,
        exclusive: contextlib.AbstractContextManager[object] | None = None,
    ) -> None:
        self.wal_path = wal_path
        #: held around a restart: the writer's checkpoint thread holds it around each of its
        #: checkpoints, and SQLite refuses a second checkpoint at once without waiting
        self._exclusive = exclusive if exclusive is not None else contextlib.nullcontext()
        self.busy_timeout_ms = busy_timeout_ms
        self._now = now
        self._commits = 0
        self._next_try = 0.0
        #: restarts that went through / that still found readers (for tests and diagnostics)
        self.restarts = 0
        self.busy = 0

    def after_commit(self, conn: sqlite3.Connection) -> None:
        self._commits += 1
        if self._commits % CHECK_EVERY:
            return
        try:
            size = os.stat(self.wal_path).st_size
        except OSError:
            return
        if size < RESTART_AT or self._now() < self._next_try:
            return
        self.restart(conn)

    def restart(self, conn: sqlite3.Connection) -> bool:
        """One RESTART checkpoint, waiting at most ``WAIT_MS`` for readers; True if it went through."""
        with self._exclusive:
            done = _checkpoint(conn, "RESTART", self.busy_timeout_ms)
        if done:
            self.restarts += 1
            return True
        self.busy += 1
        self._next_try = self._now() + RETRY_S
        return False


def truncate_wal(conn: sqlite3.Connection, busy_timeout_ms: int) -> bool:
    """Fold the log into the database and empty the file (best effort, at most ``WAIT_MS``)."""
    return _checkpoint(conn, "TRUNCATE", busy_timeout_ms)


def _checkpoint(conn: sqlite3.Connection, mode: str, busy_timeout_ms: int) -> bool:
    try:
        conn.execute(f"PRAGMA busy_timeout = {WAIT_MS}")
        try:
            row = conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
        finally:
            conn.execute(f"PRAGMA busy_timeout = {busy_timeout_ms}")
    except sqlite3.Error:
        return False
    return row is not None and row[0] == 0
