"""The engine-neutral shard-executor interface and the loop that drives it.

``pyattacker run --shards N`` does not know how a shard process is started: it hands each
shard to an *executor* (registered through the ``pyattacker_shard_executors`` hook and chosen
with ``--executor NAME``) as a ``ShardJob`` -- a pyattacker command line plus environment --
and gets back a handle it can poll, wait on, interrupt and cancel. The built-in ``local``
executor starts child processes on this machine; a Ray (or Dask, or SLURM) executor can run
the very same jobs on a cluster without any change to the kernel.

``run_shards`` is the scheduling loop shared by every executor: at most ``jobs`` shards at
once, each started in a free *slot* (0..jobs-1; the slot decides the shard's capacity share,
so concurrently running shards never hold the same slice), SIGINT/SIGTERM forwarded to every
running shard, and -- whatever happens in the parent -- no shard left running when it returns.
"""

from __future__ import annotations

import heapq
import select
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import msgspec

from pyattacker.errors import ConfigError, ExitCode
from pyattacker.plugins.manager import get_plugins

__all__ = [
    "FORCE_AFTER",
    "PARENT_PID_ENV",
    "ShardExecutor",
    "ShardHandle",
    "ShardJob",
    "ShardRun",
    "ShardStatus",
    "executor_note",
    "get_executor",
    "parse_executor_options",
    "run_shards",
]

#: Set by process-based executors: the shard stops itself (gracefully) once this pid is gone.
PARENT_PID_ENV = "PYATTACKER_SHARD_PARENT_PID"


class ShardJob(msgspec.Struct, kw_only=True, frozen=True):
    """One shard to run.

    ``argv`` is the pyattacker command line *without the program* (``["run", "-c", ...]``):
    each executor decides how to invoke pyattacker where it runs (the local one uses
    ``python -m pyattacker``). ``env`` is added on top of the executor's environment;
    ``cwd`` is the working directory (None: the executor's own).
    """

    index: int
    count: int
    argv: list[str]
    env: dict[str, str] = {}
    cwd: str | None = None


class ShardStatus(msgspec.Struct, kw_only=True, frozen=True):
    """How a shard ended: its exit code or the signal that killed it, plus its output.

    ``stdout`` holds the shard's JSON summary (``--summary-format json``); ``stderr_tail`` the
    last lines of its error output, for the parent's report of a failed shard.
    """

    index: int
    exit_code: int | None
    signal: int | None = None
    stdout: str = ""
    stderr_tail: str = ""

    @property
    def code(self) -> int:
        """The documented exit code this shard stands for: a shard killed by a signal is
        ``INTERNAL_ERROR`` (2)."""
        if self.signal is not None or self.exit_code is None:
            return ExitCode.INTERNAL_ERROR
        return self.exit_code

    @property
    def signal_name(self) -> str | None:
        if self.signal is None:
            return None
        try:
            return signal.Signals(self.signal).name
        except ValueError:
            return f"signal {self.signal}"


@runtime_checkable
class ShardHandle(Protocol):
    """A submitted shard. ``interrupt`` is one more Ctrl-C (the first stops the shard
    gracefully, leaving everything resumable; the second stops it at once); ``cancel`` makes
    sure it stops: interrupt if not yet done, wait up to a grace, then force, then wait.
    Optional: ``kill()`` stops it now, without a grace (``run_shards``' third interrupt) --
    without it, that interrupt is one more ``interrupt()``."""

    def poll(self) -> ShardStatus | None: ...

    def wait(self, timeout: float | None = None) -> ShardStatus: ...

    def interrupt(self) -> None: ...

    def cancel(self) -> ShardStatus: ...


@runtime_checkable
class ShardExecutor(Protocol):
    """Starts shards. ``factory(**options)`` (the registered object) returns one of these.
    An executor may also have ``close()`` (release a cluster connection); it is called last."""

    def submit(self, job: ShardJob) -> ShardHandle: ...


def get_executor(name: str, **options: Any) -> ShardExecutor:
    """Instantiate the executor registered as ``name`` (``--executor``)."""
    registry = get_plugins().shard_executors
    factory = registry.get(name)
    if factory is None:
        known = ", ".join(registry.names()) or "none (is the executor-local plugin blocked?)"
        raise ConfigError(f"--executor: no shard executor named {name!r} (known: {known})")
    try:
        executor = factory(**options)
    except (TypeError, ValueError) as exc:  # an option the factory does not take, or a bad value
        given = ", ".join(f"{k}={v!r}" for k, v in sorted(options.items())) or "none"
        raise ConfigError(f"--executor {name}: bad --executor-option ({given}): {exc}") from None
    if not callable(getattr(executor, "submit", None)):
        raise ConfigError(f"--executor {name}: the registered factory returned no submit(job) method")
    return executor


def parse_executor_options(values: tuple[str, ...] | list[str]) -> dict[str, str]:
    """``--executor-option KEY=VALUE`` (repeatable) -> ``{KEY: VALUE}``; values stay strings
    (the executor converts them). A value without ``=``, an empty key or a key given twice is
    a ``ConfigError`` naming it."""
    options: dict[str, str] = {}
    for value in values:
        key, sep, text = value.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--executor-option: expected KEY=VALUE, got {value!r}")
        if key in options:
            raise ConfigError(f"--executor-option: {key} given twice")
        options[key] = text
    return options


def executor_note(executor: Any) -> str | None:
    """The executor's optional ``summary_note()``: one line the summary prints after the shards
    (a cluster executor says there where the shard stores were written)."""
    fn = getattr(executor, "summary_note", None)
    if not callable(fn):
        return None
    try:
        note = fn()
    except Exception as exc:  # the summary must still be printed
        return f"(the executor's summary note failed: {type(exc).__name__}: {exc})"
    return None if note is None else str(note)


@dataclass
class ShardRun:
    """What ``run_shards`` saw: each shard's status (None: never started), and the interrupts."""

    count: int
    statuses: dict[int, ShardStatus] = field(default_factory=dict)
    slots: dict[int, int] = field(default_factory=dict)
    interrupts: int = 0
    #: shards stopped by force at the ``FORCE_AFTER``-th interrupt (they had ignored the others)
    forced: set[int] = field(default_factory=set)

    @property
    def not_started(self) -> list[int]:
        return [i for i in range(self.count) if i not in self.slots]


def _interrupt(handle: Any) -> None:
    fn = getattr(handle, "interrupt", None)
    try:
        if callable(fn):
            fn()
        else:  # an executor without interrupt(): cancel is the only stop it knows
            handle.cancel()
    except Exception:  # forwarding must reach every other shard
        pass


#: the interrupt (Ctrl-C or SIGTERM) that kills the shards still running: the first stops them
#: gracefully, the second at once; a shard still there after that does not react to signals
#: (stuck in a call, a lock inherited through fork), and without this the parent would wait for
#: it forever whatever the user pressed
FORCE_AFTER = 3


def _force(handle: Any) -> None:
    """Stop a shard now (its optional ``kill()``: SIGKILL); without one, one more interrupt."""
    fn = getattr(handle, "kill", None)
    try:
        if callable(fn):
            fn()
        else:
            _interrupt(handle)
    except Exception:  # forcing must reach every other shard
        pass


def _signal_shard(result: ShardRun, index: int, handle: Any, nth: int) -> None:
    """Pass the ``nth`` interrupt on to one shard: an interrupt, or a kill from ``FORCE_AFTER`` on."""
    if nth >= FORCE_AFTER:
        result.forced.add(index)
        _force(handle)
    else:
        _interrupt(handle)


#: how often a shard whose output has closed is polled until it can be reaped
_EXITING_S = 0.005


def _pause(handles: list[Any], timeout: float) -> None:
    """Wait ``timeout``, or less: until a handle's ``wait_fds()`` (optional) becomes readable.

    A handle that reads its shard's output in ``poll`` (the local executor's forked shards)
    offers its pipes, which become readable when the shard writes or ends; waiting on them wakes
    the loop at once. If a running handle has no such method, the loop sleeps ``timeout``.
    """
    fds: list[int] = []
    for handle in handles:
        offered = getattr(handle, "wait_fds", None)
        if not callable(offered):
            time.sleep(timeout)
            return
        got = offered()
        if not got:  # its output is closed: the shard is exiting, and is reaped in a moment
            time.sleep(min(timeout, _EXITING_S))
            return
        fds.extend(got)
    try:
        select.select(fds, [], [], timeout)
    except (OSError, ValueError):  # a descriptor closed meanwhile: the next poll sorts it out
        time.sleep(min(timeout, 0.01))


def run_shards(
    executor: ShardExecutor,
    count: int,
    jobs: int,
    make_job: Callable[[int, int], ShardJob],
    *,
    on_start: Callable[[int, int], None] | None = None,
    on_finish: Callable[[ShardStatus], None] | None = None,
    forward_signals: bool = True,
    poll_interval: float = 0.05,
) -> ShardRun:
    """Run shards ``0..count-1``, at most ``jobs`` at once; ``make_job(index, slot)`` builds each.

    SIGINT/SIGTERM (main thread only, when ``forward_signals``) stop starting new shards and
    are forwarded to every running one, which then ends by itself (130, resumable); the loop
    still waits for them. From the ``FORCE_AFTER``-th (third) on, the shards still running are
    killed instead (``kill()`` of the handle; ``ShardRun.forced``), so a shard that ignores
    signals cannot keep the parent waiting. If anything raises, every running shard is cancelled before the
    exception propagates, so no shard outlives the parent's loop.
    """
    if jobs < 1 or count < 1:
        raise ConfigError(f"run_shards needs count >= 1 and jobs >= 1, got {count} and {jobs}")
    result = ShardRun(count=count)
    pending = deque(range(count))
    free = list(range(min(jobs, count)))
    heapq.heapify(free)
    running: dict[int, tuple[Any, int]] = {}

    def on_signal(signum: int, frame: Any) -> None:
        result.interrupts += 1
        for index, (handle, _slot) in list(running.items()):
            _signal_shard(result, index, handle, result.interrupts)

    previous: dict[int, Any] = {}
    if forward_signals and threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, on_signal)
    try:
        while pending or running:
            while pending and free and not result.interrupts:
                index = pending.popleft()
                slot = heapq.heappop(free)
                seen = result.interrupts
                handle = executor.submit(make_job(index, slot))
                running[index] = (handle, slot)
                for nth in range(seen + 1, result.interrupts + 1):  # signals that arrived during submit
                    _signal_shard(result, index, handle, nth)
                result.slots[index] = slot
                if on_start is not None:
                    on_start(index, slot)
            for index, (handle, slot) in list(running.items()):
                status = handle.poll()
                if status is None:
                    continue
                del running[index]
                heapq.heappush(free, slot)
                result.statuses[index] = status
                if on_finish is not None:
                    on_finish(status)
            if result.interrupts and pending:
                pending.clear()  # never started: nothing of theirs ran, resume runs them
            if running:
                _pause([handle for handle, _slot in running.values()], poll_interval)
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if running:  # only on an exception: stop them all, grace periods overlapping
            for handle, _slot in running.values():
                _interrupt(handle)
            for index, (handle, _slot) in running.items():
                try:
                    result.statuses[index] = handle.cancel()
                except Exception:
                    pass
    return result
