"""Copy the write-ahead log into the database on a thread of its own, beside the writer.

A checkpoint copies the log's pages into the database file and syncs both files. Run by the
writer's own automatic checkpoints, those page writes and syncs are a large part of the writer's
commit time, and the event loop stands still meanwhile. SQLite runs a checkpoint on a connection
of its own while a writer appends to the log, and CPython releases the GIL while it does. So once
a commit leaves ``START_AT`` frames or more in the log that no checkpoint has copied yet, the
writer wakes this thread, which makes a PASSIVE checkpoint (one that never waits for the writer or
for readers), at most one per ``GAP_S``. Counting the frames not yet copied, not all the frames of
the log: a log that a checkpoint copied keeps growing until the writer restarts it, and a
checkpoint per commit of that tail would sync both files each time to copy a few pages. The
writer's own automatic checkpoint stays, as a backstop: it then finds the frames already copied,
finishes the tail and lets the next commit restart the log. The thread starts at the first such
commit, so a run that writes little (a resume with nothing to do) never has one. Durability is the
writer's own: the thread syncs exactly as the writer would (same ``synchronous``), and a
checkpoint only ever copies committed frames.
"""

from __future__ import annotations

import os
import sqlite3
import struct
import threading

__all__ = ["GAP_S", "START_AT", "Checkpointer", "frames_to_copy"]

#: frames of the log not yet copied from which the thread copies them (the writer's backstop
#: checkpoints a log of 4,000 frames)
START_AT = 1000
#: seconds between the starts of two checkpoints of the thread, at least
GAP_S = 0.01
#: The start of the ``-shm`` file (native byte order; sqlite.org/walformat.html): the WAL-index
#: header, whose ``mxFrame`` (a u32 at offset 16) is the last valid frame of the log, twice
#: (48 bytes each), then the checkpoint information, which starts with ``nBackfill`` (offset 96):
#: the frames a checkpoint has copied into the database
_HEADER = struct.Struct("=16xI76xI")
#: a failing checkpoint (a disk error) is tried again after this many seconds at the earliest
_BACKOFF_S = 1.0
#: How the thread syncs the database file after each of its checkpoints. SQLite syncs it only at
#: the end of a checkpoint that copied the whole log, which a PASSIVE one beside a writer that
#: keeps appending seldom does; the writer's own checkpoint (every 4,000 pages) would then flush
#: all that the thread copied since, on the event loop's time.
_sync_data = getattr(os, "fdatasync", os.fsync)


def frames_to_copy(shm_fd: int) -> int:
    """Frames of the log that no checkpoint has copied yet, read without a lock (a hint: the
    writer may be appending, or restarting the log, which sets both counts back)."""
    data = os.pread(shm_fd, _HEADER.size, 0)
    if len(data) < _HEADER.size:
        return 0
    last, copied = _HEADER.unpack(data)
    return last - copied if last >= copied else last


class Checkpointer:
    """Checkpoints ``path``'s WAL on a daemon thread. The writer calls ``after_commit()`` after
    each commit and ``stop()`` before it closes (both under the store's lock)."""

    def __init__(self, path: str, synchronous: str) -> None:
        self.path = path
        self.synchronous = synchronous
        #: checkpoints made, and failures (a checkpoint that raised, a log it could not read):
        #: the writer's automatic checkpoints cover for both
        self.checkpoints = 0
        self.errors = 0
        #: syncs of the database file after a checkpoint of the thread (see ``_sync_data``)
        self.syncs = 0
        #: held around each checkpoint of the thread; the writer's own restarts of the log take it
        #: too (SQLite would refuse one while the thread's is under way, without waiting)
        self.lock = threading.Lock()
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._shm = -1  # the ``-shm`` file, opened at the first commit
        if not hasattr(os, "pread"):  # (not on Windows): the writer's own checkpoints do it all
            self._stopped.set()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def after_commit(self) -> None:
        """Wake the thread (start it the first time) if ``START_AT`` frames wait to be copied."""
        if self._stopped.is_set():
            return
        if self._shm < 0:
            try:
                self._shm = os.open(self.path + "-shm", os.O_RDONLY)
            except OSError:  # no log index to read: the writer's own checkpoints do it all
                self.errors += 1
                self._stopped.set()
                return
        try:
            if frames_to_copy(self._shm) < START_AT:
                return
        except OSError:
            self.errors += 1
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="pyattacker-checkpointer", daemon=True)
            self._thread.start()
        self._wake.set()

    def stop(self) -> None:
        """End the thread (a checkpoint under way finishes first); the writer then closes."""
        self._stopped.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        if self._shm >= 0:
            os.close(self._shm)
            self._shm = -1

    def _run(self) -> None:
        try:
            conn = sqlite3.connect(self.path, isolation_level=None)
        except sqlite3.Error:
            self.errors += 1
            return  # the writer's automatic checkpoints still run
        try:
            db = os.open(self.path, os.O_RDONLY)
        except OSError:
            db = -1  # (not synced by the thread: the writer's checkpoints still sync it)
            self.errors += 1
        try:
            conn.execute(f"PRAGMA synchronous = {self.synchronous.upper()}")
            while True:
                self._wake.wait()
                if self._stopped.is_set():
                    return
                self._wake.clear()
                gap = GAP_S
                try:
                    with self.lock:
                        conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                    self.checkpoints += 1
                    if db >= 0:
                        _sync_data(db)
                        self.syncs += 1
                except (sqlite3.Error, OSError):
                    self.errors += 1
                    gap = _BACKOFF_S
                if self._stopped.wait(gap):
                    return
        except sqlite3.Error:
            self.errors += 1
        finally:
            if db >= 0:
                os.close(db)
            conn.close()
