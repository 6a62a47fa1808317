"""The ``console`` event sink: one stderr line per event a person should notice.

Failures, scheduled retries, resource health changes and failed pipelines are printed; the
high-volume rest (leases, successes) is not, so the console stays readable for hours.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Collection, Mapping
from typing import IO, Any

from pyattacker import ConfigError, hookimpl
from pyattacker.model import EventRecord

__all__ = ["NOTABLE_KINDS", "ConsoleSink"]

NOTABLE_KINDS = frozenset(
    {
        "task.failed",
        "task.retry_scheduled",
        "resource.degraded",
        "resource.dead",
        "resource.recovered",
        "pipeline.failed",
        "pipeline.terminal_repair_failed",
        "runner.worker_crashed",
        "runner.worker_cancelled",
        "lease.leaked",
        "acquire.waiting_unmatched",
        "acquire.suspected_deadlock",
    }
)


def _pool_place(ev: EventRecord) -> str:
    """``pool/resource``, or the pool alone for a pool-wide event (a wait), or ``-``."""
    if not ev.pool:
        return "-"
    return f"{ev.pool}/{ev.resource_id}" if ev.resource_id else ev.pool


def _one_line(value: Any, limit: int = 300) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class ConsoleSink:
    """Prints notable events to ``stream`` (stderr by default); ``kinds`` overrides the set."""

    def __init__(self, stream: IO[str] | None = None, kinds: Collection[str] | None = None) -> None:
        problems = self.validate({"stream": stream, "kinds": kinds})
        if problems:
            raise ConfigError(f"event sink 'console': {'; '.join(problems)}")
        self.stream = stream
        self.kinds = frozenset(kinds) if kinds is not None else NOTABLE_KINDS

    @staticmethod
    def validate(options: Mapping[str, Any]) -> list[str]:
        """Option problems as ``"field: message"``, for ``validate`` to report before a run:
        ``kinds: 5`` would end the run with a traceback, and ``kinds: task.failed`` (one string)
        would silently watch its single letters, so nothing would ever be printed."""
        problems = []
        stream = options.get("stream")
        if stream is not None and not callable(getattr(stream, "write", None)):
            problems.append(
                f"stream: must be a writable text stream, given from Python (ConsoleSink(stream=...));"
                f" a config cannot name one (stderr is the default), got {stream!r}"
            )
        kinds = options.get("kinds")
        if kinds is None:
            return problems
        if isinstance(kinds, str | bytes | Mapping) or not isinstance(kinds, Collection):
            problems.append(f"kinds: must be a list of event kinds (e.g. [task.failed]), got {kinds!r}")
            return problems
        for i, kind in enumerate(kinds):
            if not isinstance(kind, str) or not kind:
                problems.append(f"kinds[{i}]: must be a non-empty event kind, got {kind!r}")
        return problems

    def format(self, ev: EventRecord) -> str:
        data = ev.data or {}
        where = ev.pipeline_id or data.get("pipeline_id") or _pool_place(ev)
        clock = time.strftime("%H:%M:%S", time.localtime(ev.ts))
        parts = [clock, ev.kind, where]
        for key in ("task", "attempt", "error_class", "delay_s", "consecutive_failures", "reason", "phase"):
            if data.get(key) is not None:
                parts.append(f"{key}={data[key]}")
        if data.get("error"):
            parts.append(_one_line(data["error"]))
        elif data.get("hint"):  # the wait hints say what is wrong in one sentence
            parts.append(_one_line(data["hint"]))
        return " ".join(str(p) for p in parts)

    def handle(self, events: list[EventRecord]) -> None:
        out = self.stream or sys.stderr
        lines = [self.format(ev) for ev in events if ev.kind in self.kinds]
        if lines:
            out.write("\n".join(lines) + "\n")
            out.flush()

    def close(self) -> None:
        pass


@hookimpl
def pyattacker_event_sinks(register: Any) -> None:
    register("console", ConsoleSink)
