"""Opening a store file: the SQLite version check, the connection's settings, migrations.

A writer first refuses what it must not touch (a library too old, a directory it cannot write,
a foreign, corrupt or newer file), then takes the writer lock, sets the WAL up and migrates the
schema. A reader opens ``mode=ro`` and never creates or migrates anything. Both hand the
connection to the block that builds the store and clean up if that block fails.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager

from pyattacker import ConfigError
from pyattacker.errors import StoreUnavailable
from pyattacker.store.writer_lock import WriterLock

from . import schema

__all__ = [
    "BUSY_TIMEOUT_MS",
    "MIN_SQLITE",
    "SYNCHRONOUS_MODES",
    "WAL_CHECKPOINT_PAGES",
    "WAL_SIZE_LIMIT",
    "reader_connection",
    "require_sqlite",
    "roll_back_hot_journal",
    "synchronous_mode",
    "writer_connection",
]

BUSY_TIMEOUT_MS = 10_000
#: Bytes of WAL file the writer leaves on disk after the log restarts. A reader that holds a
#: snapshot (a live view's statistics, read in one transaction) keeps the WAL from restarting,
#: so it grows past its usual 4 MB while the run writes; SQLite never shrinks the file by itself.
#: With the limit, the first commit after the next restart truncates it back.
WAL_SIZE_LIMIT = 16 * 2**20
#: WAL pages after which a commit checkpoints the log into the database (SQLite's default is
#: 1,000, 4 MB). The same ~16 MB the file is cut back to anyway: a checkpoint writes each page
#: once however many commits changed it, and the rightmost leaves of every table and index are
#: changed by every commit, so four times fewer checkpoints write and sync fewer pages
#: (docs/performance.md).
WAL_CHECKPOINT_PAGES = 4000
SYNCHRONOUS_MODES = ("normal", "full")


def synchronous_mode(query: dict[str, str]) -> str:
    """``?synchronous=`` in the location wins over ``PYATTACKER_SQLITE_SYNCHRONOUS``; NORMAL default."""
    raw = query.get("synchronous") or os.environ.get("PYATTACKER_SQLITE_SYNCHRONOUS") or "normal"
    mode = raw.strip().lower()
    if mode not in SYNCHRONOUS_MODES:
        raise ConfigError(f"sqlite synchronous={raw!r}: expected one of {', '.join(SYNCHRONOUS_MODES)}")
    return mode


#: the oldest SQLite the statements run on: upserts (``ON CONFLICT ... DO UPDATE``) came in 3.24.0
MIN_SQLITE = (3, 24, 0)


def require_sqlite(path: str) -> None:
    """Refuse, before touching ``path``, a SQLite library too old for the store's statements
    (they would fail at the first commit with a bare syntax error)."""
    version = sqlite3.sqlite_version_info
    if version < MIN_SQLITE:
        have, need = ".".join(map(str, version)), ".".join(map(str, MIN_SQLITE))
        raise StoreUnavailable(
            f"store {path}: this Python's sqlite3 module uses SQLite {have}; the sqlite store needs"
            f" {need} or later (a newer Python or SQLite library, or another store such as jsonl:)"
        )


@contextmanager
def writer_connection(path: str, synchronous: str) -> Iterator[tuple[sqlite3.Connection, WriterLock]]:
    """The writer's connection to ``path`` (absolute) and the writer lock, the file migrated.

    If the block fails, the connection is closed and the lock freed (a ``sqlite3.Error`` becomes
    ``StoreUnavailable``); otherwise both are the block's to keep."""
    require_sqlite(path)
    _ensure_writable_dir(path)
    hot = os.path.exists(path + "-journal")
    if not hot:  # (a hot journal can only be read once rolled back, under the lock below)
        schema.probe(path)  # refuse foreign/corrupt/newer files before leaving any trace
    lock = WriterLock.acquire(path + ".lock", path)
    conn: sqlite3.Connection | None = None
    try:
        if hot:
            roll_back_hot_journal(path)
        version = schema.probe(path)
        conn = _connect(path)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
        conn.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}")
        conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_CHECKPOINT_PAGES}")
        schema.migrate(conn, version, time.time())
        yield conn, lock
    except BaseException as exc:
        if conn is not None:
            conn.close()
        lock.release()
        if isinstance(exc, sqlite3.Error):
            raise StoreUnavailable(f"store {path} cannot be opened for writing: {exc}") from exc
        raise


@contextmanager
def reader_connection(path: str) -> Iterator[sqlite3.Connection]:
    """A read-only connection to the existing store ``path`` (absolute); closed if the block
    fails with a ``sqlite3.Error``, which becomes ``StoreUnavailable``."""
    require_sqlite(path)
    if os.path.isdir(path):
        raise ConfigError(f"store {path} is a directory, not a SQLite store file")
    if not os.path.isfile(path):
        raise ConfigError(f"store {path} does not exist")
    if schema.probe(path) == 0:
        raise ConfigError(f"store {path} is not a pyattacker store (an empty database)")
    conn: sqlite3.Connection | None = None
    try:
        conn = sqlite3.connect(schema.ro_uri(path), uri=True, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA query_only = 1")
        yield conn
    except sqlite3.Error as exc:
        if conn is not None:
            conn.close()
        raise StoreUnavailable(f"store {path} cannot be opened for reading: {exc}") from exc


def roll_back_hot_journal(path: str) -> None:
    """Roll back the rollback journal a writer killed inside its first transaction left beside
    ``path`` (before the file was switched to WAL). A read-only connection cannot, so every
    reader refused the file; a read-write one does it as it reads the schema. SQLite leaves a
    journal that a live transaction still holds alone."""
    try:
        conn = sqlite3.connect(path, isolation_level=None)
    except sqlite3.Error as exc:
        raise StoreUnavailable(f"store {path} cannot be opened: {exc}") from exc
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        raise ConfigError(
            f"store {path} is not a readable SQLite database (corrupt or another format), and its"
            f" journal {path}-journal could not be rolled back: {exc}"
        ) from exc
    finally:
        conn.close()


def _connect(path: str) -> sqlite3.Connection:
    # room for every multi-row variant of the write statements (up to seven sizes per NULL
    # pattern per table), so no commit re-parses one evicted by another
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, cached_statements=512)
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    return conn


def _ensure_writable_dir(path: str) -> None:
    directory = os.path.dirname(path)
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise StoreUnavailable(
            f"store {path}: cannot create directory {directory}: {exc.strerror or exc}"
        ) from exc
    if not os.access(directory, os.W_OK | os.X_OK):
        raise StoreUnavailable(
            f"store {path}: directory {directory} is not writable (a writer needs it for -wal/-shm files)"
        )
    if os.path.exists(path) and not os.access(path, os.R_OK | os.W_OK):
        raise StoreUnavailable(f"store {path}: file is not writable by this user")
