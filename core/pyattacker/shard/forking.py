"""A function run in a forked child: the parent's second core for work it would do in turn.

After ``run --shards N`` its parent reads each finished shard's store for the merged report.
Shards of equal size end together, and reading their stores one after the other would leave the
second core idle. A forked child starts with everything the parent has imported and computes the
same value in parallel.

Forking is safe only while this process runs one OS thread (another thread may hold a lock the
child would then wait on forever), and only where ``os.fork`` exists; ``fork_safe`` says whether
both hold. Callers run the function in-process otherwise. The child ignores SIGINT (the parent
decides what a Ctrl-C stops), writes its pickled result to an anonymous file the parent opened
(nothing to clean up, nothing to drain while it runs) and leaves through ``os._exit``, so it
never runs the parent's exit handlers or flushes its buffers again.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Generic, NoReturn, TypeVar

from pyattacker.errors import ExitCode, PyAttackerError

__all__ = [
    "ForkedCall",
    "ForkedCallError",
    "fork_into",
    "fork_safe",
    "parent_signals_held",
    "release_signals",
    "single_threaded",
]

T = TypeVar("T")


class ForkedCallError(PyAttackerError):
    """The forked function raised (the message names the exception), or its child died."""


def single_threaded() -> bool:
    """Whether this process runs one OS thread (threads that ``threading`` never saw count)."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return threading.active_count() == 1


def fork_safe() -> bool:
    """Whether ``ForkedCall`` may fork here: Linux (as the local shard executor) and one thread."""
    return sys.platform.startswith("linux") and hasattr(os, "fork") and single_threaded()


class ForkedCall(Generic[T]):
    """``fn(*args)`` computed in a forked child; ``result()`` waits for it.

    ``fn``'s value must pickle. An exception in the child comes back as ``ForkedCallError``
    carrying ``"<type>: <message>"`` (exceptions themselves need not pickle).
    """

    def __init__(self, fn: Callable[..., T], *args: Any) -> None:
        # imported here, not with the module: every process that discovers plugins imports this
        # one, few fork; and imported before the fork, so that the child finds them loaded
        import pickle  # noqa: F401
        import tempfile

        # already unlinked: nothing outlives the two processes; closed by result() or cancel()
        self._file = tempfile.TemporaryFile()  # noqa: SIM115
        fd = self._file.fileno()
        try:
            self.pid = fork_into(lambda: _child(fd, fn, args))
        except OSError:
            self._file.close()
            raise
        self._done = False
        self._code: int = ExitCode.OK

    def result(self) -> T:
        """Wait for the child; its value, or ``ForkedCallError``."""
        code = self._reap()
        try:
            self._file.seek(0)
            data = self._file.read()
        finally:
            self._file.close()
        if code != ExitCode.OK or not data:
            how = f"was killed by signal {-code}" if code < 0 else f"exited with {code}"
            raise ForkedCallError(f"the forked child {how} before it wrote its result")
        import pickle  # loaded already (``__init__``): a dict lookup

        ok, value = pickle.loads(data)
        if not ok:
            raise ForkedCallError(value)
        return value

    def cancel(self) -> None:
        """Kill the child (if it still runs) and reap it; ``result()`` is then an error."""
        if not self._done:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._reap()
        self._file.close()

    def _reap(self) -> int:
        if self._done:
            return self._code
        try:
            _pid, status = os.waitpid(self.pid, 0)
        except ChildProcessError:  # reaped by someone else: its status is lost
            self._code = 255
        else:
            self._code = os.waitstatus_to_exitcode(status)
        self._done = True
        return self._code


@contextmanager
def parent_signals_held() -> Iterator[None]:
    """Hold SIGINT and SIGTERM back around a fork: a child must set its own handlers before it
    can receive one, or it would run the parent's (which, in a shard loop, signal the shards).
    The child unblocks them itself once its handlers are set (``release_signals``); a signal
    that arrived meanwhile is delivered to the parent when the block ends."""
    held = {signal.SIGINT, signal.SIGTERM}
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def fork_into(child: Callable[[], NoReturn]) -> int:
    """Fork; the child runs ``child()`` (which must end the process, e.g. with ``os._exit``),
    the parent gets the child's pid. The standard streams are flushed first, so the child cannot
    write the parent's buffered output a second time, and SIGINT/SIGTERM are held across the
    fork (``parent_signals_held``): ``child`` calls ``release_signals`` once its handlers are set."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    with parent_signals_held():
        pid = os.fork()
        if pid == 0:
            child()
    return pid


def release_signals() -> None:
    """In a forked child, after its handlers are set: accept SIGINT and SIGTERM again."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


def _child(fd: int, fn: Callable[..., Any], args: tuple[Any, ...]) -> NoReturn:
    import pickle  # (loaded by the parent before it forked: a dict lookup)

    code: int = ExitCode.FAILED  # until the result is written
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        release_signals()
        gc.freeze()  # the parent's objects stay shared: a collection here would copy their pages
        try:
            payload: tuple[bool, Any] = (True, fn(*args))
        except BaseException as exc:
            payload = (False, f"{type(exc).__name__}: {exc}")
        try:
            data = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:
            data = pickle.dumps((False, f"the result cannot be pickled ({type(exc).__name__}: {exc})"))
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        code = ExitCode.OK
    finally:
        os._exit(code)
