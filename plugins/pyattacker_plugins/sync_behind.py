"""Make commits durable on a thread of their own, beside the writer (the SQLite store with
``synchronous=full``, the JSONL store).

With ``synchronous=FULL`` SQLite syncs the write-ahead log inside each ``COMMIT``: about
0.2-0.4 ms of ``fdatasync`` here, during which the event loop stands still, once per group
commit (~1.3 ms of work for 64 checkpoints on the overhead workload): FULL ran at 0.78-0.86x
NORMAL. A FULL store therefore commits as NORMAL does (the log written, not synced) and asks
this thread to ``fdatasync`` the log; a commit is reported durable, and its checkpoints
acknowledged, only once a sync that *started after* its commit returned has finished. One sync
covers every commit written before it began, so commits that queue up during a sync share the
next one. Meanwhile the loop goes on with other pipelines and the next group commit.

Why this keeps FULL's promise: the log's frames reach the disk in one ``fdatasync`` of the log
file, exactly what SQLite's own FULL commit does (a sync of the log, not of the database), only
later; nothing is acknowledged before it. SQLite's consistency after a power loss does not
depend on the sync at commit (WAL with NORMAL is consistent: a frame is valid only with its
commit frame and checksum chain, and a checkpoint syncs the log before it copies it into the
database), so a commit written after another one's sync began is either whole or absent.
A failed sync is never tried again for the same data (the kernel may have dropped the pages:
after an error, a later sync that succeeds proves nothing): it fails every commit from then on.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future

from pyattacker.errors import StoreUnavailable

__all__ = ["SyncBehind", "not_durable", "wait_durable"]

_sync_data = getattr(os, "fdatasync", os.fsync)


def not_durable(store: str, exc: OSError) -> StoreUnavailable:
    """The error of a commit whose bytes were written but whose sync failed."""
    why = f"{type(exc).__name__}: {exc}"
    return StoreUnavailable(f"store {store}: commit written but not made durable ({why})")


def wait_durable(store: str, pending: Future[None] | None) -> None:
    """Return once a ``commit_behind`` of ``store`` is durable (a store's plain ``commit``)."""
    if pending is None:
        return
    try:
        pending.result()
    except OSError as exc:
        raise not_durable(store, exc) from exc


class SyncBehind:
    """Syncs one file (a SQLite writer's ``-wal``, a JSONL journal) on request; ``request()``
    from the writer's thread after each commit, ``stop()`` before the writer closes."""

    def __init__(self, path: str) -> None:
        self.path = path
        #: syncs made, and requests answered (a test and the docs read them)
        self.syncs = 0
        self.covered = 0
        self._fd = -1
        self._cond = threading.Condition(threading.Lock())
        self._queue: list[tuple[Future[None], int]] = []
        #: the highest ``mark`` (see ``request``) that a finished sync covered
        self.synced_mark = 0
        self._failed: OSError | None = None
        self._stopping = False
        self._thread: threading.Thread | None = None

    def open(self) -> None:
        """Open the file (it must exist: the writer created it) and sync its directory once, so
        that the file itself survives a power loss. Raises ``OSError`` if it cannot."""
        self._fd = os.open(self.path, os.O_RDWR)
        try:
            folder = os.open(os.path.dirname(self.path) or ".", os.O_RDONLY)
        except OSError:  # (no directory handles on this platform)
            return
        try:
            os.fsync(folder)
        except OSError:
            pass
        finally:
            os.close(folder)

    @property
    def opened(self) -> bool:
        return self._fd >= 0

    @property
    def failed(self) -> OSError | None:
        """The error of a sync that failed (every later request fails with it)."""
        return self._failed

    def request(self, mark: int = 0) -> Future[None]:
        """A future resolved once everything written to the file before this call is durable
        (or failed with the ``OSError`` of the sync). ``mark`` (a writer's end offset, say) is
        what ``synced_mark`` rises to once that sync is done."""
        fut: Future[None] = Future()
        with self._cond:
            if self._failed is not None:
                fut.set_exception(self._failed)
                return fut
            if self._stopping:
                fut.set_exception(OSError(f"{self.path}: the store is closing"))
                return fut
            self._queue.append((fut, mark))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="pyattacker-sync", daemon=True)
                self._thread.start()
            self._cond.notify()
        return fut

    def stop(self) -> None:
        """Finish the syncs requested so far, end the thread and close the file."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopping:
                    self._cond.wait()
                if not self._queue:
                    return
                batch, self._queue = self._queue, []
                failed = self._failed
            if failed is None:  # (after a failed sync, never again: the queued ones fail with it)
                self.syncs += 1
                try:
                    _sync_data(self._fd)
                except OSError as exc:
                    failed = exc
                    with self._cond:
                        self._failed = exc
            self.covered += len(batch)
            if failed is None:
                self.synced_mark = max(self.synced_mark, *(mark for _, mark in batch))
            for fut, _ in batch:
                if failed is None:
                    fut.set_result(None)
                else:
                    fut.set_exception(failed)
