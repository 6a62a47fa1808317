"""The ``ray`` shard executor: each shard is a ``pyattacker run|resume --shard i/N`` process
started by a Ray actor on whichever node has room.

The kernel's ``run_shards`` drives it exactly like the local executor (slots, capacity shares,
one SIGINT per Ctrl-C, a kill at the third); this module only places, starts, watches and
signals one shard. Every call to an actor is asynchronous: ``poll`` never blocks the loop, it
looks at the answer of the call it made the time before.

Where the store lives (``storage``): the shard's ``--store`` path as is when every node sees it
(``shared``: a shared filesystem, or a store scheme such as ``s3://``), or a private copy on the
node shipped back to the driver when the shard ends (``ship``); ``auto`` picks ``shared`` for a
shard placed on the driver's own node or a non-file store, ``ship`` otherwise.
"""

from __future__ import annotations

import os
import secrets
import signal
import sys
import threading
import time
from typing import Any

import msgspec
import ray
from ray.exceptions import RayError

from pyattacker.errors import ConfigError, ExitCode
from pyattacker.shard.budget import BUDGET_ENV, BUDGET_KEEP_ENV
from pyattacker.shard.executor import ShardJob, ShardStatus
from pyattacker.store.location import local_file

from .budget import ACTOR_ENV, FACTORY_SPEC, NAMESPACE, start_budget_log
from .options import RayOptions, check_reachable
from .progress import ProgressReporter
from .storage import read_store_files, write_store_files
from .worker import ShardProcess, store_argument

__all__ = ["RayExecutor", "RayHandle"]

_TAIL_LINES = 40
#: how long an actor's ``poll`` waits for its shard's end: the driver's loop checks the answer
#: every tick without a call, so each shard costs one actor call per this many seconds
_LONG_POLL_S = 0.5


class RayHandle:
    """One shard on Ray: placing (waiting for the actor's node), running, or ended."""

    def __init__(self, executor: RayExecutor, job: ShardJob) -> None:
        self.executor = executor
        self.job = job
        self.store = job.argv[store_argument(job.argv)]
        path = local_file(self.store)  # None: a store service (s3://...), seen from every node
        self.local_store = None if path is None else os.path.join(job.cwd or os.getcwd(), path)
        self.actor: Any = executor.remote_class.remote(msgspec.structs.asdict(job), executor.env)
        self.mode: str | None = None  # shared | ship, once placed
        self.pending: Any = self.actor.node.remote()
        self.started = False
        self.interrupts = 0
        self.tail: list[str] = []
        self.status: ShardStatus | None = None

    # -- the loop's calls -------------------------------------------------------------------
    def poll(self) -> ShardStatus | None:
        if self.status is not None:
            return self.status
        if self.interrupts and not self.started:  # still waiting for a node: it never starts
            return self._not_started()
        ready, _ = ray.wait([self.pending], timeout=0)
        if not ready:
            return None
        try:
            answer = ray.get(self.pending)
        except RayError as exc:  # the actor's worker or node died, or start() failed there
            return self._end(None, None, "", f"the Ray worker of shard {self.job.index} failed: {exc}")
        if not self.started:
            return self._start(str(answer))
        end, lines = answer
        self._relay(lines)
        if end is None:
            self.pending = self.actor.poll.remote(_LONG_POLL_S)
            return None
        if end["files"] is not None and self.local_store is not None:
            write_store_files(self.local_store, end["files"])
        return self._end(end["exit_code"], end["signal"], end["stdout"], None)

    def wait(self, timeout: float | None = None) -> ShardStatus:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            status = self.poll()
            if status is not None:
                return status
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"shard {self.job.index} still running after {timeout}s")
            time.sleep(0.05)

    def interrupt(self) -> None:
        """One more Ctrl-C for the shard (before it started: it never will)."""
        self.interrupts += 1
        if self.status is None and self.started:
            self.actor.send.remote(int(signal.SIGINT))

    def kill(self) -> None:
        if self.status is None and self.started:
            self.actor.kill.remote()

    def cancel(self) -> ShardStatus:
        if not self.interrupts:
            self.interrupt()
        try:
            return self.wait(self.executor.options.grace_s)
        except TimeoutError:
            self.kill()
        try:
            return self.wait(10.0)
        except TimeoutError:  # _end kills its actor (and, with it, the shard's watch of it)
            return self._end(None, int(signal.SIGKILL), "", "its Ray actor was killed")

    # -- the steps --------------------------------------------------------------------------
    def _not_started(self) -> ShardStatus:
        """Interrupted while waiting for a node: nothing of it ran (resume runs its pipelines)."""
        return self._end(ExitCode.INTERRUPTED, None, "", "interrupted before it started on a Ray node")

    def _start(self, node: str) -> ShardStatus | None:
        if self.interrupts:
            return self._not_started()
        self.mode = self.executor.storage_for(self.store, node)
        files = read_store_files(self.local_store) if self.mode == "ship" and self.local_store else {}
        self.started = True
        self.actor.start.remote(self.mode == "ship", files)
        self.pending = self.actor.poll.remote(_LONG_POLL_S)
        self.executor.placed(self, node)
        return None

    def _relay(self, lines: list[str]) -> None:
        if not lines:
            return
        self.tail = (self.tail + lines)[-_TAIL_LINES:]
        if self.executor.relay:
            prefix = f"[shard {self.job.index}/{self.job.count}] "
            sys.stderr.write("".join(prefix + line + "\n" for line in lines))
            sys.stderr.flush()

    def _end(self, code: int | None, sig: int | None, stdout: str, problem: str | None) -> ShardStatus:
        tail = "\n".join(self.tail + ([problem] if problem else []))
        if code is None and sig is None:
            code = ExitCode.INTERNAL_ERROR
        self.status = ShardStatus(
            index=self.job.index, exit_code=code, signal=sig, stdout=stdout, stderr_tail=tail
        )
        self.executor.ended(self)
        try:
            ray.kill(self.actor)  # its process has ended (or never started): free its CPU now
        except RayError:
            pass
        return self.status


class RayExecutor:
    """Connects to Ray (``address``) or starts a local one, then runs shards as actors.

    Options (``--executor-option KEY=VALUE``): see ``RayOptions``.
    """

    name = "ray"

    def __init__(self, *, relay_stderr: bool | str = True, **options: Any) -> None:
        self.options = RayOptions.parse(**options)
        self.relay = relay_stderr not in (False, "0", "false", "no")
        self.env = self.options.forwarded_env()
        self._connect()
        self.driver_node = str(ray.get_runtime_context().get_node_id())
        # threaded (max_concurrency): a signal is not held back by the long poll in flight
        decorate: Any = ray.remote
        options = {"num_cpus": self.options.num_cpus, "max_restarts": 0, "max_concurrency": 4}
        self.remote_class: Any = decorate(**options)(ShardProcess)
        self.modes: dict[int, str] = {}
        self.lock = threading.Lock()
        self.progress = ProgressReporter(self.options.progress_s) if self.options.progress_s > 0 else None
        self.budget_mode = self.options.budget_mode()
        #: the run's BudgetLog actor and what the shards need to find it (made with the first
        #: shard of a run with rate-limited resources, when ``budget_mode`` is ``actor``)
        self.budget_actor: Any = None
        self.budget_spec: str | None = None

    def _connect(self) -> None:
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        address = self.options.address
        kwargs: dict[str, Any] = {
            "logging_level": "WARNING",
            "log_to_driver": False,
            "ignore_reinit_error": True,
        }
        if address is None:  # a Ray of this machine, for this run: loopback only
            kwargs.update(address="local", include_dashboard=False, _node_ip_address="127.0.0.1")
        else:
            check_reachable(address)
            kwargs["address"] = address
        try:
            ray.init(**kwargs)
        except Exception as exc:  # Ray raises plain Exception too (a local node that did not start)
            where = f"at {address}" if address else "on this machine"
            raise ConfigError(f"--executor ray: cannot connect to Ray {where}: {exc}") from None

    def storage_for(self, store: str, node: str) -> str:
        """``shared`` or ``ship`` for a shard store placed on ``node`` (see the module docstring)."""
        if local_file(store) is None:  # a store service (s3://...): every node reaches it
            return "shared"
        if self.options.storage != "auto":
            return self.options.storage
        return "shared" if node == self.driver_node else "ship"

    def submit(self, job: ShardJob) -> RayHandle:
        return RayHandle(self, self._with_budget(job))

    def _with_budget(self, job: ShardJob) -> ShardJob:
        """The job, pointed at the run's budget actor when its pools share a rate budget (the
        parent set ``PYATTACKER_SHARED_BUDGET``) and the budget is the actor's."""
        if BUDGET_ENV not in job.env or self.budget_mode != "actor":
            return job
        if self.budget_spec is None:
            keep = float(job.env.get(BUDGET_KEEP_ENV) or 86400.0)
            self.budget_actor, name = start_budget_log(secrets.token_hex(6), keep)
            gcs = str(ray.get_runtime_context().gcs_address)
            self.budget_spec = f"{gcs} {NAMESPACE} {name}"
        env = {**job.env, BUDGET_ENV: FACTORY_SPEC, ACTOR_ENV: self.budget_spec}
        return msgspec.structs.replace(job, env=env)

    def placed(self, handle: RayHandle, node: str) -> None:
        with self.lock:
            self.modes[handle.job.index] = handle.mode or "shared"
        if self.progress is not None and handle.mode == "shared":
            self.progress.add(handle.job.index, handle.job.count, handle.local_store or handle.store)

    def ended(self, handle: RayHandle) -> None:
        if self.progress is not None:
            self.progress.remove(handle.job.index)

    def summary_note(self) -> str | None:
        """Where each shard's store was written (the summary's ``ray executor:`` line)."""
        with self.lock:
            modes = dict(self.modes)
        if not modes:
            return "no shard was placed on a Ray node"
        by_mode: dict[str, list[int]] = {}
        for index, mode in sorted(modes.items()):
            by_mode.setdefault(mode, []).append(index)
        words = {
            "shared": "written where the driver reads them (a path every node sees, or a store service)",
            "ship": "written on their nodes and shipped back to the driver at shard end",
        }
        parts = [
            f"stores of shard(s) {', '.join(map(str, ix))} {words[mode]}" for mode, ix in by_mode.items()
        ]
        if self.budget_spec is not None:
            parts.append(f"one rate budget for all shards in Ray actor {self.budget_spec.split()[-1]}")
        return "; ".join(parts)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.stop()
        if self.budget_actor is not None:
            ray.kill(self.budget_actor)
        ray.shutdown()

    def __repr__(self) -> str:
        return f"RayExecutor(address={self.options.address!r}, storage={self.options.storage!r})"
