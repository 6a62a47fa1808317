"""The ``local`` shard executor: every shard is a child process on this machine.

It is the reference implementation of the engine-neutral interface in
``pyattacker.shard.executor`` (a cluster executor such as Ray implements the same four calls).

Start method (``start``, or ``PYATTACKER_SHARD_START``): ``spawn`` runs ``python -m pyattacker``;
``fork`` forks this process, which has imported everything and checked the config already, so
the shard skips that start-up (see ``local_fork``). ``auto``, the default, forks on Linux when
this process has a single thread, the interpreter is this one and the job's environment
changes nothing but ``PYATACKER_SHARD`` (a forked child has read its environment already:
``PYTHONPATH`` or the plugin selection would not apply); else it spawns.

Process groups: each child starts in its **own session** (``start_new_session=True``). A
Ctrl-C in the terminal then reaches only the parent, which forwards exactly one SIGINT per
Ctrl-C to each child -- were the children in the parent's group, the terminal's SIGINT plus the
forwarded one would count as a *second* Ctrl-C and stop them without their grace period. The
price is that a child would not see the terminal's signals if the parent vanished, so every
child also gets ``PYATTACKER_SHARD_PARENT_PID`` and stops itself (gracefully, resumable) when
that process is gone, and the parent cancels every handle on its way out.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from typing import IO

from pyattacker import ConfigError, hookimpl
from pyattacker.plugins.hookspecs import Register
from pyattacker.shard.executor import PARENT_PID_ENV, ShardJob, ShardStatus
from pyattacker.shard.plan import SHARD_ENV

from .local_fork import ForkedHandle, fork_shard, single_threaded
from .shard_output import ShardOutput

__all__ = ["START_ENV", "LocalExecutor", "LocalHandle"]

#: the start method when the executor is not given one: auto, fork or spawn
START_ENV = "PYATTACKER_SHARD_START"
START_METHODS = ("auto", "fork", "spawn")


class LocalHandle:
    """One child process; output is drained by two threads so a full pipe never blocks it."""

    def __init__(
        self,
        job: ShardJob,
        proc: subprocess.Popen[str],
        *,
        grace_s: float,
        tail_lines: int,
        relay: IO[str] | None,
        relay_lock: threading.Lock,
    ) -> None:
        self.job = job
        self.pid = proc.pid
        self._proc = proc
        self._grace_s = grace_s
        self._output = ShardOutput(job, tail_lines=tail_lines, relay=relay, relay_lock=relay_lock)
        self._interrupts = 0
        self._threads = [
            threading.Thread(target=self._drain_stdout, daemon=True, name=f"shard{job.index}-out"),
            threading.Thread(target=self._drain_stderr, daemon=True, name=f"shard{job.index}-err"),
        ]
        for t in self._threads:
            t.start()

    def _drain_stdout(self) -> None:
        assert self._proc.stdout is not None
        for chunk in self._proc.stdout:
            self._output.stdout.append(chunk)

    def _drain_stderr(self) -> None:
        assert self._proc.stderr is not None
        for line in self._proc.stderr:
            self._output.stderr_line(line)

    def _status(self, rc: int) -> ShardStatus:
        for t in self._threads:
            t.join(timeout=5.0)  # EOF follows exit unless a grandchild keeps the pipe open
        return self._output.status(rc)

    def poll(self) -> ShardStatus | None:
        rc = self._proc.poll()
        return None if rc is None else self._status(rc)

    def wait(self, timeout: float | None = None) -> ShardStatus:
        try:
            rc = self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"shard {self.job.index} still running after {timeout}s") from None
        return self._status(rc)

    def interrupt(self) -> None:
        """One SIGINT to the child, by pid (the first stops it gracefully, the second at once)."""
        if self._proc.poll() is None:
            self._interrupts += 1
            try:
                self._proc.send_signal(signal.SIGINT)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        """SIGKILL now, to the shard's process group (its session: the shard and whatever it
        started), for a shard that ignored two interrupts (``run_shards``' third Ctrl-C)."""
        if self._proc.poll() is None:  # not reaped: the pid (and its group) is still the shard's
            _kill_group(self.pid)

    def cancel(self) -> ShardStatus:
        """SIGINT (unless already sent), up to ``grace_s`` to finish, then SIGKILL."""
        if not self._interrupts:
            self.interrupt()
        try:
            rc = self._proc.wait(self._grace_s)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            rc = self._proc.wait()
        return self._status(rc)


class LocalExecutor:
    """Starts each shard as a child process on this machine.

    ``python``: the interpreter of spawned shards (default: this one; another one means
    spawn); ``start``: ``auto``, ``fork`` or ``spawn`` (default: ``PYATTACKER_SHARD_START``,
    else ``auto``); ``grace_s``: how long ``cancel`` waits after SIGINT before SIGKILL;
    ``relay_stderr``: copy each child's stderr lines to ours, prefixed ``[shard i/N]``;
    ``tail_lines``: how much stderr a status keeps.
    """

    name = "local"

    def __init__(
        self,
        *,
        python: str | None = None,
        start: str | None = None,
        grace_s: float = 15.0,
        relay_stderr: bool = True,
        tail_lines: int = 40,
    ) -> None:
        self.python = python or sys.executable
        self.start = _start_method(start)
        # float()/int(): `--executor-option grace_s=5` hands every option over as a string
        self.grace_s = float(grace_s)
        self.relay: IO[str] | None = sys.stderr if relay_stderr else None
        self.tail_lines = int(tail_lines)
        self._lock = threading.Lock()
        self._parent_fds: set[int] = set()  # read ends of forked shards' pipes, open here

    def forks(self, job: ShardJob) -> bool:
        """Whether ``submit`` forks for ``job`` (see the module docstring)."""
        if self.start != "auto":
            return self.start == "fork"
        return (
            sys.platform.startswith("linux")
            and self.python == sys.executable
            and all(k == SHARD_ENV or os.environ.get(k) == v for k, v in job.env.items())
            and single_threaded()
        )

    def submit(self, job: ShardJob) -> LocalHandle | ForkedHandle:
        env = dict(os.environ)
        env.update(job.env)
        env[PARENT_PID_ENV] = str(os.getpid())
        if self.forks(job):
            pid, out_fd, err_fd = fork_shard(job, env, self._parent_fds)
            self._parent_fds.update((out_fd, err_fd))
            return ForkedHandle(
                job,
                pid,
                out_fd,
                err_fd,
                grace_s=self.grace_s,
                tail_lines=self.tail_lines,
                relay=self.relay,
                relay_lock=self._lock,
                on_close=self._parent_fds.discard,
            )
        proc = subprocess.Popen(
            [self.python, "-m", "pyattacker", *job.argv],
            env=env,
            cwd=job.cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            encoding="utf-8",
            errors="replace",
            start_new_session=True,
        )
        return LocalHandle(
            job,
            proc,
            grace_s=self.grace_s,
            tail_lines=self.tail_lines,
            relay=self.relay,
            relay_lock=self._lock,
        )

    def __repr__(self) -> str:
        return f"LocalExecutor(python={self.python!r}, start={self.start!r})"


def _kill_group(pid: int) -> None:
    """SIGKILL the process group ``pid`` leads (a shard starts its own session), else ``pid``."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _start_method(start: str | None) -> str:
    where = "start" if start is not None else START_ENV
    value = start if start is not None else (os.environ.get(START_ENV) or "auto")
    if value not in START_METHODS:
        known = ", ".join(START_METHODS)
        raise ConfigError(f"{where}: the shard start method must be one of {known}, got {value!r}")
    if value == "fork" and not hasattr(os, "fork"):
        raise ConfigError(f"{where}: fork is not available on this platform (use spawn)")
    return value


@hookimpl
def pyattacker_shard_executors(register: Register) -> None:
    register("local", LocalExecutor)
