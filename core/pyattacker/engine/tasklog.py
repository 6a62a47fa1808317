"""Task logs: the lines an attempt writes, buffered per attempt and stored with its commit.

A line comes from ``ctx.log()``, from Python ``logging`` inside the task body (``LogCapture``,
a handler on the root logger for the run) or from ``shell_run``'s output. Lines go into the
attempt's ``AttemptLog`` (created on the first line: an attempt that logs nothing costs
nothing); when the attempt ends, the scheduler turns it into one ``LogRecord`` added to the
next commit. Each attempt keeps at most ``run.log_bytes_per_attempt`` bytes of text: the first
lines are kept whole, later ones are counted as dropped and the record says how many.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from pyattacker.model import LogRecord

if TYPE_CHECKING:
    from pyattacker.engine.state import PipelineState, RunState

__all__ = ["AttemptLog", "LogCapture", "end_all", "end_attempt_log", "write_line"]

#: a line longer than this is cut (and marked) before it counts against the attempt's limit
MAX_LINE = 8192


class AttemptLog:
    """The lines of one attempt, bounded in bytes (the text's UTF-8 length, roughly)."""

    __slots__ = ("attempt", "dropped_bytes", "dropped_lines", "limit", "lines", "seq", "size")

    def __init__(self, seq: int, attempt: int, limit: int) -> None:
        self.seq = seq
        self.attempt = attempt
        self.limit = limit
        self.lines: list[tuple[float, str, str]] = []
        self.size = 0
        self.dropped_lines = 0
        self.dropped_bytes = 0

    def add(self, ts: float, stream: str, text: str) -> None:
        if len(text) > MAX_LINE:
            text = f"{text[:MAX_LINE]}... [{len(text) - MAX_LINE} characters cut]"
        n = len(text.encode("utf-8", "replace"))
        if self.dropped_lines or self.size + n > self.limit:
            self.dropped_lines += 1
            self.dropped_bytes += n
            return
        self.size += n
        self.lines.append((ts, stream, text))


def write_line(run: RunState, state: PipelineState, seq: int, attempt: int, stream: str, text: str) -> bool:
    """Add ``text`` (split into lines) to the log of ``state``'s attempt ``(seq, attempt)``;
    False when that attempt is no longer the pipeline's running one (a stale ``ctx``)."""
    if state.seq != seq or state.attempt != attempt:
        return False
    buf = run.task_logs.get(state)
    if buf is None or buf.seq != seq or buf.attempt != attempt:
        if buf is not None:  # lines logged after an earlier attempt ended: stored on their own
            end_attempt_log(run, state)
        buf = run.task_logs[state] = AttemptLog(seq, attempt, run.config.log_bytes_per_attempt)
    now = run.wall()
    for line in text.splitlines() or [""]:
        buf.add(now, stream, line)
    return True


def end_all(run: RunState) -> None:
    """The run ends: logs still buffered (an attempt stopped mid-way) go to its last commit."""
    for state in list(run.task_logs):
        end_attempt_log(run, state)


def end_attempt_log(run: RunState, state: PipelineState) -> None:
    """The attempt of ``state`` ended: its log (if it wrote any) goes to the next commit."""
    buf = run.task_logs.pop(state, None)
    if buf is None or run.recorder is None:
        return
    spec = state.tasks[buf.seq]
    if buf.dropped_lines:
        buf.lines.append(
            (
                run.wall(),
                "pyattacker",
                f"[{buf.dropped_lines} more lines ({buf.dropped_bytes} bytes) dropped: an attempt"
                f" keeps {buf.limit} bytes of log (run.log_bytes_per_attempt)]",
            )
        )
    run.recorder.pending.logs.append(
        LogRecord(
            run_id=run.run_id,
            pipeline_id=state.spec.key,
            task_run_id=f"{state.spec.key}:{buf.seq}",
            task_name=spec.name,
            seq=buf.seq,
            attempt=buf.attempt,
            ts=buf.lines[0][0] if buf.lines else run.wall(),
            lines=buf.lines,
            dropped_lines=buf.dropped_lines,
            dropped_bytes=buf.dropped_bytes,
        )
    )


class LogCapture(logging.Handler):
    """A root-logger handler for the run: a record emitted while a task body runs on one of
    the run's workers goes to that attempt's log (records outside task code are left alone).

    Records reach it when their logger's level lets them through (the root logger's default
    is WARNING); bodies run in other threads (``asyncio.to_thread``) are not captured.
    """

    def __init__(self, run: RunState, worker_type: type) -> None:
        super().__init__(logging.NOTSET)
        self.run = run
        self.worker_type = worker_type
        self.setFormatter(logging.Formatter("%(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        last = logging.lastResort
        if last is not None and record.levelno >= last.level and not self._others(record):
            last.handle(record)  # what logging did for this record before this handler came
        try:
            task = asyncio.current_task()
        except RuntimeError:  # no loop in this thread
            return
        state = getattr(task, "held", None) if type(task) is self.worker_type else None
        if state is None or state.attempt == 0 or state.seq >= state.n:  # between attempts
            return
        if self.run.active.get(state.spec.key) is not state.spec:  # another runner's worker
            return
        try:
            text = self.format(record)
        except Exception:  # a bad format string fails the record, never the task
            text = str(record.msg)
        write_line(self.run, state, state.seq, state.attempt, record.levelname, text)

    def _others(self, record: logging.LogRecord) -> bool:
        """Whether a handler besides this one takes ``record`` (else logging's last resort would)."""
        logger: logging.Logger | None = logging.getLogger(record.name)
        while logger is not None:
            if any(h is not self for h in logger.handlers):
                return True
            logger = logger.parent if logger.propagate else None
        return False

    def install(self) -> None:
        logging.getLogger().addHandler(self)

    def remove(self) -> None:
        logging.getLogger().removeHandler(self)
