"""``WorkQueue``: the runner's bounded FIFO of admitted pipelines, between the producer (and the
delay pump) and the workers.

It has ``asyncio.Queue``'s semantics for what the runner uses (``put``, ``get``, ``get_nowait``,
``qsize``, ``empty``; a waiter that is cancelled hands its wake-up on, as there), plus ``offer``
and ``take``: an item handed over without a coroutine when nobody has to wait, which is nearly
always. ``asyncio.Queue`` spends a coroutine and four to eight Python calls on each side of every
handover (``put``, ``full``, ``qsize``, ``put_nowait``, ``_put``...), once per pipeline on the
hot path. ``push_front`` puts back pipelines that left a worker to wait for their group commit:
ahead of new ones, past the bound (they were counted when admitted).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

__all__ = ["EMPTY", "WorkQueue"]

T = TypeVar("T")

#: what ``take`` returns when no item is queued (then ``await get()``)
EMPTY: Any = object()


def _wake_one(waiters: deque[asyncio.Future[None]]) -> None:
    """Wake the first waiter that is still waiting (a cancelled one is skipped)."""
    while waiters:
        waiter = waiters.popleft()
        if not waiter.done():
            waiter.set_result(None)
            return


async def _wait(waiters: deque[asyncio.Future[None]], ready: Callable[[], bool]) -> None:
    """Wait in ``waiters`` until woken. A waiter cancelled after it was woken hands the wake-up
    on to the next one when ``ready()`` (there is still an item, or room), as asyncio.Queue's do."""
    waiter = asyncio.get_running_loop().create_future()
    waiters.append(waiter)
    try:
        await waiter
    except BaseException:
        waiter.cancel()  # (in case it was woken and then cancelled)
        try:
            waiters.remove(waiter)
        except ValueError:  # woken already: the wake-up goes to the next waiter
            pass
        if ready() and not waiter.cancelled():
            _wake_one(waiters)
        raise


class WorkQueue(Generic[T]):
    """A bounded FIFO queue for coroutines of one event loop."""

    __slots__ = ("_getters", "_items", "_maxsize", "_putters")

    def __init__(self, maxsize: int) -> None:
        self._items: deque[T] = deque()
        self._maxsize = maxsize
        self._getters: deque[asyncio.Future[None]] = deque()
        self._putters: deque[asyncio.Future[None]] = deque()

    def qsize(self) -> int:
        return len(self._items)

    def empty(self) -> bool:
        return not self._items

    def offer(self, item: T) -> bool:
        """Queue ``item`` if there is room (waking a waiting ``get``); False when full."""
        items = self._items
        if len(items) >= self._maxsize:
            return False
        items.append(item)
        if self._getters:
            _wake_one(self._getters)
        return True

    def push_front(self, items: Sequence[T]) -> None:
        """Queue ``items`` ahead of everything, in their order, whatever the bound: items that
        were taken from the queue before and come back (counted in the bound when admitted)."""
        self._items.extendleft(reversed(items))
        getters = self._getters
        for _ in items:
            if not getters:
                break
            _wake_one(getters)

    async def put(self, item: T) -> None:
        """Queue ``item``, waiting while the queue is full."""
        while not self.offer(item):
            await _wait(self._putters, lambda: len(self._items) < self._maxsize)

    def take(self) -> T:
        """The next item, or ``EMPTY`` when none is queued (waking a waiting ``put``)."""
        items = self._items
        if not items:
            return EMPTY
        item = items.popleft()
        if self._putters:
            _wake_one(self._putters)
        return item

    def get_nowait(self) -> T:
        item = self.take()
        if item is EMPTY:
            raise asyncio.QueueEmpty
        return item

    async def get(self) -> T:
        """The next item, waiting while the queue is empty."""
        while not self._items:
            await _wait(self._getters, lambda: bool(self._items))
        return self.take()
