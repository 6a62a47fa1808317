"""The write path: checkpoints written through with group commit, history written behind.

A checkpoint (artifact + task row + pipeline row with its cursor) is awaited by its pipeline
until the store has committed it, so a task's output is durable before the next task starts.
Checkpoints that arrive in the same event-loop turn share one transaction (group commit), which
is what makes a commit per task affordable. Attempts and events are buffered (write-behind)
and ride along with the next commit, or are flushed when the buffer is full, when
``flush_interval`` passed, on the heartbeat and at the end of the run. A SIGKILL may lose the
last unflushed history, never an acknowledged checkpoint. Event sinks get events after they
are committed, one call per batch.

A store may make a commit durable after it returns (``commit_behind``, e.g. SQLite with
``synchronous=full`` syncs its log in a helper process): the group commit's waiters are then resolved
when the store says so, and the loop runs other pipelines, and the next group commit, meanwhile.
Synchronous ``flush()`` calls (heartbeat, end of run, ``--no-write-behind``) always wait.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from pyattacker.errors import StoreUnavailable
from pyattacker.model import AttemptRecord, Batch, EventRecord
from pyattacker.plugins.store_base import StoreBase

__all__ = ["Recorder"]

log = logging.getLogger("pyattacker")


class Recorder:
    """Owns the store's write side for one run."""

    def __init__(
        self,
        store: StoreBase,
        *,
        write_behind: bool = True,
        batch_size: int = 512,
        flush_interval: float = 1.0,
        sinks: list[Any] | None = None,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.write_behind = write_behind
        self.batch_size = max(1, batch_size)
        self.flush_interval = flush_interval
        self.sinks = list(sinks or [])
        self._now = now
        #: rows that go out with the next commit (metrics and side rows are added here); a plain
        #: attribute, not a property: the runner adds each checkpoint's rows to it
        self.pending = Batch()
        self._waiters: asyncio.Future[None] | None = None
        self._scheduled = False
        self._last_flush = now()
        self._failed: BaseException | None = None
        self.sink_errors = 0
        self.on_sink_error: Callable[[Any, BaseException], None] | None = None
        #: resolved once (never per commit): the store's commit that may be durable later
        self._commit_behind: Callable[[Batch], Future[None] | None] | None = (
            store.commit_behind if store.commits_behind else None
        )
        #: commits made by ``commit_behind`` and not yet durable, oldest first: (the store's
        #: future, the waiters' future, the events for the sinks)
        self._behind: deque[tuple[Future[None], asyncio.Future[None] | None, list[EventRecord]]] = deque()

    # -- history (write-behind) -----------------------------------------------------------
    def attempt(self, row: AttemptRecord) -> None:
        self.pending.attempts.append(row)
        if self._scheduled and self.write_behind:
            return  # a flush is on its way and takes this row too (one call less per attempt)
        self._maybe_flush()

    def event(self, row: EventRecord) -> None:
        self.pending.events.append(row)
        self._maybe_flush()

    def _maybe_flush(self) -> None:
        if not self.write_behind:
            # --no-write-behind: every attempt and event is committed before the call returns
            # (rows are always appended complete, so this never splits a checkpoint)
            self.flush()
            return
        if self._scheduled:  # a flush is on its way and takes these rows too
            return
        n = len(self.pending.attempts) + len(self.pending.events)
        if n >= self.batch_size or self._now() - self._last_flush >= self.flush_interval:
            self._schedule()

    def _schedule(self) -> None:
        if self._scheduled:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.flush()
            return
        self._scheduled = True
        loop.call_soon(self._flush_soon)

    def _flush_soon(self) -> None:
        self._scheduled = False
        try:
            self._flush(behind=self._commit_behind is not None)
        except BaseException as exc:  # resolved into the waiting futures; never lost silently
            log.error("pyattacker: store write failed: %s", exc)

    # -- checkpoints (write-through) --------------------------------------------------------
    async def checkpoint(self, rows: Batch | None = None) -> None:
        """Commit ``rows`` (with everything pending) before returning; shares the transaction."""
        if rows is not None:
            if self._failed is not None:
                raise StoreUnavailable(f"store unavailable: {self._failed}") from self._failed
            self.pending.extend(rows)
        await self.commit_ticket()

    def commit_ticket(self) -> asyncio.Future[None]:
        """The future of the group commit that will carry everything pending now.

        Awaiting it is ``checkpoint()`` without a coroutine of its own (the per-task path):
        it resolves once the rows are committed, or raises ``StoreUnavailable``.
        """
        if self._failed is not None:
            raise StoreUnavailable(f"store unavailable: {self._failed}") from self._failed
        fut = self._waiters
        if fut is None:
            fut = self._waiters = asyncio.get_running_loop().create_future()
        if not self._scheduled:  # once per group commit, not per checkpoint
            self._schedule()
        return fut

    def flush(self) -> None:
        """Commit everything pending now and return once it is durable."""
        self._flush(behind=False)

    def _flush(self, *, behind: bool) -> None:
        batch, self.pending = self.pending, Batch()
        fut, self._waiters = self._waiters, None
        if not len(batch):
            if fut is not None and not fut.done():
                if self._behind:  # nothing new: durable with the last commit still syncing
                    self._behind.append((self._behind[-1][0], fut, []))
                else:
                    fut.set_result(None)
            return
        later: Future[None] | None = None
        try:
            if behind and self._commit_behind is not None:
                later = self._commit_behind(batch)
            else:
                self.store.commit(batch)
        except BaseException as exc:
            self._fail(fut, exc)
            raise StoreUnavailable(f"store commit failed: {type(exc).__name__}: {exc}") from exc
        self._last_flush = self._now()
        if later is None:
            self._settle()  # commits made durable before this one come first (and their events)
            self._committed(fut, batch.events)
            return
        self._behind.append((later, fut, batch.events))
        loop = asyncio.get_running_loop()  # (behind only from the loop's own callback)
        later.add_done_callback(functools.partial(_settle_on, loop, threading.get_ident(), self._settle))

    def _settle(self) -> None:
        """On the loop: resolve, in commit order, the commits made durable since (waiters woken,
        events handed to the sinks). Called by each one's sync and by every synchronous commit,
        which returns durable, so the last flush of a run leaves none behind for closed sinks."""
        behind = self._behind
        while behind and behind[0][0].done():
            later, fut, events = behind.popleft()
            exc = StoreUnavailable("the store cancelled a sync") if later.cancelled() else later.exception()
            if exc is None:
                self._committed(fut, events)
            else:
                self._fail(fut, exc)
                log.error("pyattacker: store write failed: %s", exc)

    def _committed(self, fut: asyncio.Future[None] | None, events: list[EventRecord]) -> None:
        if fut is not None and not fut.done():
            fut.set_result(None)
        if events and self.sinks:
            self._deliver(events)

    def _fail(self, fut: asyncio.Future[None] | None, exc: BaseException) -> None:
        if self._failed is None:
            self._failed = exc
        if fut is not None and not fut.done():
            fut.set_exception(StoreUnavailable(f"store commit failed: {type(exc).__name__}: {exc}"))
            fut.exception()  # mark retrieved: every waiter re-raises it anyway

    def _deliver(self, events: list[EventRecord]) -> None:
        for sink in self.sinks:
            try:
                sink.handle(events)
            except KeyboardInterrupt:  # a real Ctrl-C that landed in the sink: the run's to handle
                raise
            except BaseException as exc:  # a broken sink never breaks the run; it is counted and
                # shown. sys.exit() in plugin code too: else it would abort the run (or, written
                # behind, count as a failed store write) and the next sinks would miss the batch
                self.sink_errors += 1
                if self.on_sink_error is not None:
                    self.on_sink_error(sink, exc)

    @property
    def failed(self) -> BaseException | None:
        return self._failed

    def close_sinks(self) -> None:
        for sink in self.sinks:
            try:
                sink.close()
            except KeyboardInterrupt:
                raise
            except BaseException as exc:
                self.sink_errors += 1
                log.warning("pyattacker: event sink %r failed to close: %s", sink, exc)


def _settle_on(
    loop: asyncio.AbstractEventLoop, loop_thread: int, settle: Callable[[], None], _done: Future[None]
) -> None:
    """A commit made durable: ``settle`` on the loop, scheduled without waking it when the loop's
    own thread learnt it (the store read the sync helper's answers there), else as ``_call_in``."""
    if threading.get_ident() != loop_thread:
        _call_in(loop, settle)
        return
    try:
        loop.call_soon(settle)
    except RuntimeError:  # (closed: the run's last flush settles every commit before it)
        pass


def _call_in(loop: asyncio.AbstractEventLoop, fn: Callable[[], None]) -> None:
    """Run ``fn()`` on ``loop`` from another thread, the store's sync thread say (dropped if the
    loop closed: the run's last flush, a synchronous commit, settled every commit before it)."""
    try:
        loop.call_soon_threadsafe(fn)
    except RuntimeError:
        pass
