"""A run that stops making progress says why, without ``--progress``.

A timer (never work per item) compares how many pipelines have finished with the count it saw
last. When none has finished for ``run.stall_after_s`` while pipelines are in flight, it logs
one line (stderr in the command line) saying why and what to change, and records a
``run.stalled`` event; while the stall lasts it says so again each time the silence doubles.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from pyattacker.resources.blockage import blockage

if TYPE_CHECKING:
    from pyattacker.engine.state import RunState

__all__ = ["StallWatch", "stall_reasons"]

log = logging.getLogger("pyattacker")


class StallWatch:
    """Watches one run's count of finished pipelines on a timer."""

    def __init__(self, run: RunState, after_s: float) -> None:
        self.run = run
        self.after_s = after_s
        self._done = -1
        self._since = 0.0
        self._next = after_s

    async def watch(self) -> None:
        """Check every ``after_s / 4`` (at most every 15 s) until cancelled."""
        interval = min(self.after_s / 4, 15.0)
        while True:
            await asyncio.sleep(interval)
            line = self.check(self.run.clock.now())
            if line is not None:
                log.warning("%s", line)

    def check(self, now: float) -> str | None:
        """The line to say at ``now`` (None: progress, nothing in flight, or said already)."""
        run = self.run
        if run.done != self._done or run.stopping:
            self._done, self._since, self._next = run.done, now, self.after_s
            return None
        in_flight = run.admitted - run.done
        silent = now - self._since
        if in_flight <= 0 or silent < self._next:
            return None
        self._next = 2 * silent
        reasons = stall_reasons(run)
        if run.telemetry is not None:
            run.telemetry.event("run.stalled", "run", data={"silent_s": round(silent, 3), "reasons": reasons})
        told = f"{silent:.1f}" if silent < 10 else f"{silent:.0f}"
        return (
            f"pyattacker: no pipeline has finished for {told}s ({in_flight} in flight): "
            + "; ".join(reasons)
            + f" (said after run.stall_after_s={self.after_s:g} without progress)"
        )


def stall_reasons(run: RunState) -> list[str]:
    """Why the pipelines in flight are not finishing, each with what to change."""
    reasons = [reason for pool in run.pools.values() for reason in blockage(pool)]
    if reasons:
        return reasons
    in_flight = run.admitted - run.done
    if run.parked and len(run.parked) >= in_flight:
        first = max(0.0, run.parked[0][0] - run.clock.now())  # a heap: the earliest is first
        return [
            f"every pipeline in flight waits to retry (the next in {first:.0f}s):"
            " the task's retry policy (base, factor, cap) sets the delays"
        ]
    waiting = sum(int(getattr(pool, "waiting", 0) or 0) for pool in run.pools.values())
    if waiting:
        return [
            f"{waiting} task(s) wait for a lease while every slot is busy: add capacity, or shorten the calls"
        ]
    return [
        "the tasks in flight are still running: a task without timeout_s can run for ever"
        " (set timeout_s on the task entry)"
    ]
