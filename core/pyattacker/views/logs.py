"""Task logs as a view: the rows of a store's logs as lines of text or JSON, once or followed.

Each stored row is one attempt's log (``LogRecord``); a line shown names its pipeline, task and
attempt. Following polls the store for rows after the last ``log_id`` seen, so a follower
reads only what is new however large the store is.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from pyattacker.errors import ConfigError
from pyattacker.model import LogRecord
from pyattacker.plugins.store_base import StoreBase

__all__ = ["LogFilter", "follow_logs", "line_dicts", "line_texts", "read_logs"]

#: rows read per store call
PAGE = 500


class LogFilter:
    """Which logs to show: a run, a pipeline and a task name (None: any)."""

    __slots__ = ("pipeline_id", "run_id", "task")

    def __init__(self, run_id: str | None = None, pipeline_id: str | None = None, task: str | None = None):
        self.run_id = run_id
        self.pipeline_id = pipeline_id
        self.task = task

    def check(self, store: StoreBase) -> None:
        """Refuse (``ConfigError``) a run or pipeline the store does not hold."""
        if self.run_id is not None and store.get_run(self.run_id) is None:
            raise ConfigError(
                f"store {store.location}: no run {self.run_id!r} (see `pyattacker report --run-id all`)"
            )
        if self.pipeline_id is not None and not store.lookup_pipelines([self.pipeline_id]):
            raise ConfigError(f"store {store.location}: no pipeline {self.pipeline_id!r}")


def read_logs(store: StoreBase, which: LogFilter, after: int | None = None) -> Iterator[LogRecord]:
    """Every log row after ``after`` that ``which`` selects, in ``log_id`` order (paged)."""
    while True:
        rows = store.logs(
            run_id=which.run_id, pipeline_id=which.pipeline_id, task=which.task, after=after, limit=PAGE
        )
        yield from rows
        if len(rows) < PAGE:
            return
        after = rows[-1].log_id


def line_dicts(row: LogRecord) -> list[dict[str, Any]]:
    """One JSON-ready object per line of ``row``."""
    return [
        {
            "log_id": row.log_id,
            "run_id": row.run_id,
            "pipeline_id": row.pipeline_id,
            "task": row.task_name,
            "seq": row.seq,
            "attempt": row.attempt,
            "ts": ts,
            "stream": stream,
            "text": text,
        }
        for ts, stream, text in row.lines
    ]


def line_texts(row: LogRecord) -> list[str]:
    """``HH:MM:SS.mmm pipeline task#attempt stream: text`` per line (UTC)."""
    head = f"{row.pipeline_id[:16]} {row.task_name}#{row.attempt}"
    return [f"{_clock(ts)} {head} {stream}: {text}" for ts, stream, text in row.lines]


def _clock(ts: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(ts)) + f".{int(ts * 1000) % 1000:03d}"


def follow_logs(
    open_store: Callable[[], StoreBase],
    which: LogFilter,
    emit: Callable[[LogRecord], None],
    *,
    interval: float = 0.5,
    sleep: Callable[[float], None] = time.sleep,
    rounds: int | None = None,
) -> None:
    """Show every selected row, then keep polling for new ones every ``interval`` seconds
    (``rounds``: stop after that many polls; None: until interrupted)."""
    store = open_store()
    try:
        which.check(store)
        after: int | None = None
        done = 0
        while rounds is None or done < rounds:
            for row in read_logs(store, which, after):
                emit(row)
                after = row.log_id
            done += 1
            if rounds is None or done < rounds:
                sleep(interval)
    finally:
        store.close()
