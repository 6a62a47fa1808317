"""The garbage collector's settings while runs are going, restored when the last one ends.

Thousands of pipelines in flight keep many objects alive, and with Python's default thresholds
the collector walks them again and again: at C=4,096 it took a fifth of the run's CPU. While a
run goes, ``RunCollector`` freezes what existed before it (imports, plugins, the program's own
objects: never garbage the run makes) and raises the first generation's threshold, so the
collector runs a few times per run instead of hundreds. Both are undone when the last run of the
process ends (``gc.unfreeze`` hands the frozen objects back to the collector).

Only a collector as Python starts it (enabled, default thresholds) is tuned: a program that set
its own thresholds or disabled the collector keeps exactly its settings. Objects frozen before the
run (a forked shard freezes its parent's) stay as they are: the threshold is raised, nothing more
is frozen, and nothing is unfrozen after.
"""

from __future__ import annotations

import gc
import threading

__all__ = ["DEFAULT_THRESHOLDS", "RUN_THRESHOLD", "RunCollector"]

#: what ``gc.get_threshold()`` answers in a process that never changed it
DEFAULT_THRESHOLDS = (700, 10, 10)
#: the first generation's threshold during a run (allocations net of frees between collections)
RUN_THRESHOLD = 50_000


class _Tuning:
    """Process-wide: how many runs hold the tuning, and what to restore after the last."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holders = 0
        self.saved: tuple[int, int, int] | None = None
        #: whether the run froze the objects (and so unfreezes them after the last run)
        self.froze = False


_TUNING = _Tuning()


def _untouched() -> bool:
    """The collector as the interpreter starts it: no settings of the program's to respect."""
    return gc.isenabled() and gc.get_threshold() == DEFAULT_THRESHOLDS


class RunCollector:
    """``with RunCollector():`` around a run; nests and overlaps (runs on several threads)."""

    def __init__(self) -> None:
        self._held = False

    def __enter__(self) -> RunCollector:
        tuning = _TUNING
        with tuning.lock:
            if tuning.holders:
                tuning.holders += 1
                self._held = True
            elif _untouched():
                tuning.saved = gc.get_threshold()  # (the defaults: checked just above)
                tuning.froze = gc.get_freeze_count() == 0
                if tuning.froze:
                    gc.freeze()
                gc.set_threshold(RUN_THRESHOLD, *tuning.saved[1:])
                tuning.holders = 1
                self._held = True
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._held:
            return
        self._held = False
        tuning = _TUNING
        with tuning.lock:
            tuning.holders -= 1
            if tuning.holders or tuning.saved is None:
                return
            # restored only if nobody changed them meanwhile (a task or the program may have)
            if gc.get_threshold()[0] == RUN_THRESHOLD:
                gc.set_threshold(*tuning.saved)
            if tuning.froze:
                gc.unfreeze()
            tuning.saved, tuning.froze = None, False
