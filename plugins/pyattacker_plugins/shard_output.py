"""What the parent keeps of a local shard's output, however the shard was started.

Its stdout whole (the JSON summary), the last lines of its stderr (for the report of a failed
shard), each stderr line also copied to the parent's stderr with the shard's ``[shard i/N]``
prefix, and the ``ShardStatus`` built from those and the exit code.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import IO

from pyattacker.shard.executor import ShardJob, ShardStatus

__all__ = ["ShardOutput"]


class ShardOutput:
    """One shard's output as it arrives (``stdout.append``, ``stderr_line``)."""

    def __init__(
        self, job: ShardJob, *, tail_lines: int, relay: IO[str] | None, relay_lock: threading.Lock
    ) -> None:
        self.job = job
        self.stdout: list[str] = []
        self.tail: deque[str] = deque(maxlen=tail_lines)
        self._relay = relay
        self._lock = relay_lock
        self._prefix = f"[shard {job.index}/{job.count}] "

    def stderr_line(self, line: str) -> None:
        """Keep ``line`` in the tail and copy it to the parent's stderr, prefixed."""
        self.tail.append(line)
        if self._relay is None:
            return
        with self._lock:
            try:
                self._relay.write(self._prefix + line if line.endswith("\n") else self._prefix + line + "\n")
                self._relay.flush()
            except (OSError, ValueError):
                self._relay = None  # the parent's stderr went away; keep reading

    def status(self, rc: int) -> ShardStatus:
        """The shard's status for exit code ``rc`` (negative: killed by signal ``-rc``)."""
        return ShardStatus(
            index=self.job.index,
            exit_code=rc if rc >= 0 else None,
            signal=-rc if rc < 0 else None,
            stdout="".join(self.stdout),
            stderr_tail="".join(self.tail),
        )
