"""Resources, pools and leases: the only state pipelines share (invariant 1).

Every mutation here is synchronous and contains no ``await``: a lease can therefore always be
returned from a ``finally`` block, even while the task is being cancelled (invariant 5, the
lease-safety contract). Health is a small state machine advanced lazily when it is read, so
there is no background task; the only timers are the per-waiter timeout, the deadlock hint and
one cooldown notifier that wakes waiters when the earliest cooldown ends.

The uncontended path (``try_acquire`` + ``release_now``) allocates one ``Lease`` and builds no
event objects unless somebody listens: it runs once per task attempt across tens of thousands
of pipelines.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import msgspec

from pyattacker.clock import Clock, RealClock
from pyattacker.errors import ConfigError, ResourceUnavailable
from pyattacker.resources.bus import Bus, Subscription
from pyattacker.resources.lease import Lease
from pyattacker.resources.redact import SECRET_WORDS, mask_secrets, shown
from pyattacker.resources.resource import DEAD, DEGRADED, READY, REVOKED, Resource, ResourceState

__all__ = [
    "SECRET_WORDS",
    "SLOW_WAIT_MS",
    "WAIT_WINDOW",
    "Lease",
    "Pool",
    "PoolStats",
    "Resource",
    "ResourceEvent",
    "ResourceState",
    "mask_secrets",
]

log = logging.getLogger(__name__)

#: A wait longer than this emits ``acquire.slow_wait``.
SLOW_WAIT_MS = 1000.0
#: How many recent wait samples ``stats()`` computes percentiles over.
WAIT_WINDOW = 512

_EMA_OLD, _EMA_NEW = 0.7, 0.3


class ResourceEvent(msgspec.Struct, gc=False):
    """One pool state change, as handed to listeners, subscribers and the bus."""

    ts: float
    pool: str
    kind: str
    resource_id: str | None
    data: dict[str, Any] = {}


class PoolStats(msgspec.Struct, kw_only=True):
    """Counters of one pool (optionally of the resources matching a selector)."""

    name: str
    kind: str | None
    total: int
    ready: int
    degraded: int
    dead: int
    revoked: int
    active: int
    capacity: int
    waiting: int
    leases_total: int
    ok_total: int
    failed_total: int
    leaked_total: int
    usage: dict[str, float]
    waits_total: int
    wait_ms_avg: float
    wait_ms_p50: float
    wait_ms_p95: float
    wait_ms_max: float

    @property
    def utilization(self) -> float:
        return round(self.active / self.capacity, 4) if self.capacity else 0.0


# -- waiting ----------------------------------------------------------------------------


class _Waiter:
    """One blocked acquirer: its future, and what it is waiting for."""

    __slots__ = ("fut", "selector", "where", "woken_by")

    def __init__(self, fut: asyncio.Future[bool], selector: Mapping[str, Any] | None, where: Any) -> None:
        self.fut = fut
        self.selector = selector
        self.where = where
        self.woken_by: Resource | None = None

    def wants(self, resource: Resource) -> bool:
        if self.selector is None and self.where is None:
            return True
        try:
            return resource.matches(self.selector, self.where)
        except Exception:
            return True  # a broken where() must not break a release: the waiter re-checks and raises


def _wake_for(resource: Resource, slots: int, waiters: Iterable[_Waiter]) -> None:
    """Wake up to ``slots`` of ``waiters`` that are still asleep and want ``resource``."""
    for waiter in waiters:
        if slots <= 0:
            return
        if not waiter.fut.done() and waiter.wants(resource):
            waiter.woken_by = resource
            waiter.fut.set_result(True)
            slots -= 1


def _expire(fut: asyncio.Future[bool]) -> None:
    if not fut.done():
        fut.set_result(False)


def _percentile(ordered: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    if not ordered:
        return 0.0
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


# -- pools ------------------------------------------------------------------------------


class Pool:
    """A named set of resources with a default acquisition algorithm and an event stream."""

    def __init__(
        self,
        name: str,
        resources: Iterable[Resource | Mapping[str, Any]] = (),
        *,
        kind: str | None = None,
        algorithm: Any = None,
        bus: Bus | None = None,
        clock: Clock | None = None,
        deadlock_warn_s: float | None = 5.0,
        on_event: Callable[[ResourceEvent], None] | None = None,
        algorithms: Any = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ConfigError(f"pool name must be a non-empty string, got {name!r}")
        self.name = name
        self.kind = kind
        self.algorithm_spec = algorithm
        self.bus = bus
        #: False until a clock is given (here or by assignment): a runner may then impose its own.
        self.clock_is_default = clock is None
        self._now: Callable[[], float] = time.monotonic
        self._clock: Clock = RealClock()
        if clock is not None:
            self.clock = clock
        self.deadlock_warn_s = deadlock_warn_s
        #: Called with every ResourceEvent (the runner appends its recorder here).
        self.listeners: list[Callable[[ResourceEvent], None]] = [on_event] if on_event else []
        #: whether listeners get one event per lease taken/returned (subscribers and the bus
        #: always do); a runner turns it off unless ``events="all"``: the attempt rows carry leases
        self.trace_leases = True
        self._algorithms = algorithms
        self._algorithm: Any = None
        self._algorithm_cache: dict[str, Any] = {}
        self._by_id: dict[str, Resource] = {}
        self._slots: list[Resource] = []
        self._rr = 0
        self._waiters: dict[_Waiter, None] = {}
        self._subs: list[Subscription[ResourceEvent]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._cooldown_handle: asyncio.TimerHandle | None = None
        self._cooldown_at = 0.0
        self.leases_total = 0
        self.ok_total = 0
        self.failed_total = 0
        self.leaked_total = 0
        self.waits_total = 0
        self._waits: deque[float] = deque(maxlen=WAIT_WINDOW)
        for item in resources:
            before = len(self._slots)
            resource = self.publish(item)
            if len(self._slots) == before:  # published over an earlier one: never silently
                raise ConfigError(f"pool {name!r}: two resources have the id {resource.id!r}")

    def __repr__(self) -> str:
        return f"Pool({self.name!r}, resources={len(self._slots)})"

    @property
    def clock(self) -> Clock:
        return self._clock

    @clock.setter
    def clock(self, clock: Clock) -> None:
        self._clock = clock
        self.clock_is_default = False
        # the real clock's now() is time.monotonic: call it directly on the hot path
        self._now = time.monotonic if type(clock).now is Clock.now else clock.now

    # -- membership -----------------------------------------------------------------------
    def publish(self, resource: Resource | Mapping[str, Any], by: str | None = None) -> Resource:
        """Add a resource; re-publishing an id replaces it and resets its health to READY."""
        if isinstance(resource, Mapping):
            spec = dict(resource)
            spec.setdefault("kind", self.kind or self.name)
            try:
                resource = Resource.create(**spec)
            except TypeError as exc:
                raise ConfigError(f"pool {self.name!r}: bad resource spec: {exc}") from None
        if not isinstance(resource, Resource):
            raise ConfigError(f"pool {self.name!r}: expected a Resource, got {type(resource).__name__}")
        old = self._by_id.get(resource.id)
        if old is None:
            self._slots.append(resource)
        elif old is not resource:
            self._slots[self._slots.index(old)] = resource
        resource.reset_health()
        self._by_id[resource.id] = resource
        if self._listened():
            self._emit(
                "resource.published",
                resource.id,
                {"kind": resource.kind, "capacity": resource.capacity, "by": by},
            )
        if self._waiters:
            self._wake_slot(resource, resource.capacity)
        return resource

    add = publish

    def revoke(self, resource_id: str, reason: str = "") -> bool:
        """Exclude a resource from every future selection; held leases still return normally."""
        resource = self._by_id.get(resource_id)
        if resource is None or resource.state is REVOKED:
            return False
        resource.state = REVOKED
        resource.blocked_until = None
        if self._listened():
            self._emit("resource.revoked", resource.id, {"reason": reason})
        if self._waiters:
            self._wake_all()  # a wait that only this resource could end must find out
        return True

    def resources(self) -> list[Resource]:
        return list(self._slots)

    def resource(self, resource_id: str) -> Resource | None:
        return self._by_id.get(resource_id)

    def __len__(self) -> int:
        return len(self._slots)

    # -- selection ------------------------------------------------------------------------
    def _leasable(self, resource: Resource) -> bool:
        """READY, not blocked, with free capacity; advances an elapsed cooldown on the way."""
        if resource.state is not READY or resource.blocked_until is not None:
            if resource.blocked_until is None:
                return False
            self._refresh(resource, self.clock.now())
            if resource.state is not READY or resource.blocked_until is not None:
                return False
        return resource.active < resource.capacity

    def _pick(
        self,
        where: Any,
        selector: Mapping[str, Any] | None,
        score: Callable[[Resource], Any] | None,
        excluded: set[str] | None,
    ) -> int:
        """Index of the best candidate or -1: max score, then lowest load, round-robin on ties."""
        slots = self._slots
        n = len(slots)
        start = self._rr % n if n else 0
        best = -1
        best_ratio = 0.0
        best_score: Any = None
        filtered = bool(selector) or where is not None
        for step in range(n):
            i = start + step
            if i >= n:
                i -= n
            r = slots[i]
            if not self._leasable(r):
                continue
            if excluded is not None and r.id in excluded:
                continue
            if filtered and not r.matches(selector, where):
                continue
            ratio = r.active / r.capacity
            if score is not None:
                s = score(r)
                if best < 0 or s > best_score or (s == best_score and ratio < best_ratio):
                    best, best_ratio, best_score = i, ratio, s
            elif best < 0 or ratio < best_ratio:
                best, best_ratio = i, ratio
                if ratio == 0.0:
                    break  # nothing beats an idle slot, and it is first in round-robin order
        return best

    def beyond_recovery(self, where: Any = None, selector: Mapping[str, Any] | None = None) -> str | None:
        """Why no matching resource can be leased again without outside help, or None.

        That is the case when resources match and every one of them is revoked, or dead with
        no lease held (only an ok report on a held lease, or re-publishing its id, revives a
        dead resource). A wait would then last for ever, so the algorithms raise instead. A
        pool where nothing matches yet is not beyond recovery: a publish may bring a match.
        """
        reasons: list[str] = []
        for r in self._slots:
            if (selector or where is not None) and not r.matches(selector, where):
                continue
            if r.state is REVOKED:
                reasons.append(f"{r.id} revoked")
            elif r.state is DEAD and r.active == 0:
                reasons.append(f"{r.id} dead after {r.consecutive_failures} consecutive failures")
            else:
                return None
        return "; ".join(reasons) if reasons else None

    def select(
        self, *, where: Any = None, score: Callable[[Resource], Any] | None = None, **selector: Any
    ) -> Resource | None:
        """The resource ``try_acquire`` would lease now, without leasing it."""
        i = self._pick(where, selector, score, None)
        return self._slots[i] if i >= 0 else None

    def try_acquire(
        self,
        ctx: Any = None,
        *,
        where: Any = None,
        score: Callable[[Resource], Any] | None = None,
        waited_ms: float = 0.0,
        **selector: Any,
    ) -> Lease | None:
        """Lease the best free matching resource now, or None. Never suspends.

        A factory failure drops that slot and tries the next; the failure is raised as
        ResourceUnavailable only when every candidate's factory failed.
        """
        slots = self._slots
        if len(slots) == 1 and not selector and where is None:
            # the common case (one endpoint, no filter) skips the general selection loop
            resource = slots[0]
            if (
                resource.state is READY
                and resource.blocked_until is None
                and resource.active < resource.capacity
                and resource._built
            ):
                return self._lease(ctx, 0, resource, waited_ms)
        if not self._waiters:
            return self._try_general(ctx, where, score, waited_ms, selector)
        # somebody waits: a try that leases settles in ``_lease``; one that finds nothing or
        # raises (a broken ``where``) may have been a woken waiter's, so it settles here
        try:
            lease = self._try_general(ctx, where, score, waited_ms, selector)
        except BaseException:
            self._settle()
            raise
        if lease is None:
            self._settle()
        return lease

    def try_free(self, ctx: Any = None) -> Lease | None:
        """``try_free_slot`` without a filter, in one call: the synchronous first try of a
        task's own pool (``ctx.acquire()``), which runs once per attempt. A lease taken here is
        recorded as a zero wait, as ``note_wait(0.0)`` would (a zero wait is never slow)."""
        slots = self._slots
        if len(slots) == 1:
            resource = slots[0]
            if (
                resource.state is READY
                and resource.blocked_until is None
                and resource.active < resource.capacity
                and resource._built
            ):
                lease = self._lease(ctx, 0, resource, 0.0)
                self.waits_total += 1
                self._waits.append(0.0)
                return lease
        other = self.try_acquire(ctx)
        if other is not None:
            self.note_wait(0.0, None, other.resource.id)
        return other

    def _try_general(
        self,
        ctx: Any,
        where: Any,
        score: Callable[[Resource], Any] | None,
        waited_ms: float,
        selector: Mapping[str, Any],
    ) -> Lease | None:
        excluded: set[str] | None = None
        failure: BaseException | None = None
        while True:
            i = self._pick(where, selector, score, excluded)
            if i < 0:
                if failure is not None:
                    raise ResourceUnavailable(
                        f"pool {self.name!r}: resource factory failed: {_describe(failure)}"
                    ) from failure
                return None
            resource = self._slots[i]
            if resource._built or self._build(resource):
                return self._lease(ctx, i, resource, waited_ms)
            failure = resource._factory_exc
            excluded = excluded or set()
            excluded.add(resource.id)

    def _lease(self, ctx: Any, i: int, resource: Resource, waited_ms: float) -> Lease:
        self._rr = i + 1
        resource.active += 1
        resource.leases_total += 1
        self.leases_total += 1
        lease = Lease(
            self,
            self.name,
            resource,
            resource.client,
            resource.options,
            None if ctx is None else getattr(ctx, "task_name", None),
            self._now(),
            waited_ms,
        )
        if (
            (self.listeners and self.trace_leases)
            or self._subs
            or (self.bus is not None and self.bus.subscriber_count)
        ):
            self._emit(
                "resource.leased",
                resource.id,
                {"active": resource.active, "capacity": resource.capacity, "waited_ms": waited_ms},
            )
        if self._waiters:
            self._settle()
        return lease

    def _build(self, resource: Resource) -> bool:
        """Call the factory once; on failure record it through the health machine."""
        factory = resource.factory
        assert factory is not None
        try:
            client = factory(resource)
            if inspect.isawaitable(client):
                close = getattr(client, "close", None)
                if close is not None:
                    close()
                raise TypeError("a resource factory must be synchronous (it returned an awaitable)")
        except Exception as exc:
            self._factory_failed(resource, exc)
            return False
        resource.client = client
        resource._built = True
        return True

    # -- waiting --------------------------------------------------------------------------
    async def wait_slot(
        self,
        *,
        where: Any = None,
        selector: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> bool:
        """Block until a matching candidate may be free (True) or ``timeout`` passes (False).

        True is a hint, not a reservation: the caller must still ``try_acquire``.
        """
        if self._pick(where, selector, None, None) >= 0:
            return True
        if timeout is not None and timeout <= 0:
            return False
        loop = asyncio.get_running_loop()
        self._loop = loop
        waiter = _Waiter(loop.create_future(), selector or None, where)
        self._waiters[waiter] = None
        self._arm_cooldown()
        handle = loop.call_later(timeout, _expire, waiter.fut) if timeout is not None else None
        try:
            return await waiter.fut
        except BaseException:
            fut = waiter.fut
            if fut.done() and not fut.cancelled() and fut.result():
                self._pass_on(waiter)  # we were woken but will not take the slot: wake someone else
            raise
        finally:
            del self._waiters[waiter]
            if handle is not None:
                handle.cancel()
            if not self._waiters:
                self._disarm_cooldown()

    def _wake_slot(self, resource: Resource, slots: int) -> None:
        """A slot of ``resource`` may be free: wake up to ``slots`` waiters that want it."""
        if not self._leasable(resource):
            if resource.state is DEAD and resource.active == 0:
                self._wake_all()  # its last lease is back: nothing held can revive it now
            return  # e.g. a degraded resource's lease came back: nothing usable was freed
        _wake_for(resource, slots, self._waiters)

    def _wake_all(self) -> None:
        for waiter in self._waiters:
            if not waiter.fut.done():
                waiter.fut.set_result(True)

    def _pass_on(self, waiter: _Waiter) -> None:
        if waiter.woken_by is None:
            self._wake_all()
        else:
            self._wake_slot(waiter.woken_by, 1)

    def _settle(self) -> None:
        """Wake pending waiters for the free slots that no woken waiter is on its way to take.

        Runs after every try made while somebody waits. A targeted wake-up is a hint: the
        waiter it wakes may take another slot than the one it was woken for, find that its
        filter no longer wants it, or raise from its ``where``. Each of those leaves a free
        slot that nobody will come for; this hands it to a waiter that wants it. When nothing
        is free (the usual case under contention) it costs one pass over the resources.
        """
        free: dict[str, int] = {}
        for r in self._slots:
            if self._leasable(r):
                free[r.id] = r.capacity - r.active
        if not free:
            return
        pending: list[_Waiter] = []
        for w in self._waiters:
            fut = w.fut
            if not fut.done():
                pending.append(w)
            elif w.woken_by is not None and w.woken_by.id in free and not fut.cancelled() and fut.result():
                free[w.woken_by.id] -= 1
        if not pending:
            return
        for r in self._slots:
            if free.get(r.id, 0) > 0:
                _wake_for(r, free[r.id], pending)

    def reset_waiters(self) -> None:
        """Release every blocked waiter with False and drop the timers (shutdown, loop change)."""
        for waiter in list(self._waiters):
            if not waiter.fut.done() and not waiter.fut.get_loop().is_closed():
                waiter.fut.set_result(False)
        self._disarm_cooldown()

    @property
    def waiting(self) -> int:
        return sum(1 for w in self._waiters if not w.fut.done())

    # -- the cooldown notifier --------------------------------------------------------------
    def _earliest_cooldown(self, now: float) -> float | None:
        earliest: float | None = None
        for r in self._slots:
            until = r.blocked_until
            if until is None or until <= now or r.state is DEAD or r.state is REVOKED:
                continue
            if earliest is None or until < earliest:
                earliest = until
        return earliest

    def _arm_cooldown(self) -> None:
        """Keep one timer on the earliest future cooldown while anybody waits.

        A cooldown that has ended by now but is still recorded is ended here, and the waiters
        are woken: no timer will see it end. That happens when a waiter checked the pool just
        before the cooldown ended and registered just after, or when a timer fired a little
        early (uvloop truncates delays to whole milliseconds) and the waiters it woke found the
        resource still blocked. Without this, every worker could wait for a timer never armed.
        """
        if not self._waiters or self._loop is None or self._loop.is_closed():
            return
        now = self.clock.now()
        ended = [r for r in self._slots if r.blocked_until is not None and r.blocked_until <= now]
        if ended:
            for r in ended:
                self._refresh(r, now)
            self._wake_all()
        earliest = self._earliest_cooldown(now)
        if earliest is None:
            self._disarm_cooldown()
            return
        if self._cooldown_handle is not None and self._cooldown_at <= earliest:
            return
        self._disarm_cooldown()
        self._cooldown_at = earliest
        self._cooldown_handle = self._loop.call_later(earliest - now, self._cooldown_fired)

    def _disarm_cooldown(self) -> None:
        if self._cooldown_handle is not None:
            self._cooldown_handle.cancel()
            self._cooldown_handle = None

    def _cooldown_fired(self) -> None:
        self._cooldown_handle = None
        now = self.clock.now()
        for r in self._slots:
            if r.blocked_until is not None:
                self._refresh(r, now)
        self._wake_all()
        self._arm_cooldown()

    def _blocked(self, until: float) -> None:
        """A new cooldown appeared: re-arm when it ends before the armed one."""
        if self._waiters and (self._cooldown_handle is None or until < self._cooldown_at):
            self._arm_cooldown()

    # -- acquisition ------------------------------------------------------------------------
    def algorithm_registry(self) -> Any:
        """The algorithms registry names resolve through (the process-wide one by default)."""
        if self._algorithms is None:
            from pyattacker.plugins.manager import get_plugins

            self._algorithms = get_plugins().algorithms
        return self._algorithms

    def resolve(self, algorithm: Any = None) -> Any:
        """The algorithm instance for a per-call spec, else the pool default, else ``wait``."""
        if algorithm is None:
            default = self._algorithm
            if default is None:
                default = self._algorithm = self._resolve_spec(self.algorithm_spec)
            return default
        if hasattr(algorithm, "acquire") and not isinstance(algorithm, type):
            return algorithm
        if isinstance(algorithm, str):
            cached = self._algorithm_cache.get(algorithm)
            if cached is None:
                cached = self._algorithm_cache[algorithm] = self._resolve_spec(algorithm)
            return cached
        return self._resolve_spec(algorithm)

    def _resolve_spec(self, spec: Any) -> Any:
        from pyattacker.resources.algorithm import resolve_algorithm

        return resolve_algorithm(spec, self.algorithm_registry())

    async def acquire(
        self,
        ctx: Any = None,
        *,
        algorithm: Any = None,
        timeout: float | None = None,
        where: Any = None,
        **selector: Any,
    ) -> Lease:
        """Lease through the per-call algorithm, else the pool default, else ``wait``."""
        algo = self.resolve(algorithm)
        lease: Lease = await algo.acquire(self, ctx=ctx, where=where, timeout=timeout, selector=selector)
        return lease

    def first_try(self, algorithm: Any = None) -> Callable[..., Lease | None] | None:
        """The resolved algorithm's synchronous first try (its optional ``try_now``), or None."""
        first: Callable[..., Lease | None] | None = getattr(self.resolve(algorithm), "try_now", None)
        return first

    def try_now(
        self, ctx: Any = None, *, algorithm: Any = None, where: Any = None, selector: Mapping[str, Any]
    ) -> Lease | None:
        """The algorithm's synchronous first try, or None when it has none or no slot is free;
        ``acquire`` with the same arguments is then the full path."""
        first = self.first_try(algorithm)
        return None if first is None else first(self, ctx=ctx, where=where, selector=selector)

    def note_wait(
        self, ms: float, selector: Mapping[str, Any] | None = None, resource_id: str | None = None
    ) -> None:
        """Record how long an acquisition waited (feeds ``stats()``; > 1 s emits ``acquire.slow_wait``)."""
        self.waits_total += 1
        self._waits.append(ms)
        if ms > SLOW_WAIT_MS and self._listened():
            self._emit("acquire.slow_wait", resource_id, {"waited_ms": ms, "selector": dict(selector or {})})

    def watch_deadlock(
        self, ctx: Any, selector: Mapping[str, Any] | None = None
    ) -> asyncio.TimerHandle | None:
        """Arm the deadlock hint when ``ctx`` already holds a lease from this pool and must wait.

        The caller cancels the returned handle when its wait ends.
        """
        if ctx is None or not self.deadlock_warn_s or self.deadlock_warn_s <= 0:
            return None
        held = [
            lease.resource.id
            for lease in getattr(ctx, "held_leases", None) or ()
            if getattr(lease, "pool", None) == self.name and not getattr(lease, "released", True)
        ]
        if not held:
            return None
        data = {
            "task": getattr(ctx, "task_name", None),
            "pipeline_id": getattr(ctx, "pipeline_id", None),
            "held": held,
            "selector": dict(selector or {}),
            "hint": (
                f"this task already holds {len(held)} lease(s) from pool {self.name!r} and waits for"
                " another; if every holder does the same, nobody can proceed"
                " (release the first lease, or raise the pool's capacity)"
            ),
        }
        loop = asyncio.get_running_loop()
        return loop.call_later(self.deadlock_warn_s, self._emit, "acquire.suspected_deadlock", None, data)

    def warn_unmatched(
        self, ctx: Any = None, where: Any = None, selector: Mapping[str, Any] | None = None
    ) -> bool:
        """Emit ``acquire.waiting_unmatched`` when no resource of the pool matches the request.

        Such a wait ends only when a matching resource is published (dynamic pools start
        empty), which from outside looks like a hang; the event says what is being waited for.
        A waiting loop calls this before each wait until it returns True (the event was
        emitted), so a request gets at most one event, and a request leased at once never
        gets here. Whether a resource is free, busy, cooling down or dead does not matter:
        only a resource that could never serve the request counts as no match.
        """
        if not self._listened() or self._matches_any(where, selector):
            return False
        self._emit("acquire.waiting_unmatched", None, self._unmatched_data(ctx, where, selector))
        return True

    def _matches_any(self, where: Any, selector: Mapping[str, Any] | None) -> bool:
        """Whether any resource, in any state, matches; stops at the first (O(1) unfiltered)."""
        if not selector and where is None:
            return bool(self._slots)
        return any(r.matches(selector, where) for r in self._slots)

    def _unmatched_data(self, ctx: Any, where: Any, selector: Mapping[str, Any] | None) -> dict[str, Any]:
        """The ``acquire.waiting_unmatched`` data: plain text only, so any store can keep it."""
        text = _selector_text(selector)
        asked = [", ".join(f"{key}={value}" for key, value in text.items())] if text else []
        if where is not None:
            asked.append("the where filter")
        n = len(self._slots)
        found = (
            f"none of the {n} resource(s) of pool {self.name!r} matches {' and '.join(asked)}"
            if n
            else f"pool {self.name!r} has no resource yet"
        )
        return {
            "pool": self.name,
            "selector": text,
            "where": where is not None,
            "resources": n,
            "task": getattr(ctx, "task_name", None),
            "pipeline_id": getattr(ctx, "pipeline_id", None),
            "hint": (
                f"{found}: this lease waits until a matching resource is published"
                " (check the selector, or publish such a resource)"
            ),
        }

    # -- health -----------------------------------------------------------------------------
    def _refresh(self, resource: Resource, now: float) -> None:
        """Lazy state advance: an elapsed cooldown unblocks (without resetting the failure count)."""
        until = resource.blocked_until
        if until is None or now < until:
            return
        resource.blocked_until = None
        resource.factory_error = None
        resource._factory_exc = None
        if resource.state is DEGRADED:
            resource.state = READY
            if self._listened():
                self._emit("resource.recovered", resource.id, {"reason": "cooldown_elapsed"})
        if self._waiters:
            # seen ended by a pick or a wake-up before the notifier's timer fired: the waiters
            # the timer would have woken are woken here (the timer may be disarmed next)
            self._wake_all()

    def _report(
        self,
        resource: Resource,
        ok: bool,
        latency_ms: float | None,
        usage: Mapping[str, float] | None,
        error: BaseException | str | None,
    ) -> None:
        if latency_ms is not None:
            ema = resource.latency_ms_ema
            latency = float(latency_ms)
            resource.latency_ms_ema = latency if ema is None else _EMA_OLD * ema + _EMA_NEW * latency
        if usage:
            _add_usage(resource.usage, usage)
        if ok:
            self._succeeded(resource)
        else:
            self._failed(resource, None if error is None else _describe(error))

    def _succeeded(self, resource: Resource) -> None:
        resource.ok_total += 1
        self.ok_total += 1
        resource.consecutive_failures = 0
        if resource.state is DEGRADED or resource.state is DEAD:
            resource.state = READY
            resource.blocked_until = None
            resource.factory_error = None
            if self._listened():
                self._emit("resource.recovered", resource.id, {})
            if self._waiters:
                self._wake_slot(resource, resource.capacity)

    def _failed(self, resource: Resource, error: str | None) -> None:
        """Count a failure: DEGRADED at ``degrade_after``, DEAD at ``dead_after``."""
        resource.failed_total += 1
        self.failed_total += 1
        resource.consecutive_failures += 1
        count = resource.consecutive_failures
        if resource.state is REVOKED or resource.state is DEAD:
            return
        if count >= resource.dead_after:
            resource.state = DEAD
            resource.blocked_until = None
            if self._listened():
                self._emit("resource.dead", resource.id, {"consecutive_failures": count, "error": error})
            if self._waiters and resource.active == 0:
                self._wake_all()  # see beyond_recovery(): the waiters re-check
        elif count >= resource.degrade_after:
            was = resource.state
            self._block(resource, DEGRADED)
            if was is READY and self._listened():
                self._emit(
                    "resource.degraded",
                    resource.id,
                    {"consecutive_failures": count, "cooldown_s": resource.cooldown_s, "error": error},
                )

    def _block(self, resource: Resource, state: ResourceState) -> None:
        until = self.clock.now() + resource.cooldown_s
        if resource.blocked_until is None or until > resource.blocked_until:
            resource.blocked_until = until
        resource.state = state
        self._blocked(resource.blocked_until)

    def _force_degrade(self, resource: Resource, reason: str) -> None:
        if resource.state is REVOKED or resource.state is DEAD:
            return
        self._block(resource, DEGRADED)
        if self._listened():
            self._emit("resource.degraded", resource.id, {"reason": reason})

    def _factory_failed(self, resource: Resource, exc: BaseException) -> None:
        """A failing factory refuses the lease and blocks the slot for one cooldown."""
        text = _describe(exc)
        resource.factory_error = text
        resource._factory_exc = exc
        if resource.state is READY:
            self._block(resource, READY)
        if self._listened():
            self._emit("resource.factory_failed", resource.id, {"error": text})
        self._failed(resource, text)

    # -- events -----------------------------------------------------------------------------
    def _listened(self) -> bool:
        return bool(self.listeners or self._subs or (self.bus is not None and self.bus.subscriber_count))

    def _emit(self, kind: str, resource_id: str | None, data: dict[str, Any]) -> None:
        event = ResourceEvent(self.clock.wall(), self.name, kind, resource_id, data)
        for listener in list(self.listeners):
            try:
                listener(event)
            except Exception:  # a broken listener must never break a release
                log.exception("pool %r: event listener %r failed", self.name, listener)
        for sub in self._subs:
            sub.put(event)
        if self.bus is not None:
            self.bus.publish("resource", pool=self.name, kind=kind, resource_id=resource_id, data=data)

    def subscribe(
        self, events: Iterable[str] | str | None = None, *, maxsize: int = 1024
    ) -> Subscription[ResourceEvent]:
        """An async iterator of this pool's events (only ``events`` kinds when given)."""
        kinds = None if events is None else frozenset((events,) if isinstance(events, str) else events)
        accept = None if kinds is None else (lambda ev: ev.kind in kinds)
        sub: Subscription[ResourceEvent] = Subscription(maxsize, accept=accept, on_close=self._subs.remove)
        self._subs.append(sub)
        return sub

    # -- views ------------------------------------------------------------------------------
    def stats(self, **selector: Any) -> PoolStats:
        """Counters over every resource (or those matching ``selector``) and recent waits."""
        now = self.clock.now()
        chosen = [r for r in self._slots if not selector or r.matches(selector)]
        counts = dict.fromkeys(ResourceState, 0)
        usage: dict[str, float] = {}
        for r in chosen:
            self._refresh(r, now)
            counts[r.state] += 1
            _add_usage(usage, r.usage)
        waits = sorted(self._waits)
        kinds = {r.kind for r in chosen}
        return PoolStats(
            name=self.name,
            kind=self.kind or (next(iter(kinds)) if len(kinds) == 1 else None),
            total=len(chosen),
            ready=counts[READY],
            degraded=counts[DEGRADED],
            dead=counts[DEAD],
            revoked=counts[REVOKED],
            active=sum(r.active for r in chosen),
            capacity=sum(r.capacity for r in chosen if r.state is not REVOKED),
            waiting=self.waiting,
            leases_total=sum(r.leases_total for r in chosen) if selector else self.leases_total,
            ok_total=sum(r.ok_total for r in chosen) if selector else self.ok_total,
            failed_total=sum(r.failed_total for r in chosen) if selector else self.failed_total,
            leaked_total=self.leaked_total,
            usage=usage,
            waits_total=self.waits_total,
            wait_ms_avg=round(sum(waits) / len(waits), 3) if waits else 0.0,
            wait_ms_p50=_percentile(waits, 50),
            wait_ms_p95=_percentile(waits, 95),
            wait_ms_max=waits[-1] if waits else 0.0,
        )

    def snapshot(self) -> list[dict[str, Any]]:
        """One row per resource for monitoring and the store (secrets masked)."""
        now = self.clock.now()
        rows = []
        for r in self._slots:
            self._refresh(r, now)
            rows.append(
                {
                    "id": r.id,
                    "kind": r.kind,
                    "state": r.state.value,
                    "active": r.active,
                    "capacity": r.capacity,
                    "consecutive_failures": r.consecutive_failures,
                    "leases": r.leases_total,
                    "failed": r.failed_total,
                    "latency_ms_ema": None if r.latency_ms_ema is None else round(r.latency_ms_ema, 3),
                    "blocked_until": r.blocked_until,
                    "options": shown(r.options),
                    "tags": shown(r.tags) if isinstance(r.tags, dict) else list(r.tags),
                }
            )
        return rows


def _describe(error: BaseException | str) -> str:
    if isinstance(error, BaseException):
        text = str(error)
        return f"{type(error).__name__}: {text}" if text else type(error).__name__
    return str(error)


#: Longest selector value text in an event (a selector may hold a large list).
_SELECTOR_TEXT_MAX = 200


def _selector_text(selector: Mapping[str, Any] | None) -> dict[str, str]:
    """A selector as ``{key: repr(value)}``, secrets masked, long values cut.

    ``repr`` keeps ``1`` and ``'1'`` apart: a number in the selector where the resource has
    text (or the reverse) is a common reason for a selector to match nothing.
    """
    text: dict[str, str] = {}
    for key, value in (selector or {}).items():
        shown = repr(value)
        if len(shown) > _SELECTOR_TEXT_MAX:
            shown = shown[: _SELECTOR_TEXT_MAX - 1] + "…"
        text[str(key)] = shown
    masked: dict[str, str] = mask_secrets(text)
    return masked


def _add_usage(into: dict[str, float], usage: Mapping[str, float]) -> None:
    for key, value in usage.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"usage counter {key!r} must be a number, got {value!r}")
        into[key] = into.get(key, 0) + value
