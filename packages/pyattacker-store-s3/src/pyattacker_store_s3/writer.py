"""Group commit on S3: every batch queued while a PUT is in flight goes out in the next one.

``submit`` numbers a batch's attempts and events, encodes it (a value msgpack cannot take
fails here, synchronously, with nothing queued) and queues it with a ``Future``. One thread
takes everything queued, writes it as ONE segment object (a msgpack array of the parts, each
applied in order, so the result is exactly that of committing them one after another) and
resolves the futures once S3 acknowledged it. So a store answers ``commit_behind`` at once, the
recorder overlaps its group commits, and the number of requests follows the PUT latency, not
the number of commits: the slower the object store, the larger the segments.
``min_interval_s`` (the store's ``?commit_interval_ms``) leaves at least that long between the
end of one PUT and the start of the next,
trading that much checkpoint latency for fewer requests when the store answers fast.

A failed PUT fails every queued batch (their ids handed back, numbering restarts after the last
durable segment), so nothing is written out of order and a batch may simply be committed again.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from typing import TYPE_CHECKING

from pyattacker.errors import StoreUnavailable
from pyattacker.model import Batch
from pyattacker_store_s3.rows import Segment, encode_segment, segment_of

if TYPE_CHECKING:
    from pyattacker_store_s3.store import S3Store

__all__ = ["SegmentWriter"]


class _Pending:
    __slots__ = ("batch", "future", "part")

    def __init__(self, part: bytes, batch: Batch | None) -> None:
        self.part, self.batch = part, batch
        self.future: Future[None] = Future()


def _unnumber(batch: Batch | None) -> None:
    """Hand back unnumbered rows: the batch may be committed again."""
    if batch is not None:
        for attempt in batch.attempts:
            attempt.attempt_id = None
        for event in batch.events:
            event.event_id = None


class SegmentWriter:
    """The write side of one writing ``S3Store`` (see the module docstring)."""

    def __init__(self, store: S3Store, token: str, *, min_interval_s: float = 0.0) -> None:
        self.store, self.token = store, token
        self.min_interval_s = min_interval_s
        self._last_put = 0.0  # monotonic end of the last PUT
        self._cond = threading.Condition()
        self._queue: list[_Pending] = []
        self._stopping = False
        self._next_attempt = store.rows.next_attempt_id
        self._next_event = store.rows.next_event_id
        self._thread = threading.Thread(target=self._run, name="s3-segments", daemon=True)
        self._thread.start()

    def submit(self, batch: Batch | None, part: Segment | None = None) -> Future[None]:
        """Queue ``batch`` (or a ready ``part``); the future resolves once it is durable."""
        with self._cond:
            if self._stopping:
                raise StoreUnavailable(f"store {self.store.location} is closed")
            if batch is not None:
                for i, attempt in enumerate(batch.attempts):
                    attempt.attempt_id = self._next_attempt + i
                for i, event in enumerate(batch.events):
                    event.event_id = self._next_event + i
                part = segment_of(batch, self.token)
            assert part is not None
            try:
                data = encode_segment(part)
            except Exception as exc:
                _unnumber(batch)
                raise StoreUnavailable(f"store {self.store.location}: commit failed: {exc}") from exc
            if batch is not None:
                self._next_attempt += len(batch.attempts)
                self._next_event += len(batch.events)
            pending = _Pending(data, batch)
            self._queue.append(pending)
            self._cond.notify()
        return pending.future

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopping:
                    self._cond.wait()
                if not self._queue:
                    return
                self._space_out()
                taken, self._queue = self._queue, []
            try:
                self.store.put_parts([p.part for p in taken])
            except BaseException as exc:
                self._last_put = time.monotonic()
                with self._cond:
                    failed, self._queue = taken + self._queue, []
                    for p in failed:
                        _unnumber(p.batch)
                    self._next_attempt = self.store.rows.next_attempt_id
                    self._next_event = self.store.rows.next_event_id
                error = exc if isinstance(exc, StoreUnavailable) else StoreUnavailable(str(exc))
                if error is not exc:
                    error.__cause__ = exc
                for p in failed:
                    p.future.set_exception(error)
                continue
            self._last_put = time.monotonic()
            for p in taken:
                p.future.set_result(None)
            self.store.compact_if_due()  # after the acknowledgements: no commit waits for it

    def _space_out(self) -> None:
        """Wait (lock released, so batches keep queuing) until ``min_interval_s`` has passed
        since the last PUT ended; a close cuts the wait short."""
        while not self._stopping:
            delay = self._last_put + self.min_interval_s - time.monotonic()
            if delay <= 0:
                return
            self._cond.wait(delay)

    def close(self) -> None:
        """Write what is queued, then stop (idempotent)."""
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()
