"""Clocks: the real one, and a virtual one that makes timing tests instant and deterministic.

Everything in pyattacker that waits uses the running event loop's time (``asyncio.sleep``,
timeouts, ``loop.call_at``). ``VirtualClock`` therefore supplies an event loop whose time only
moves when the loop would otherwise block: a 30 s cooldown in a test takes no real time and
always ends in the same order. Record timestamps use ``wall()``, which follows the same time.
"""

from __future__ import annotations

import asyncio
import selectors
import time
from typing import Any

__all__ = ["Clock", "RealClock", "VirtualClock", "round3"]


def round3(value: float) -> float:
    """``round(value, 3)`` (half away from zero) in plain arithmetic, which costs less: the hot
    path rounds several durations per task (milliseconds to the microsecond).

    The same value, bit for bit, as ``int(value * 1000.0 ± 0.5) / 1000.0``: for a value that is
    not negative, ``x // 1.0`` is ``float(int(x))`` exactly, without the call of ``int`` (which
    goes through ``type.__call__`` in CPython 3.11). A negative duration (a wall clock stepping
    back) is rare: ``int`` there."""
    if value >= 0.0:
        return (value * 1000.0 + 0.5) // 1.0 / 1000.0
    return int(value * 1000.0 - 0.5) / 1000.0


class Clock:
    """Monotonic ``now()`` for durations and deadlines, ``wall()`` for stored timestamps."""

    def now(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        return asyncio.new_event_loop()


class RealClock(Clock):
    """Wall-clock time; the default everywhere."""


class _VirtualSelector(selectors.DefaultSelector):
    """Never blocks while timers are pending: it advances the loop's virtual time instead."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__()
        self._clock = clock

    def select(self, timeout: float | None = None) -> list[Any]:
        ready = super().select(0)
        if ready or timeout is None or timeout <= 0:
            if not ready and timeout is None:
                return super().select(None)
            return ready
        self._clock.advance(timeout)
        return []


class _VirtualLoop(asyncio.SelectorEventLoop):
    def __init__(self, clock: VirtualClock) -> None:
        self._virtual_clock = clock
        super().__init__(_VirtualSelector(clock))

    def time(self) -> float:
        return self._virtual_clock.now()


class VirtualClock(Clock):
    """Simulated time: starts at ``start`` and jumps to the next timer whenever the loop idles.

    Use ``Runner(clock=VirtualClock())`` (``run()`` builds the loop) or
    ``asyncio.Runner(loop_factory=clock.new_event_loop)`` for your own coroutines.
    """

    def __init__(self, start: float = 0.0, wall_start: float = 1_700_000_000.0) -> None:
        self._now = float(start)
        self._wall_offset = wall_start - start

    def now(self) -> float:
        return self._now

    def wall(self) -> float:
        return self._now + self._wall_offset

    def advance(self, seconds: float) -> None:
        if seconds > 0:
            self._now += seconds

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        return _VirtualLoop(self)
