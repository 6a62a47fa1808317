"""``TaskContext``: what a task body sees of the run, one object per attempt.

It leases resources (``acquire``), emits events, reports application metrics and gives the
attempt a directory for files. It also guarantees the lease-safety contract: leases taken
through it are reclaimed synchronously at the end of the attempt, whatever happened.
"""

from __future__ import annotations

import logging
import random
import re
import uuid
from collections.abc import Awaitable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from pyattacker.digest import digest_bytes
from pyattacker.engine.metrics import MetricRejected, check_points, check_value
from pyattacker.engine.tasklog import write_line
from pyattacker.errors import PoolNotFound
from pyattacker.model import Batch, MetricPoint, MetricRecord

if TYPE_CHECKING:
    from pyattacker.engine.state import PipelineState, RunState
    from pyattacker.engine.telemetry import Telemetry
    from pyattacker.flow.taskspec import TaskSpec
    from pyattacker.resources.lease import Lease
    from pyattacker.resources.pool import Pool

__all__ = ["TaskContext"]

log = logging.getLogger("pyattacker")
_SAFE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,100}$")
#: ``ctx.acquire()`` without arguments (marker)
_NO_ARGS: Any = object()


class _EndedLeases(list):
    """``held_leases`` of a context whose attempt has ended (one shared, always empty).

    Task code can keep ``ctx`` past its attempt (a background task, a stored reference). A lease
    taken through it then would never be reclaimed and its slot would be lost for the rest of
    the run; instead the lease goes straight back and the caller gets an error. Swapping this in
    at the end of the attempt costs nothing on the path of a lease taken in time.
    """

    __slots__ = ()

    def append(self, lease: Any) -> None:
        lease.release_now()
        raise RuntimeError(
            f"task {lease.task_name!r}: ctx.acquire() after its attempt ended (a ctx is valid only"
            " while the task body runs; keep no reference to it in background work); the lease"
            " was returned"
        )


_ENDED: list[Any] = _EndedLeases()


def _plain(data: dict[str, Any]) -> dict[str, Any]:
    """Event data as plain JSON-able values: what the store can encode never fails a commit.

    Anything else (a lock, a client, a custom object) is stored as its ``repr``.
    """
    plain: dict[str, Any] = msgspec.to_builtins(data, enc_hook=repr, str_keys=True)
    return plain


def _full(args: Any) -> tuple[Any, ...]:
    """The arguments of ``_lease_from`` for an ``_Acquire``'s ``args``."""
    return (None, None, None, None, {}) if args is _NO_ARGS else args


class _Acquire(msgspec.Struct, eq=False):
    """``await ctx.acquire()`` or ``async with ctx.acquire() as lease``: both return the lease.

    A msgspec Struct rather than a class with ``__init__`` because one is built per lease:
    CPython 3.11 runs a Python ``__init__`` through ``type.__call__`` and a call from C, where
    msgspec builds the object in C. ``eq=False``: compared by identity, as a plain object would be.
    """

    _ctx: TaskContext
    _args: Any
    _lease: Lease | None = None

    def __await__(self) -> Any:
        return self._get().__await__()

    async def _get(self) -> Lease:
        ctx = self._ctx
        lease = ctx._lease_now(self._args)
        return lease if lease is not None else await ctx._lease_from(*_full(self._args))

    async def __aenter__(self) -> Lease:
        ctx = self._ctx
        if self._args is _NO_ARGS:
            # ``_lease_now`` inline for the task's own pool (``async with ctx.acquire()`` runs
            # once per attempt): the route's first try, looked up without a call
            run = ctx._run
            first_try = (run.lease_routes.get(ctx.task) or run.runner.lease_route(ctx))[1]
            lease = None if first_try is None else first_try(ctx)
            if lease is not None:
                ctx.held_leases.append(lease)
        else:
            lease = ctx._lease_now(self._args)
        if lease is None:
            lease = await ctx._lease_from(*_full(self._args))
        self._lease = lease
        return lease

    def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> Awaitable[None]:
        """Return the lease, synchronously; what ``async with`` awaits then is the run's one
        finished future (no coroutine per lease, and three parameters: no ``*exc`` tuple)."""
        lease = self._lease
        ctx = self._ctx
        if lease is not None:
            if exc is not None:
                lease.failed_with(exc)  # a 429's Retry-After holds the resource
            if lease.release_now():
                ctx.lease_records.append(lease.as_dict())
            try:
                ctx.held_leases.remove(lease)
            except ValueError:  # released already, or the attempt has ended (``_ENDED``)
                pass
        return ctx._run.finished_future  # type: ignore[return-value]


class TaskContext(msgspec.Struct, eq=False):
    """Per-attempt view of the run handed to tasks that take ``(value, ctx)``.

    Built by the runner, once per attempt. A msgspec Struct rather than a class with
    ``__init__``: CPython 3.11 runs a Python ``__init__`` through ``type.__call__`` and a call
    from C, where msgspec builds the object in C. ``eq=False``: compared by identity, as a plain
    object would be.
    """

    _run: RunState
    _state: PipelineState
    seq: int
    attempt: int
    task: TaskSpec
    #: ``task.name``, an attribute: each lease reads it (a property would be a call per lease)
    task_name: str
    #: ``pipeline_id:seq``, the id of this task slot in the store (read several times per attempt)
    task_run_id: str
    meta: dict[str, Any] = {}
    held_leases: list[Lease] = []
    lease_records: list[dict[str, Any]] = []
    metric_failures: int = 0
    _rng: random.Random | None = None
    _steps: dict[str, int] | None = None

    def __repr__(self) -> str:
        return f"TaskContext(task_run_id={self.task_run_id!r}, attempt={self.attempt})"

    # -- identity -----------------------------------------------------------------------
    @property
    def run_id(self) -> str:
        return self._run.run_id

    @property
    def pipeline_id(self) -> str:
        return self._state.spec.key

    @property
    def pipeline_key(self) -> str:
        return self._state.spec.key

    @property
    def pipeline_name(self) -> str:
        return self._state.spec.template.name

    @property
    def clock(self) -> Any:
        return self._run.clock

    @property
    def pools(self) -> Mapping[str, Pool]:
        return self._run.pools

    @property
    def bus(self) -> Any:
        return self._run.bus

    @property
    def rng(self) -> random.Random:
        """Seeded by (pipeline, seq, attempt, and the visit after a backward move): a replay
        draws the same numbers, a new visit new ones."""
        if self._rng is None:
            where = f"{self.pipeline_id}|{self.seq}|{self.attempt}"
            if self.visit:
                where = f"{where}|{self.visit}"
            seed = digest_bytes(where.encode())
            self._rng = random.Random(int(seed, 16))
        return self._rng

    @property
    def visit(self) -> int:
        """How many times this task was re-entered by backward moves (0: its first visit); a
        resume continues the pending visit."""
        traversal = self._state.traversal
        return 0 if traversal is None else traversal.visits[self.seq]

    def history(self, task: str | None = None) -> list[Any]:
        """What earlier visits of ``task`` (default: this task) produced, oldest first: the
        outputs a ``Handoff.rewind`` or ``Handoff.retry_all`` made history. Reads the store;
        empty for a pipeline that never moved backward."""
        control = self._run.control
        if control is None:
            return []
        return control.history(self._state, self.task_name if task is None else task)

    @property
    def seed(self) -> int:
        return self.rng.getrandbits(63)

    @property
    def config(self) -> dict[str, Any]:
        return self.task.config

    # -- leases ---------------------------------------------------------------------------
    def acquire(
        self,
        pool: str | None = None,
        *,
        algorithm: Any = None,
        timeout: float | None = None,
        where: Any = None,
        **selector: Any,
    ) -> _Acquire:
        """Lease from ``pool`` (default: the task's declared resource); returned on exit."""
        if pool is None and algorithm is None and timeout is None and where is None and not selector:
            return _Acquire(self, _NO_ARGS)
        return _Acquire(self, (pool, algorithm, timeout, where, selector))

    async def acquire_lease(
        self,
        pool: str | None = None,
        *,
        algorithm: Any = None,
        timeout: float | None = None,
        where: Any = None,
        **selector: Any,
    ) -> Lease:
        """Escape hatch: a lease you release yourself (reclaimed as leaked if you forget)."""
        lease: Lease = await self.acquire(pool, algorithm=algorithm, timeout=timeout, where=where, **selector)
        return lease

    def _target(self, pool_name: str | None, algorithm: Any) -> tuple[Pool, Any]:
        """The pool and the algorithm a lease request goes to (a task's own by default): an
        instance resolved through the run's plugins, or None for the pool's default."""
        if pool_name:  # an explicit name is the member's own: a suite maps it to the pool it ran as
            name: str | None = self._state.spec.template.pool_aliases.get(pool_name, pool_name)
        else:
            name = self.task.resource
        if name is None:
            raise PoolNotFound(
                f"task {self.task.name!r} declares no resource; pass a pool name to ctx.acquire()"
            )
        pools = self._run.pools
        pool = pools.get(name)
        if pool is None:
            known = ", ".join(pools) or "none"
            raise PoolNotFound(f"task {self.task.name!r}: no pool named {name!r} (pools: {known})")
        alg = (
            algorithm
            if algorithm is not None
            else (self.task.algorithm if pool_name in (None, self.task.resource) else None)
        )
        return pool, None if alg is None else self._run.runner.algorithms.resolve(alg)

    def _lease_now(self, args: Any) -> Lease | None:
        """A free slot through the algorithm's synchronous first try, or None (then wait).

        ``args`` is ``_NO_ARGS`` (``ctx.acquire()``: the task's own pool, through the run's
        per-task route) or ``(pool, algorithm, timeout, where, selector)``.
        """
        if args is _NO_ARGS:
            run = self._run
            # the route is resolved once per task: looked up here without a call per lease
            first_try = (run.lease_routes.get(self.task) or run.runner.lease_route(self))[1]
            lease = None if first_try is None else first_try(self)
        else:
            pool, alg = self._target(args[0], args[1])
            lease = pool.try_now(self, algorithm=alg, where=args[3], selector=args[4])
        if lease is not None:
            self.held_leases.append(lease)
        return lease

    async def _lease_from(
        self,
        pool_name: str | None,
        algorithm: Any,
        timeout: float | None,
        where: Any,
        selector: dict[str, Any],
    ) -> Lease:
        pool, alg = self._target(pool_name, algorithm)
        lease = await pool.acquire(self, algorithm=alg, timeout=timeout, where=where, **selector)
        self.held_leases.append(lease)
        return lease

    def reclaim_now(self) -> list[Lease]:
        """Return every lease still held (synchronous: cancellation cannot interrupt it)."""
        leaked: list[Lease] = []
        for lease in self.held_leases:
            if not lease.released:
                lease.release_now(leaked=True)
                leaked.append(lease)
                record = lease.as_dict()
                record["leaked"] = True
                self.lease_records.append(record)
            else:
                self.lease_records.append(lease.as_dict())
        self.held_leases = _ENDED  # the attempt is over: later leases through this ctx are refused
        return leaked

    def lease_log(self) -> list[dict[str, Any]]:
        return list(self.lease_records)

    def publish_resource(self, pool: str, resource: Any) -> None:
        self._run.runner.pool(pool).publish(resource, by=self.task_name)
        self.emit("resource.published_by_task", pool=pool, resource_id=resource.id)

    def revoke_resource(self, pool: str, resource_id: str, reason: str = "") -> None:
        self._run.runner.pool(pool).revoke(resource_id, reason=reason)

    # -- events and metrics -------------------------------------------------------------------
    def _telemetry(self) -> Telemetry:
        telemetry = self._run.telemetry
        assert telemetry is not None
        return telemetry

    def _pending(self) -> Batch:
        """The rows of the run's next commit (a ctx kept past its run has none)."""
        recorder = self._run.recorder
        assert recorder is not None
        return recorder.pending

    def emit(self, kind: str, **data: Any) -> None:
        """Record a structured event (task, seq and attempt are added).

        ``kind`` must be a non-empty string (``TypeError`` otherwise). The data never fails the
        task or the store's commit: values JSON cannot hold are stored as their ``repr``.
        """
        if not isinstance(kind, str) or not kind:
            raise TypeError(f"ctx.emit(kind): kind must be a non-empty string, got {kind!r}")
        try:
            data.setdefault("task", self.task.name)
            data.setdefault("seq", self.seq)
            data.setdefault("attempt", self.attempt)
            self._telemetry().event(
                kind, "task", pipeline_id=self.pipeline_id, task_run_id=self.task_run_id, data=_plain(data)
            )
        except Exception as exc:  # defensive: emit must never fail a task
            log.warning("pyattacker: ctx.emit(%r) dropped: %s", kind, exc)

    def log(self, message: Any, *args: Any, stream: str = "log") -> bool:
        """Write a line to this attempt's log (``%``-formatted with ``args``, as ``logging``
        does; several lines if it holds newlines). Stored with the attempt's commit, never a
        write per line; ``pyattacker logs`` and the viewer show it. Returns False (and keeps
        nothing) once the attempt has ended."""
        if not isinstance(stream, str) or not stream or len(stream) > 32:
            raise TypeError(f"ctx.log(stream=...): a name of 1 to 32 characters, got {stream!r}")
        text = str(message)
        if args:
            try:
                text %= args
            except (TypeError, ValueError) as exc:
                text = f"{text} {args!r} (log arguments do not fit: {exc})"
        return write_line(self._run, self._state, self.seq, self.attempt, stream, text)

    def _reject(self, what: str, exc: Exception) -> bool:
        self.metric_failures += 1
        self._telemetry().metric_rejected(what, exc)
        return False

    def record(self, data: Mapping[str, Any] | None = None, **values: Any) -> bool:
        """Keep the latest value of each named metric for this pipeline (and run)."""
        merged = {**(data or {}), **values}
        try:
            clean = {k: check_value(k, v) for k, v in merged.items()}
        except MetricRejected as exc:
            return self._reject("record", exc)
        now = self._run.clock.wall()
        rows = self._pending().metrics
        for name, value in clean.items():
            rows.append(
                MetricRecord(
                    run_id=self.run_id,
                    pipeline_id=self.pipeline_id,
                    name=name,
                    value=value,
                    updated_at=now,
                    attempt=self.attempt,
                )
            )
        return True

    def report_metric(self, name: str, value: Any) -> bool:
        return self.record({name: value})

    def track(self, key: str | Mapping[str, Any] | None = None, value: Any = None, **values: Any) -> bool:
        """Append one point to a curve: ``ctx.track("loss", 0.3)`` or ``ctx.track(loss=0.3)``."""
        point: dict[str, Any] = dict(values)
        if isinstance(key, Mapping):
            point.update(key)
        elif key is not None:
            point[key] = value
        return self.track_many([point])

    def track_many(self, points: Iterable[Mapping[str, Any]]) -> bool:
        """Append a batch of points in order; the whole batch is stored or none of it."""
        try:
            clean = check_points(points)
        except MetricRejected as exc:
            return self._reject("track_many", exc)
        if self._steps is None:
            self._steps = self._state.metric_steps
        now = self._run.clock.wall()
        rows = self._pending().metric_points
        for point in clean:
            for k, v in point.items():
                step = self._steps.get(k, 0)
                self._steps[k] = step + 1
                rows.append(
                    MetricPoint(
                        run_id=self.run_id,
                        pipeline_id=self.pipeline_id,
                        key=k,
                        value=v,
                        step=step,
                        ts=now,
                        op_id=uuid.uuid4().hex,
                        attempt=self.attempt,
                    )
                )
        return True

    def artifact_dir(self) -> Path:
        """A directory of this attempt's own, under the store's folder (created on first call)."""
        root = self._run.runner.artifact_root(self.pipeline_id).resolve()
        pid = self.pipeline_id if _SAFE.match(self.pipeline_id) else digest_bytes(self.pipeline_id.encode())
        run = self.run_id if _SAFE.match(self.run_id) else digest_bytes(self.run_id.encode())
        path = (
            root
            / run
            / pid
            / f"{self.seq}-{self.task.name if _SAFE.match(self.task.name) else 'task'}-attempt{self.attempt}"
        )
        path.mkdir(parents=True, exist_ok=True)
        real = path.resolve()
        if root != real and root not in real.parents:
            raise PermissionError(f"artifact dir {real} escapes the store's folder {root}")
        return real
