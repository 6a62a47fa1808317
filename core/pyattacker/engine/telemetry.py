"""What a run says about itself: events, the run row and its heartbeat, live gauges, pool rows.

Events go to the recorder (committed with the next group commit, then handed to the sinks).
The run row is written when the run starts, refreshed by the heartbeat with the live gauges that
``watch`` and the viewer show, and closed when the run ends.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from pyattacker import __version__
from pyattacker.engine.state import RunState
from pyattacker.errors import StoreUnavailable
from pyattacker.model import EventRecord, ResourceRecord, RunRecord

__all__ = ["Telemetry", "pool_stats"]

log = logging.getLogger("pyattacker")


class Telemetry:
    """Events, the run row and the gauges of one run."""

    def __init__(self, run: RunState, warned: set[str]) -> None:
        self.run = run
        #: warnings given once per runner (later ones are only counted)
        self.warned = warned
        self._listeners: list[tuple[Any, Callable[[Any], None]]] = []

    def event(
        self,
        kind: str,
        scope: str,
        *,
        pipeline_id: str | None = None,
        task_run_id: str | None = None,
        pool: str | None = None,
        resource_id: str | None = None,
        data: dict[str, Any] | None = None,
    ) -> None:
        """Record one structured event (dropped outside a run: there is no recorder)."""
        run = self.run
        rec = run.recorder
        if rec is None:
            return
        rec.event(
            EventRecord(
                ts=run.wall(),
                kind=kind,
                scope=scope,
                run_id=run.run_id,
                pipeline_id=pipeline_id,
                task_run_id=task_run_id,
                pool=pool,
                resource_id=resource_id,
                data=data or {},
            )
        )

    # -- pools ------------------------------------------------------------------------------------
    def attach_pools(self) -> None:
        """Listen to every pool's resource events for the run; per-lease events only with
        ``events: all`` (the attempt rows carry the leases)."""
        for pool in self.run.pools.values():
            listener = self._pool_event
            pool.listeners.append(listener)
            pool.trace_leases = self.run.trace
            if getattr(pool, "clock_is_default", False):
                pool.clock = self.run.clock
            self._listeners.append((pool, listener))

    def detach_pools(self) -> None:
        for pool, listener in self._listeners:
            try:
                pool.listeners.remove(listener)
            except ValueError:
                pass
            pool.trace_leases = True
        self._listeners.clear()

    def _pool_event(self, ev: Any) -> None:
        self.event(ev.kind, "resource", pool=ev.pool, resource_id=ev.resource_id, data=dict(ev.data))

    def resource_rows(self) -> list[ResourceRecord]:
        rows = []
        run = self.run
        now = run.clock.wall()
        for name, pool in run.pools.items():
            try:
                snapshot = pool.snapshot()
            except Exception:
                continue
            specs = {r.id: r for r in pool.resources()}
            for row in snapshot:
                res = specs.get(row["id"])
                rows.append(
                    ResourceRecord(
                        run_id=run.run_id,
                        pool=name,
                        resource_id=str(row["id"]),
                        kind=str(row.get("kind", "")),
                        state=str(row.get("state", "")),
                        spec=res.spec() if res is not None else {},
                        stats=dict(row),
                        updated_at=now,
                    )
                )
        return rows

    # -- the run row ----------------------------------------------------------------------------
    def run_row(self, backend: Any) -> RunRecord:
        """The row that says this run started: who runs it where, with which settings."""
        run = self.run
        cfg = run.config
        described = backend.describe() if backend is not None and hasattr(backend, "describe") else None
        snapshot = {
            "concurrency": cfg.concurrency,
            "max_admitted": cfg.admitted_limit,
            "journal": cfg.journal,
            "write_behind": cfg.write_behind,
            "write_batch": cfg.write_batch,
            "flush_interval": cfg.flush_interval,
            # the loop actually running this run (``run_async`` may run on the caller's own loop)
            "event_loop": _loop_kind(asyncio.get_running_loop()),
            "artifact_backend": described
            if described is not None
            else (cfg.journal == "full" and "inline") or None,
            "resume": cfg.resume,
            "retry_succeeded": cfg.retry_succeeded,
            "fresh_restart": cfg.fresh_restart,
            "strict_leases": cfg.strict_leases,
            "stop_after_failures": cfg.stop_after_failures,
            "stop_after_s": cfg.stop_after_s,
            "pools": {name: [r.id for r in pool.resources()] for name, pool in run.pools.items()},
            "meta": cfg.meta,
            # how many pipelines the caller said the source holds (None: unknown): watch's ETA
            "expected_pipelines": run.expected,
        }
        now = run.clock.wall()
        return RunRecord(
            run_id=run.run_id,
            status="running",
            label=cfg.label,
            started_at=now,
            heartbeat_at=now,
            host=socket.gethostname(),
            pid=os.getpid(),
            pid_started_at=_process_start_time(),
            python=sys.version.split()[0],
            version=__version__,
            config=snapshot,
            notes=cfg.notes,
        )

    def gauges(self) -> dict[str, Any]:
        """Counters plus the live gauges that watch/serve show (stored on the run row)."""
        run = self.run
        waiting = 0
        for pool in run.pools.values():
            waiting += int(getattr(pool, "waiting", 0) or 0)
        return {
            **run.counters,
            "in_flight_pipelines": run.admitted - run.done,
            "delayed_pipelines": len(run.parked),
            "waiting_pipelines": waiting,
        }

    async def heartbeat(self, run_row: RunRecord) -> None:
        """Refresh the run row and the pool rows every ``heartbeat_s``, with a flush."""
        run = self.run
        recorder = run.recorder
        assert recorder is not None
        while True:
            await asyncio.sleep(run.config.heartbeat_s)
            run_row.heartbeat_at = run.clock.wall()
            run_row.stats = self.gauges()
            recorder.pending.runs.append(run_row)
            recorder.pending.resources.extend(self.resource_rows())
            try:
                recorder.flush()
            except StoreUnavailable as exc:
                run.fail_run(exc, "store_unavailable")
                return

    # -- what went wrong beside the pipelines ---------------------------------------------------
    def sink_failed(self, sink: Any, exc: BaseException) -> None:
        key = f"sink:{type(sink).__name__}"
        if key not in self.warned:
            self.warned.add(key)
            log.warning("pyattacker: event sink %s failed (the run goes on): %s", type(sink).__name__, exc)

    def metric_rejected(self, what: str, exc: Exception) -> None:
        """An application metric that failed validation: counted, warned about once per kind,
        raised with ``strict_metrics``."""
        self.run.counters["metric_failures"] += 1
        if self.run.config.strict_metrics:
            raise exc
        key = f"{what}:{type(exc).__name__}"
        if key not in self.warned:
            self.warned.add(key)
            log.warning("pyattacker: %s rejected (further ones are only counted): %s", what, exc)


def pool_stats(pool: Any) -> dict[str, Any]:
    """A pool's ``stats()`` as a plain dict (a pool that cannot say gives nothing)."""
    try:
        stats = pool.stats()
    except Exception:
        return {}
    if isinstance(stats, Mapping):
        return dict(stats)
    try:
        return msgspec.structs.asdict(stats)
    except TypeError:
        return dict(vars(stats))


def _process_start_time() -> float | None:
    """Start time of this process (Linux), so a reused pid is not mistaken for the owner."""
    try:
        with open(f"/proc/{os.getpid()}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        ticks = int(fields[19])
        with open("/proc/stat", "rb") as fh:
            btime = next(int(line.split()[1]) for line in fh if line.startswith(b"btime"))
        return btime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _loop_kind(loop: asyncio.AbstractEventLoop) -> str:
    """``asyncio`` for asyncio's loops (the virtual clock's included), else the loop's package."""
    if isinstance(loop, asyncio.BaseEventLoop):
        return "asyncio"
    return type(loop).__module__.partition(".")[0]
