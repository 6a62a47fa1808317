"""The wall budget of one benchmark run, enforced from a thread.

A thread, because the event loop cannot time itself: a loop spinning on ready callbacks never
reaches a timer, and a virtual clock's timers do not follow real time. When the budget is spent
the watchdog cancels the run's task through the loop. A loop blocked in synchronous code (an
algorithm that calls ``time.sleep``, waits on blocking I/O or computes for minutes inside its
``async`` method) never runs that cancellation; once it has not answered for ``BLOCKED_GRACE_S``
the watchdog interrupts the main thread with a signal whose handler raises ``LoopBlocked`` where
the code is blocked (POSIX, and only when the run is on the main thread, where Python runs
signal handlers). The watchdog also follows the run's progress counter, so the error can say
whether the run was stalled or merely slow.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["BLOCKED_GRACE_S", "LoopBlocked", "Watchdog", "interruptible"]

#: real seconds a cancelled run has to answer before its blocked thread is interrupted
BLOCKED_GRACE_S = 2.0
#: the signal that interrupts a blocked main thread (not SIGALRM: test runners time out with it)
_SIGNAL: int | None = getattr(signal, "SIGUSR1", None)


class LoopBlocked(BaseException):
    """Raised in the main thread where synchronous code blocked the run's event loop.

    A ``BaseException``: an algorithm's ``except Exception`` must not take it for a failed
    request and carry on blocking.
    """


def _raise_blocked(signum: int, frame: Any) -> None:
    raise LoopBlocked()


@contextmanager
def interruptible() -> Iterator[int | None]:
    """While active, the main thread can be interrupted by the watchdog; yields the thread's id
    to pass to ``Watchdog`` (``None`` where that cannot be done: not the main thread, or a
    platform without ``pthread_kill``). The previous handler is restored on exit."""
    main = threading.current_thread() is threading.main_thread()
    if not main or _SIGNAL is None or not hasattr(signal, "pthread_kill"):
        yield None
        return
    previous = signal.signal(_SIGNAL, _raise_blocked)
    try:
        yield threading.get_ident()
    finally:
        signal.signal(_SIGNAL, previous)


class Watchdog:
    """Cancels the running task when ``budget_s`` real seconds have passed; interrupts the
    thread ``interrupt`` (from ``interruptible``) when the loop does not answer the cancel."""

    def __init__(self, progress: Callable[[], int], budget_s: float, interrupt: int | None = None) -> None:
        self.budget_s = budget_s
        #: the budget ran out and the run was cancelled
        self.fired = False
        #: the loop did not answer the cancel within the grace period (the thread was interrupted,
        #: or would have been, had that been possible)
        self.blocked = False
        #: real seconds during which the progress counter had not moved when the budget ran out
        self.idle_s = 0.0
        self._progress = progress
        self._interrupt = interrupt
        self._stop = threading.Event()
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._thread = threading.Thread(target=self._watch, name="bench-watchdog", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        start = time.monotonic()
        deadline = start + self.budget_s
        interval = min(0.25, self.budget_s / 4)
        seen = self._progress()
        changed = start
        while True:
            left = deadline - time.monotonic()
            if self._stop.wait(max(0.0, min(interval, left))):
                return
            now = time.monotonic()
            progress = self._progress()
            if progress != seen:
                seen, changed = progress, now
            if now >= deadline:
                break
        self.idle_s = now - changed
        self.fired = True
        if self._task is not None:
            self._loop.call_soon_threadsafe(self._task.cancel)
        # each interrupt ends one blocked call; the next worker may call the same code before
        # the loop reaches the cancel, so interrupt again until the run has ended
        while not self._stop.wait(BLOCKED_GRACE_S):
            self.blocked = True
            if self._interrupt is None:
                return
            signal.pthread_kill(self._interrupt, _SIGNAL)  # type: ignore[arg-type]
