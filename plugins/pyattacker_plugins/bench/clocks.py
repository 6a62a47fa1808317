"""The two clocks a benchmark runs on.

``virtual`` is the kernel's ``VirtualClock``: the loop's time jumps to the next timer whenever
the loop idles, so ten simulated minutes cost only the CPU time of the work in them.
``real`` is ``ScaledClock``: real time compressed ``speedup`` times. It exists to check the
simulator: the same scenario replayed against the wall clock, with the OS scheduling timers,
should tell the same story as the virtual run (not the same numbers: real timers are noisy).

Either way the loop's ``time()`` is the clock's ``now()``, and the pool is given the same
clock, so cooldowns, backoff sleeps and retry delays all follow simulated time.
"""

from __future__ import annotations

import asyncio
import selectors
import time
from typing import Any

from pyattacker import ConfigError, VirtualClock
from pyattacker.clock import Clock

__all__ = ["CLOCKS", "ScaledClock", "make_clock"]

#: the names ``--clock`` accepts
CLOCKS = ("virtual", "real")


class ScaledClock(Clock):
    """Loop time = real time x ``speedup`` (starting at 0): a 10 s cooldown lasts 10/speedup s."""

    def __init__(self, speedup: float, wall_start: float = 1_700_000_000.0) -> None:
        if not speedup > 0:
            raise ConfigError(f"speedup must be positive, got {speedup!r}")
        self.speedup = float(speedup)
        self._origin = time.monotonic()
        self._wall_offset = wall_start

    def now(self) -> float:
        return (time.monotonic() - self._origin) * self.speedup

    def wall(self) -> float:
        return self.now() + self._wall_offset

    def new_event_loop(self) -> asyncio.AbstractEventLoop:
        return _ScaledLoop(self)


#: the longest real wait of one ``select``: the loop then looks at its timers again. Without it a
#: tiny ``--speedup`` turns a timer's simulated seconds into more real seconds than ``poll``
#: takes (an OverflowError traceback). Waking up early is harmless: the loop recomputes.
MAX_SELECT_S = 60.0


class _ScaledSelector(selectors.DefaultSelector):
    """Turns the loop's timeouts (simulated seconds) into real ones."""

    def __init__(self, speedup: float) -> None:
        super().__init__()
        self._speedup = speedup

    def select(self, timeout: float | None = None) -> list[Any]:
        if timeout is not None and timeout > 0:
            timeout = min(timeout / self._speedup, MAX_SELECT_S)
        return super().select(timeout)


class _ScaledLoop(asyncio.SelectorEventLoop):
    def __init__(self, clock: ScaledClock) -> None:
        self._scaled_clock = clock
        super().__init__(_ScaledSelector(clock.speedup))

    def time(self) -> float:
        return self._scaled_clock.now()


def make_clock(kind: str, speedup: float) -> Clock:
    """A fresh clock for one run (each run starts at simulated time 0)."""
    if kind == "virtual":
        return VirtualClock()
    if kind == "real":
        return ScaledClock(speedup)
    raise ConfigError(f"--clock: must be one of {', '.join(CLOCKS)}, got {kind!r}")
