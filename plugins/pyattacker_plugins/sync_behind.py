"""Make commits durable beside the writer, off its thread (the SQLite store with
``synchronous=full``, the JSONL store).

With ``synchronous=FULL`` SQLite syncs the write-ahead log inside each ``COMMIT``: an
``fdatasync`` per group commit, during which the event loop stands still. A FULL store therefore
commits as NORMAL does (the log written, not synced) and asks a helper to ``fdatasync`` the log; a
commit is reported durable, and its checkpoints acknowledged, only once a sync that *started
after* its commit returned has finished. One sync covers every commit written before it began, so
commits that queue up during a sync share the next one. Meanwhile the loop goes on with other
pipelines and the next group commit.

The helper is a small process (``sync_helper``) whose answers the event loop reads when they
arrive; where it cannot run (not POSIX, a frozen application, a loop that cannot watch a pipe, a
process that cannot be started) a thread of this process syncs instead. Both keep the same
promise; the process spares the loop the hand-overs of the interpreter's lock that a thread costs
it on every sync.

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

import asyncio
import errno
import logging
import os
import select
import threading
import time
from collections import deque
from concurrent.futures import Future
from typing import Any

from pyattacker.errors import StoreUnavailable

from .sync_helper import SyncHelper, helper_possible

__all__ = ["SyncBehind", "not_durable", "wait_durable"]

log = logging.getLogger("pyattacker")

_sync_data = getattr(os, "fdatasync", os.fsync)

#: sync in a helper process where one can run (False: always on a thread of this process)
USE_HELPER = True


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


class _Durable(Future[None]):
    """A request answered by the helper process: waiting for its result reads the helper's
    answers itself, so a caller outside the event loop (a synchronous ``commit``, the end of a
    run) never waits for a loop that is not running."""

    def __init__(self, owner: SyncBehind) -> None:
        super().__init__()
        self._owner = owner

    def result(self, timeout: float | None = None) -> None:
        if not self.done():
            self._owner._wait_for(self, timeout)
        return super().result(timeout=0)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if not self.done():
            self._owner._wait_for(self, timeout)
        return super().exception(timeout=0)


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
        #: the helper process, once started, and its requests not answered yet (oldest first)
        self._helper: SyncHelper | None = None
        self._asked: deque[tuple[Future[None], int]] = deque()
        self._helper_ended = False
        #: the event loop that reads the helper's answers (the one requests last came from)
        self._watcher: asyncio.AbstractEventLoop | None = None

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

    @property
    def helper_pid(self) -> int | None:
        """The helper process's id while it runs (None: none started, or syncing on a thread)."""
        return self._helper.pid if self._helper is not None else None

    def request(self, mark: int = 0) -> Future[None]:
        """A future resolved once everything written to the file before this call is durable
        (or failed with the ``OSError`` of the sync). ``mark`` (a writer's end offset, say) is
        what ``synced_mark`` rises to once that sync is done."""
        with self._cond:
            if self._helper is None and self._thread is None and not self._stopping:
                self._start()
            helper = self._helper
            fut: Future[None] = _Durable(self) if helper is not None else Future()
            if self._failed is not None:
                fut.set_exception(self._failed)
                return fut
            if self._stopping:
                fut.set_exception(OSError(f"{self.path}: the store is closing"))
                return fut
            if helper is None:
                self._queue.append((fut, mark))
                self._cond.notify()
                return fut
            self._asked.append((fut, mark))
            try:
                helper.ask()
            except OSError:  # the helper is gone: its answers' pipe says how (read below)
                pass
        if self._watcher is not asyncio._get_running_loop():
            self._watch()
        if not self._watching():
            self._take_answers()  # (no loop watches: say at once what is known already)
        return fut

    def _start(self) -> None:
        """The helper process where it can run, else the thread (called once, under the lock)."""
        loop = asyncio._get_running_loop()
        if USE_HELPER and helper_possible() and self._fd >= 0 and _can_watch(loop):
            try:
                self._helper = SyncHelper(self._fd, self.path)
                return
            except OSError as exc:
                log.warning(
                    "pyattacker: %s: syncing on a thread (the sync helper did not start: %s)", self.path, exc
                )
        self._thread = threading.Thread(target=self._run, name="pyattacker-sync", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Finish the syncs requested so far, end the thread or the helper and close the file."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
            helper = self._helper
        if helper is not None:
            helper.close()  # the helper answers what it has read, then ends
            while not self._helper_ended:
                self._wait_readable(helper, None)
                self._take_answers()
            self._unwatch()
            helper.reap()
            self._helper = None
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    # -- the helper's answers ---------------------------------------------------------------
    def _watch(self) -> None:
        """Read the helper's answers on the running event loop (once per loop)."""
        helper = self._helper
        loop = asyncio._get_running_loop()
        if helper is None or loop is None or loop is self._watcher or self._helper_ended:
            return
        self._unwatch()
        try:
            loop.add_reader(helper.answers, self._take_answers)
        except (NotImplementedError, RuntimeError, ValueError, OSError):
            return  # (answers are then read by those who wait, and by the next request)
        self._watcher = loop

    def _watching(self) -> bool:
        watcher = self._watcher
        return watcher is not None and not watcher.is_closed()

    def _unwatch(self) -> None:
        loop, self._watcher = self._watcher, None
        helper = self._helper
        if loop is None or helper is None or loop.is_closed():
            return
        try:
            loop.remove_reader(helper.answers)
        except (RuntimeError, ValueError, OSError):
            pass

    def _take_answers(self) -> None:
        """Settle the requests the helper has answered (oldest first), or fail them all."""
        done: list[tuple[Future[None], int]] = []
        failed: list[tuple[Future[None], int]] = []
        with self._cond:
            helper = self._helper
            if helper is None or self._helper_ended:
                return
            replies = helper.read()
            self.syncs += replies.syncs
            for _ in range(min(replies.covered, len(self._asked))):
                done.append(self._asked.popleft())
            self.covered += len(done)
            if done:
                self.synced_mark = max(self.synced_mark, *(mark for _, mark in done))
            if replies.error is not None and self._failed is None:
                self._failed = replies.error
            if replies.ended:
                self._helper_ended = True
                if self._failed is None and (self._asked or not self._stopping):
                    self._failed = OSError(
                        errno.EPIPE, f"the sync helper (pid {helper.pid}) ended before syncing"
                    )
            if self._failed is not None:
                failed, self._asked = list(self._asked), deque()
            error = self._failed
        if replies.ended:
            self._unwatch()
        for fut, _ in done:
            fut.set_result(None)
        for fut, _ in failed:
            fut.set_exception(error or OSError(f"{self.path}: the store is closing"))

    def _wait_for(self, fut: Future[None], timeout: float | None) -> None:
        """Read the helper's answers until ``fut`` is settled (or ``timeout`` passed)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not fut.done():
            helper = self._helper
            if helper is None or self._helper_ended:
                return
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return
            self._wait_readable(helper, left)
            self._take_answers()

    @staticmethod
    def _wait_readable(helper: SyncHelper, timeout: float | None) -> None:
        """Until the helper has answered (or ended), or ``timeout`` seconds. ``poll``, not
        ``select``: a run with many files open may give the pipe a number above 1023."""
        poller = select.poll()
        try:
            poller.register(helper.answers, select.POLLIN)
            poller.poll(None if timeout is None else max(0, int(timeout * 1000)))
        except (OSError, ValueError):  # (closed meanwhile: the reader settled everything)
            pass

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


def _can_watch(loop: Any) -> bool:
    """Whether the loop a store commits from can watch a pipe (no loop: the waiters read)."""
    if loop is None:
        return True
    return callable(getattr(loop, "add_reader", None)) and type(loop).__name__ != "ProactorEventLoop"
