"""What runs on a Ray node: one shard as a ``python -m pyattacker`` child of a Ray actor.

The actor (``ShardProcess``, made remote by the executor) is placed first and says which node
it is on; the driver then tells it where the store lives (``start``): on a path the driver
sees too, or in a private folder of the node whose files travel with the calls (``ship``).
Its child runs in a session of its own, so only the signals the driver forwards reach it, and
it knows the actor's pid (``PYATTACKER_SHARD_PARENT_PID``): if the actor's worker dies, the
shard stops itself gracefully and its store stays resumable.

Nothing here imports Ray at import time; the node id is asked for only when placed.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from typing import Any

from pyattacker.shard.executor import PARENT_PID_ENV
from pyattacker_executor_ray.storage import read_store_files, write_store_files

__all__ = ["ShardProcess", "store_argument"]


def store_argument(argv: list[str]) -> int:
    """The index in ``argv`` of the value of ``--store`` (every shard job has one)."""
    for i, arg in enumerate(argv[:-1]):
        if arg == "--store":
            return i + 1
    raise ValueError("the shard's command line has no --store")


def _unblock_signals() -> None:
    """In the shard's child before its exec: Ray's worker threads block SIGINT, and a blocked
    mask is inherited, so without this the shard would never see the driver's Ctrl-C."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


class ShardProcess:
    """One shard on the node this actor was placed on."""

    def __init__(self, job: dict[str, Any], env: dict[str, str]) -> None:
        self.job = job
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.private: str | None = None  # ship mode: the node-local folder of the store
        self.stdout = bytearray()
        self.lines: list[str] = []
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        #: the actor is threaded (a long poll must not hold back a signal), so calls can overtake
        #: ``start``: they wait for it, and a signal sent before the child exists is kept for it
        self.started = threading.Event()
        self.early_signals: list[int] = []

    def node(self) -> str:
        """The id of the Ray node this actor runs on."""
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def start(self, ship: bool, files: dict[str, bytes]) -> int:
        """Start the shard (``ship``: into a private copy of its store, made of ``files``); its pid."""
        argv = list(self.job["argv"])
        cwd = self.job.get("cwd")
        if cwd is not None and not os.path.isdir(cwd):
            cwd = None  # the driver's folder is not on this node: paths in argv must be absolute
        if ship:
            at = store_argument(argv)
            self.private = tempfile.mkdtemp(prefix="pyattacker-ray-shard-")
            local = os.path.join(self.private, os.path.basename(argv[at]))
            if files:
                write_store_files(local, files)
            argv[at] = local
        env = {**os.environ, **self.env, **self.job.get("env", {}), PARENT_PID_ENV: str(os.getpid())}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pyattacker", *argv],
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            preexec_fn=_unblock_signals,
        )
        self.threads = [
            threading.Thread(target=self._drain_stdout, daemon=True),
            threading.Thread(target=self._drain_stderr, daemon=True),
        ]
        for t in self.threads:
            t.start()
        with self.lock:
            early, self.early_signals = self.early_signals, []
            self.started.set()
        for signum in early:
            self.send(signum)
        return self.proc.pid

    def _drain_stdout(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        while chunk := os.read(fd, 65536):
            self.stdout += chunk

    def _drain_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for raw in self.proc.stderr:
            with self.lock:
                self.lines.append(raw.decode("utf-8", "replace").rstrip("\n"))

    def poll(self, wait_s: float = 0.0) -> tuple[dict[str, Any] | None, list[str]]:
        """The stderr lines written since the last poll, and the shard's end once it ended:
        ``exit_code``/``signal``, its stdout, and (ship mode) its store's files. Waits up to
        ``wait_s`` for the end (a long poll: one call a ``wait_s`` per shard, not one a tick)."""
        if not self.started.wait(wait_s) or self.proc is None:
            return None, []
        try:
            rc: int | None = self.proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            rc = None
        if rc is not None:
            for t in self.threads:
                t.join(timeout=5.0)
        with self.lock:
            lines, self.lines = self.lines, []
        if rc is None:
            return None, lines
        end: dict[str, Any] = {
            "exit_code": rc if rc >= 0 else None,
            "signal": -rc if rc < 0 else None,
            "stdout": self.stdout.decode("utf-8", "replace"),
            "files": None,
        }
        if self.private is not None:
            store = self.job["argv"][store_argument(self.job["argv"])]
            end["files"] = read_store_files(os.path.join(self.private, os.path.basename(store)))
            shutil.rmtree(self.private, ignore_errors=True)
            self.private = None
        return end, lines

    def send(self, signum: int) -> None:
        """One signal to the shard (SIGINT: one more Ctrl-C); kept for it if not yet started."""
        with self.lock:
            if not self.started.is_set():
                self.early_signals.append(signum)
                return
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.send_signal(signum)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        """SIGKILL to the shard's process group (its session: the shard and what it started)."""
        self.started.wait(5.0)
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
