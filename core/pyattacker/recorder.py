"""The write path: checkpoints written through with group commit, history written behind.

A checkpoint (artifact + task row + pipeline row with its cursor) is awaited by its pipeline
until the store has committed it, so a task's output is durable before the next task starts.
Checkpoints that arrive in the same event-loop turn share one transaction (group commit), which
is what makes a commit per task affordable. Attempts and events are buffered (write-behind)
and ride along with the next commit, or are flushed when the buffer is full, when
``flush_interval`` passed, on the heartbeat and at the end of the run. A SIGKILL may lose the
last unflushed history, never an acknowledged checkpoint. Event sinks get events after they
are committed, one call per batch.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from .errors import StoreUnavailable
from .model import AttemptRecord, Batch, EventRecord
from .store import Store

__all__ = ["Recorder"]

log = logging.getLogger("pyattacker")


class Recorder:
    """Owns the store's write side for one run."""

    def __init__(
        self,
        store: Store,
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
            self.flush()
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
        """Commit everything pending now (synchronously)."""
        batch, self.pending = self.pending, Batch()
        fut, self._waiters = self._waiters, None
        if not len(batch):
            if fut is not None and not fut.done():
                fut.set_result(None)
            return
        try:
            self.store.commit(batch)
        except BaseException as exc:
            self._failed = exc
            if fut is not None and not fut.done():
                fut.set_exception(StoreUnavailable(f"store commit failed: {type(exc).__name__}: {exc}"))
                fut.exception()  # mark retrieved: every waiter re-raises it anyway
            raise StoreUnavailable(f"store commit failed: {type(exc).__name__}: {exc}") from exc
        self._last_flush = self._now()
        if fut is not None and not fut.done():
            fut.set_result(None)
        if batch.events and self.sinks:
            self._deliver(batch.events)

    def _deliver(self, events: list[EventRecord]) -> None:
        for sink in self.sinks:
            try:
                sink.handle(events)
            except KeyboardInterrupt:  # a real Ctrl-C that landed in the sink: the run's to handle
                raise
            except BaseException as exc:  # a broken sink never breaks the run; it is counted and
                # shown. sys.exit() in plugin code too: it aborted the run (or, written behind,
                # was logged as a failed store write) and the next sinks missed the batch
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
