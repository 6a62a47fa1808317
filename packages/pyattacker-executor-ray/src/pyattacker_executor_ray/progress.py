"""Progress of the running shards, read from their stores (as ``pyattacker watch`` does).

A daemon thread of the driver reads, every ``interval`` seconds, the pipeline counts of each
running shard whose store the driver sees, and writes one line per shard to stderr. It runs
beside the shard loop, so a slow read never delays polling or signal forwarding.
"""

from __future__ import annotations

import sys
import threading

__all__ = ["ProgressReporter", "progress_line"]


def progress_line(index: int, count: int, store: str) -> str:
    """``[ray] shard 0/2: succeeded 12  running 3`` from the store's pipeline rows."""
    from pyattacker.store.location import open_store  # the store layer, only when a line is due

    reader = open_store(store, read_only=True)
    try:
        by_state, _durations, attempts = reader.pipeline_totals()
    finally:
        reader.close()
    states = "  ".join(f"{state} {n}" for state, n in sorted(by_state.items())) or "no pipeline yet"
    return f"[ray] shard {index}/{count}: {states}  attempts {attempts}"


class ProgressReporter:
    """One line per running shard every ``interval`` seconds, on a daemon thread."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.shards: dict[int, tuple[int, str]] = {}
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.thread: threading.Thread | None = None

    def add(self, index: int, count: int, store: str) -> None:
        """Follow shard ``index`` of ``count`` (``store``: as the driver reaches it)."""
        with self.lock:
            self.shards[index] = (count, store)
        if self.thread is None:
            self.thread = threading.Thread(target=self._loop, daemon=True, name="pyattacker-ray-progress")
            self.thread.start()

    def remove(self, index: int) -> None:
        with self.lock:
            self.shards.pop(index, None)

    def stop(self) -> None:
        self.stopped.set()

    def _loop(self) -> None:
        while not self.stopped.wait(self.interval):
            with self.lock:
                shards = sorted(self.shards.items())
            for index, (count, store) in shards:
                try:
                    line = progress_line(index, count, store)
                except Exception:  # not created yet, or locked a moment: the next round shows it
                    continue
                sys.stderr.write(line + "\n")
                sys.stderr.flush()
