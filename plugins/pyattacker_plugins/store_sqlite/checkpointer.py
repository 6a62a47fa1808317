"""Copy the write-ahead log into the database on a thread of its own, beside the writer.

A checkpoint copies the log's pages into the database file and syncs both files. Run by the
writer's own automatic checkpoints, that was about 60 % of the writer's commit time on the
benchmark's overhead workload (18-27 ms each, mostly the page writes and the syncs), and the
event loop stood still meanwhile. SQLite runs a checkpoint on a connection of its own while a
writer appends to the log, and CPython releases the GIL while it does. So this thread makes a
PASSIVE checkpoint (one that never waits for the writer or for readers) whenever the log holds
``START_AT`` frames or more. The writer's own automatic checkpoint stays, as a backstop: it
then finds the frames already copied, finishes the tail and lets the next commit restart the
log. Durability is unchanged: the thread syncs exactly as the writer would (same
``synchronous``), and a checkpoint only ever copies committed frames.
"""

from __future__ import annotations

import os
import sqlite3
import struct
import threading

__all__ = ["POLL_S", "START_AT", "Checkpointer", "log_frames"]

#: frames in the log from which the thread copies them (the writer's backstop is at 4,000)
START_AT = 1000
#: seconds between two looks at the log's length (a 4-byte read)
POLL_S = 0.01
#: ``mxFrame``, the last valid frame of the log, in the WAL-index header at the start of the
#: ``-shm`` file (a u32 at offset 16, native byte order: sqlite.org/walformat.html)
_MX_FRAME = struct.Struct("=I")
_MX_FRAME_AT = 16
#: a failing checkpoint (a disk error) is tried again after this many seconds, not every poll
_BACKOFF_S = 1.0


def log_frames(shm_fd: int) -> int:
    """Frames in the log now, read without a lock (a hint: the writer may be appending)."""
    data = os.pread(shm_fd, _MX_FRAME.size, _MX_FRAME_AT)
    return _MX_FRAME.unpack(data)[0] if len(data) == _MX_FRAME.size else 0


class Checkpointer:
    """A daemon thread that checkpoints ``path``'s WAL; ``stop()`` before the writer closes."""

    def __init__(self, path: str, synchronous: str) -> None:
        self.path = path
        self.synchronous = synchronous
        #: checkpoints made, and checkpoints that raised (the writer's backstop covers them)
        self.checkpoints = 0
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pyattacker-checkpointer", daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        """End the thread (a checkpoint under way finishes first)."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        try:
            shm = os.open(self.path + "-shm", os.O_RDONLY)
        except OSError:
            self.errors += 1
            return  # the writer's automatic checkpoints still run
        try:
            conn = sqlite3.connect(self.path, isolation_level=None)
        except sqlite3.Error:
            os.close(shm)
            self.errors += 1
            return
        try:
            conn.execute(f"PRAGMA synchronous = {self.synchronous.upper()}")
            wait = POLL_S
            while not self._stop.wait(wait):
                wait = POLL_S
                try:
                    if log_frames(shm) < START_AT:
                        continue
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                    self.checkpoints += 1
                except (sqlite3.Error, OSError):
                    self.errors += 1
                    wait = _BACKOFF_S
        finally:
            os.close(shm)
            conn.close()
