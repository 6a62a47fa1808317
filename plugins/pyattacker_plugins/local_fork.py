"""Forking a shard from the parent: the child's set-up, and a handle that needs no threads.

When ``pyattacker run --shards N`` starts its shards it has already imported pyattacker,
discovered the plugins and checked the config. A child started as ``python -m pyattacker`` does
all of that again before its first pipeline; a forked child starts from the parent's state and
runs its first pipeline at once.

Forking is safe only in a process with a single thread (another thread may hold a lock that the
child would then wait on forever), so the local executor forks only then, and ``ForkedHandle``
reads the child's output in ``poll`` and ``wait`` instead of on threads: the next shard can be
forked too. The child reads nothing of the parent's standard streams, resets the signals the
parent's shard loop handles, and leaves through ``os._exit``, so it never returns into the
parent's code.
"""

from __future__ import annotations

import atexit
import codecs
import gc
import os
import select
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from typing import IO, NoReturn

from pyattacker.errors import ExitCode
from pyattacker.shard.executor import ShardJob, ShardStatus
from pyattacker.shard.forking import fork_into, release_signals, single_threaded

from .shard_output import ShardOutput

__all__ = ["ForkedHandle", "fork_shard", "single_threaded"]

#: the interpreter's own code for an uncaught exception or ``SystemExit("message")``; the parent
#: counts a shard that ends so, without a JSON summary, as ``ExitCode.INTERNAL_ERROR``
_UNCAUGHT = 1
#: how long a finished shard's pipes are read for an end of file (a grandchild may hold them)
EOF_WAIT_S = 5.0


def fork_shard(job: ShardJob, env: dict[str, str], inherited: Iterable[int]) -> tuple[int, int, int]:
    """Fork a child that runs ``pyattacker <job.argv>`` with ``env`` as its whole environment.

    Returns ``(pid, stdout fd, stderr fd)``: the read ends of the child's output pipes. The
    child closes ``inherited`` (the parent's ends of other shards' pipes) before it runs.
    """
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    try:
        pid = fork_into(lambda: _child(job, env, out_w, err_w, [out_r, err_r, *inherited]))
    except OSError:
        for fd in (out_r, out_w, err_r, err_w):
            os.close(fd)
        raise
    os.close(out_w)
    os.close(err_w)
    return pid, out_r, err_r


def _child(job: ShardJob, env: dict[str, str], out_w: int, err_w: int, close: list[int]) -> NoReturn:
    """The forked shard: its own session, streams and environment; then the command line."""
    code: int = _UNCAUGHT
    try:
        os.setsid()  # as the spawned shards: a Ctrl-C reaches the parent only, which forwards it
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        release_signals()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        for fd in {null, out_w, err_w, *close}:
            if fd > 2:
                try:
                    os.close(fd)
                except OSError:
                    pass
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", buffering=1, closefd=False)  # noqa: SIM115
        os.environ.clear()
        os.environ.update(env)
        if job.cwd is not None:
            os.chdir(job.cwd)
        sys.argv = ["pyattacker", *job.argv]
        atexit._clear()  # the parent's exit handlers are the parent's
        # the parent's objects stay shared: the shard's full collections neither trace them nor
        # copy the pages their headers are on
        gc.freeze()
        from pyattacker.cli.main import main  # in the forked shard only

        main(list(job.argv))
        code = ExitCode.OK
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except KeyboardInterrupt:
        code = ExitCode.INTERRUPTED
    except BaseException:
        traceback.print_exc()
        code = _UNCAUGHT
    finally:
        try:
            atexit._run_exitfuncs()
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
        except BaseException:
            pass
        os._exit(code)


def _exit_code(value: object) -> int:
    """What the interpreter makes of ``SystemExit(value)``."""
    if value is None:
        return ExitCode.OK
    if isinstance(value, int):
        return value & 0xFF
    try:
        print(value, file=sys.stderr)
    except Exception:
        pass
    return _UNCAUGHT


class ForkedHandle:
    """A forked shard. Its output is read whenever the handle is polled or waited on, so the
    parent runs no threads; a child blocked on a full pipe waits until the next poll."""

    def __init__(
        self,
        job: ShardJob,
        pid: int,
        stdout_fd: int,
        stderr_fd: int,
        *,
        grace_s: float,
        tail_lines: int,
        relay: IO[str] | None,
        relay_lock: threading.Lock,
        on_close: Callable[[int], None] = lambda fd: None,
    ) -> None:
        self.job = job
        self.pid = pid
        self._grace_s = grace_s
        self._on_close = on_close
        self._output = ShardOutput(job, tail_lines=tail_lines, relay=relay, relay_lock=relay_lock)
        decoder = codecs.getincrementaldecoder("utf-8")
        self._fds = {stdout_fd: decoder("replace"), stderr_fd: decoder("replace")}
        self._stdout_fd = stdout_fd
        for fd in self._fds:
            os.set_blocking(fd, False)
        self._partial = ""
        self._rc: int | None = None
        self._final: ShardStatus | None = None
        self._interrupts = 0

    # -- output ---------------------------------------------------------------------------------
    def _read(self) -> None:
        for fd in list(self._fds):
            while True:
                try:
                    chunk = os.read(fd, 65536)
                except BlockingIOError:
                    break
                if not chunk:
                    self._close(fd)
                    break
                self._take(fd, chunk)

    def _take(self, fd: int, chunk: bytes, final: bool = False) -> None:
        text = self._fds[fd].decode(chunk, final)
        if fd == self._stdout_fd:
            self._output.stdout.append(text)
            return
        *lines, self._partial = (self._partial + text).split("\n")
        for line in lines:
            self._output.stderr_line(line + "\n")
        if final and self._partial:
            self._output.stderr_line(self._partial)
            self._partial = ""

    def _close(self, fd: int) -> None:
        self._take(fd, b"", final=True)
        del self._fds[fd]
        os.close(fd)
        self._on_close(fd)

    def wait_fds(self) -> list[int]:
        """The pipes that become readable when the shard writes or ends (``run_shards`` waits
        on them instead of sleeping, so a shard's end is seen at once)."""
        return list(self._fds)

    def _wait_for_output(self, timeout: float) -> None:
        if self._fds:
            select.select(list(self._fds), [], [], timeout)
        else:
            time.sleep(timeout)

    # -- the process ----------------------------------------------------------------------------
    def _reap(self) -> int | None:
        if self._rc is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped by someone else: its status is lost
                self._rc = 255
            else:
                if pid:
                    self._rc = os.waitstatus_to_exitcode(status)
        return self._rc

    def _status(self, rc: int) -> ShardStatus:
        if self._final is None:
            deadline = time.monotonic() + EOF_WAIT_S
            while self._fds and time.monotonic() < deadline:
                self._read()
                self._wait_for_output(0.05)
            for fd in list(self._fds):
                self._close(fd)
            self._final = self._output.status(rc)
        return self._final

    def poll(self) -> ShardStatus | None:
        self._read()
        rc = self._reap()
        return None if rc is None else self._status(rc)

    def wait(self, timeout: float | None = None) -> ShardStatus:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status = self.poll()
            if status is not None:
                return status
            left = 0.05 if deadline is None else min(0.05, deadline - time.monotonic())
            if left <= 0:
                raise TimeoutError(f"shard {self.job.index} still running after {timeout}s")
            self._wait_for_output(left)

    def _send(self, sig: int) -> None:
        if self._reap() is None:  # never a recycled pid: this handle alone reaps the child
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def interrupt(self) -> None:
        """One SIGINT to the child, by pid (the first stops it gracefully, the second at once)."""
        if self._reap() is None:
            self._interrupts += 1
            self._send(signal.SIGINT)

    def kill(self) -> None:
        """SIGKILL now, to the shard's process group (its session: the shard and whatever it
        started), for a shard that ignored two interrupts (``run_shards``' third Ctrl-C)."""
        if self._reap() is None:  # not reaped: the pid (and its group) is still the shard's
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self._send(signal.SIGKILL)

    def cancel(self) -> ShardStatus:
        """SIGINT (unless already sent), up to ``grace_s`` to finish, then SIGKILL."""
        if not self._interrupts:
            self.interrupt()
        try:
            return self.wait(self._grace_s)
        except TimeoutError:
            self._send(signal.SIGKILL)
            return self.wait()
