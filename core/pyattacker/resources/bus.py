"""A tiny topic pub/sub for cross-pipeline signals, and the bounded subscription it hands out.

Pipelines share nothing but pools (invariant 1); the bus is the one sanctioned side channel
for signals such as "this key was rotated". Delivery never blocks the publisher: every
subscription is a bounded queue that drops its *oldest* item when full, so a slow reader
loses history instead of stalling a hot path (pool events are published here too).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

from pyattacker.clock import Clock, RealClock

__all__ = ["ALL_TOPICS", "Bus", "Subscription"]

T = TypeVar("T")

#: The topic that receives every published message.
ALL_TOPICS = "*"


class Subscription(Generic[T]):
    """A bounded, drop-oldest async iterator; ``close()`` (or ``async with``) ends it.

    It is registered the moment it is created, so nothing published after ``subscribe()``
    returns can be missed by a reader that starts iterating later.
    """

    def __init__(
        self,
        maxsize: int = 1024,
        *,
        accept: Callable[[T], bool] | None = None,
        on_close: Callable[[Subscription[T]], None] | None = None,
    ) -> None:
        if maxsize < 1:
            raise ValueError("maxsize must be >= 1")
        self._items: deque[T] = deque(maxlen=maxsize)
        self._accept = accept
        self._on_close = on_close
        self._waiter: asyncio.Future[None] | None = None
        self.dropped = 0
        self.closed = False

    def put(self, item: T) -> bool:
        """Queue ``item`` (dropping the oldest when full); False when filtered out or closed."""
        if self.closed or (self._accept is not None and not self._accept(item)):
            return False
        if len(self._items) == self._items.maxlen:
            self.dropped += 1
        self._items.append(item)
        self._wake()
        return True

    def get_nowait(self) -> T | None:
        """The oldest queued item, or None when empty (handy in synchronous tests)."""
        return self._items.popleft() if self._items else None

    def pending(self) -> int:
        return len(self._items)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._on_close is not None:
            self._on_close(self)
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def __aiter__(self) -> Subscription[T]:
        return self

    async def __anext__(self) -> T:
        while not self._items:
            if self.closed:
                raise StopAsyncIteration
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._items.popleft()

    async def __aenter__(self) -> Subscription[T]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


class Bus:
    """Topic pub/sub: ``publish(topic, **data)`` returns how many subscribers got it."""

    def __init__(self, clock: Clock | None = None, *, maxsize: int = 1024) -> None:
        self.clock: Clock = clock or RealClock()
        self.maxsize = maxsize
        self._topics: dict[str, list[Subscription[dict[str, Any]]]] = {}
        #: Total live subscriptions; publishers check it to skip building payloads nobody reads.
        self.subscriber_count = 0

    def publish(self, topic: str, **data: Any) -> int:
        """Deliver ``{"ts", "topic", **data}`` to ``topic`` and ``"*"`` subscribers."""
        if not self.subscriber_count:
            return 0
        payload: dict[str, Any] = {"ts": self.clock.wall(), "topic": topic, **data}
        delivered = 0
        for name in (topic, ALL_TOPICS) if topic != ALL_TOPICS else (ALL_TOPICS,):
            for sub in self._topics.get(name, ()):
                delivered += sub.put(payload)
        return delivered

    def subscribe(
        self, topic: str = ALL_TOPICS, *, maxsize: int | None = None
    ) -> Subscription[dict[str, Any]]:
        """An async iterator of payloads for ``topic`` (``"*"``: every topic)."""
        sub: Subscription[dict[str, Any]] = Subscription(
            maxsize or self.maxsize, on_close=lambda s: self._remove(topic, s)
        )
        self._topics.setdefault(topic, []).append(sub)
        self.subscriber_count += 1
        return sub

    def has_subscribers(self, topic: str) -> bool:
        return bool(self._topics.get(topic) or self._topics.get(ALL_TOPICS))

    def topics(self) -> Iterable[str]:
        return [t for t, subs in self._topics.items() if subs]

    def _remove(self, topic: str, sub: Subscription[dict[str, Any]]) -> None:
        subs = self._topics.get(topic)
        if subs and sub in subs:
            subs.remove(sub)
            self.subscriber_count -= 1
