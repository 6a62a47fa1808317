"""Identical viewer requests share one store read for a moment.

Every dashboard open on a live run polls the same endpoints. Without sharing, each poll opens a
read transaction on the writer's file, and overlapping readers keep SQLite from resetting the
WAL, which then grows, and take CPU from the run (docs/viewing.md has the benchmark). With
sharing, a request that arrives while the same request is being answered waits for that
answer, and an answer is reused for ``ttl`` seconds: the store sees at most one read per
distinct request per ``ttl``, however many clients poll.

An answer is reused only while the store file is the same file (device and inode): a store that
is deleted or replaced is noticed at the next request, not ``ttl`` later. Failures are never
reused; requests that waited for one get the same error.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

__all__ = ["ANSWER_TTL_S", "SharedAnswers"]

#: how long an answer is reused; the dashboard polls every 2 s, ``watch`` defaults to 1 s
ANSWER_TTL_S = 1.0
#: distinct requests remembered (paged lists have a key per cursor)
_ENTRIES = 256


class _Entry:
    __slots__ = ("at", "done", "error", "file", "value")

    def __init__(self, file: tuple[int, int] | None) -> None:
        self.done = threading.Event()
        self.at = 0.0
        self.file = file
        self.value: Any = None
        self.error: BaseException | None = None


class SharedAnswers:
    """``get(key, compute)``: ``compute()``'s value, shared by identical requests (see module)."""

    def __init__(
        self,
        location: str,
        ttl: float = ANSWER_TTL_S,
        *,
        clock: Callable[[], float] = time.monotonic,
        entries: int = _ENTRIES,
    ) -> None:
        self.location = location
        self.ttl = ttl
        self._clock = clock
        self._size = entries
        self._entries: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        #: requests answered by computing, and by sharing (reused or waited for)
        self.computed = 0
        self.shared = 0

    def _evict(self) -> None:
        """Drop answers nobody can reuse any more, least recently used first, and keep at most
        ``entries``: a client paging through a large run with ``limit=1000`` makes a key per
        page, and each answer can be a megabyte. Called with the lock held."""
        entries, now = self._entries, self._clock()
        while entries:
            oldest = next(iter(entries.values()))
            if len(entries) <= self._size and not (oldest.done.is_set() and now - oldest.at >= self.ttl):
                break
            entries.popitem(last=False)

    def _file(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.location)
        except OSError:
            return None
        return (st.st_dev, st.st_ino)

    def get(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        if self.ttl <= 0:
            self.computed += 1
            return compute()
        file = self._file()
        with self._lock:
            entry = self._entries.get(key)
            fresh = (
                entry is not None
                and entry.file == file
                and file is not None
                and (not entry.done.is_set() or self._clock() - entry.at < self.ttl)
            )
            if fresh:
                assert entry is not None
                self._entries.move_to_end(key)
                self.shared += 1
            else:
                entry = self._entries[key] = _Entry(file)
                self._evict()
                self.computed += 1
        if fresh:
            entry.done.wait()
            if entry.error is not None:
                raise entry.error
            return entry.value
        try:
            entry.value = compute()
        except BaseException as exc:
            entry.error = exc
            with self._lock:  # never reused: the next request tries again
                if self._entries.get(key) is entry:
                    del self._entries[key]
            raise
        finally:
            entry.at = self._clock()
            entry.done.set()
        return entry.value
