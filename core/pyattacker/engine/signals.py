"""Ctrl-C and SIGTERM during a run: the first stops gracefully, the second stops now.

The handlers are Python-level (``signal.signal``, not ``loop.add_signal_handler``) so that they
also run while a *sync* task body blocks the loop: no task can make a run ignore Ctrl-C.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading
from typing import Any

from pyattacker.engine.state import RunState

__all__ = ["SignalGuard"]

log = logging.getLogger("pyattacker")


class SignalGuard:
    """Installs the run's SIGINT/SIGTERM handlers and puts the previous ones back."""

    def __init__(self, run: RunState) -> None:
        self.run = run
        self._previous: list[tuple[int, Any]] = []
        self._signalled = 0

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        """Only from the main thread (Python delivers signals there); elsewhere nothing."""
        if threading.current_thread() is not threading.main_thread():
            return
        run = self.run

        def handler(sig: int, frame: Any) -> None:
            self._signalled += 1
            if self._signalled > 1 and run.in_sync:
                # a sync task holds the loop: interrupt it now; every finished task is durable
                # and the rows it leaves running are claimed by the next resume. Nothing may
                # start after it: uvloop runs the rest of the ready callbacks before it lets the
                # exception out, so another ready worker would start its own blocking body.
                run.stopping = True
                raise KeyboardInterrupt
            loop.call_soon_threadsafe(self.on_signal, sig)

        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._previous.append((sig, signal.signal(sig, handler)))
            except (ValueError, OSError):
                pass
        run.owns_signals = bool(self._previous)

    def restore(self) -> None:
        for sig, previous in self._previous:
            signal.signal(sig, previous)
        self._previous.clear()

    def on_signal(self, sig: int) -> None:
        run = self.run
        if run.stopping:
            log.warning("pyattacker: second %s, stopping now", signal.Signals(sig).name)
            run.hard = True
            run.wake_all()
            if run.complete is not None:
                run.complete.set()
            return
        log.warning(
            "pyattacker: %s received, finishing running attempts (Ctrl-C again to stop now)",
            signal.Signals(sig).name,
        )
        run.stop("signal")

    def real_interrupt(self, exc: BaseException) -> bool:
        """Whether a ``BaseException`` out of a task body stops the run rather than failing the task.

        Only a ``KeyboardInterrupt`` can be a real Ctrl-C: this guard's handler raises one into a
        blocking sync body (after setting ``stopping``), and without the guard's handlers
        (``handle_signals=False``, not the main thread) Python's default handler may. Anything
        else (``SystemExit`` from ``sys.exit()``, ``GeneratorExit``, a custom ``BaseException``)
        is task code failing, recorded like any exception.
        """
        return isinstance(exc, KeyboardInterrupt) and (self.run.stopping or not self.run.owns_signals)
