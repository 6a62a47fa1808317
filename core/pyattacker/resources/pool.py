"""Pools: named sets of resources that pipelines lease from (the only state they share).

Every mutation here is synchronous and contains no ``await``: a lease can therefore always be
returned from a ``finally`` block, even while the task is being cancelled (invariant 5, the
lease-safety contract). The uncontended path (``try_acquire`` + ``release_now``) allocates one
``Lease`` and builds no event objects unless somebody listens: it runs once per task attempt
across tens of thousands of pipelines.

``Pool`` is the front object; it holds membership, picking, leasing and events, and is built
from parts, each in its own module:

- ``Health`` (``health.py``): the resources' state machine (degraded, dead, cooldowns);
- ``WaitQueue`` (``waiters.py``): the blocked acquirers, their wake-ups and the cooldown timer;
- ``diagnostics.py``: wait records, the deadlock and unmatched-selector hints, stats, snapshots;
- ``AlgorithmResolver`` (``algorithm.py``): specs to algorithm instances.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from pyattacker.clock import Clock, RealClock
from pyattacker.errors import ConfigError, ResourceUnavailable
from pyattacker.resources import diagnostics
from pyattacker.resources.algorithm import AlgorithmResolver
from pyattacker.resources.bus import Bus, Subscription
from pyattacker.resources.gate import BudgetGate
from pyattacker.resources.health import Health, describe_error
from pyattacker.resources.lease import Lease
from pyattacker.resources.resource import DEAD, READY, REVOKED, Resource
from pyattacker.resources.shared_budget import SharedBudget
from pyattacker.resources.waiters import WaitQueue

if TYPE_CHECKING:
    from pyattacker.plugins.registry import Registry
    from pyattacker.resources.algorithm import Algorithm

__all__ = ["Pool", "ResourceEvent"]

log = logging.getLogger(__name__)


class ResourceEvent(msgspec.Struct, gc=False):
    """One pool state change, as handed to listeners, subscribers and the bus."""

    ts: float
    pool: str
    kind: str
    resource_id: str | None
    data: dict[str, Any] = {}


class Pool:
    """A named set of resources with a default acquisition algorithm and an event stream.

    ``algorithm`` is the default for leases that name none: an instance, or a spec (a name, a
    mapping) resolved here through ``algorithms`` (a registry or an ``AlgorithmResolver``; the
    process-wide plugins by default). Without one it is ``wait``, resolved on first use.
    ``await pool.wait_slot(*, where=None, selector=None, timeout=None) -> bool`` waits in the
    pool's ``WaitQueue`` until a matching slot may be free.
    """

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
        algorithms: Registry | AlgorithmResolver | None = None,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ConfigError(f"pool name must be a non-empty string, got {name!r}")
        self.name = name
        self.kind = kind
        self.bus = bus
        self.deadlock_warn_s = deadlock_warn_s
        #: Called with every ResourceEvent (the runner appends its recorder here).
        self.listeners: list[Callable[[ResourceEvent], None]] = [on_event] if on_event else []
        #: whether listeners get one event per lease taken/returned (subscribers and the bus
        #: always do); a runner turns it off unless ``events="all"``: the attempt rows carry leases
        self.trace_leases = True
        self._subs: list[Subscription[ResourceEvent]] = []
        self._by_id: dict[str, Resource] = {}
        self._slots: list[Resource] = []
        self._rr = 0
        self.leases_total = 0
        self.leaked_total = 0
        self.waits_total = 0
        self._waits: deque[float] = deque(maxlen=diagnostics.WAIT_WINDOW)
        self._health = health = Health(self)
        self._queue = queue = WaitQueue(
            self._slots,
            pick=self._pick,
            leasable=self._leasable,
            end_cooldowns=health.end_cooldowns,
            clock=RealClock(),
        )
        #: the wait queue's waiters (its own dict): whether anybody waits, read once per lease
        self._waiters = queue.waiters
        #: ``await pool.wait_slot(*, where=None, selector=None, timeout=None) -> bool``: the wait
        #: queue's own method, bound here rather than wrapped (a wrapper is a call per wait)
        self.wait_slot = queue.wait_slot
        self._clock: Clock = queue.clock
        self._now: Callable[[], float] = time.monotonic
        #: False until a clock is given (here or by assignment): a runner may then impose its own.
        self.clock_is_default = clock is None
        if clock is not None:
            self.clock = clock
        self.resolver = (
            algorithms if isinstance(algorithms, AlgorithmResolver) else AlgorithmResolver(algorithms)
        )
        self._algorithm: Algorithm | None = None
        if algorithm is not None:
            try:
                self._algorithm = self.resolver.resolve(algorithm)
            except ConfigError as exc:
                raise ConfigError(f"pool {name!r}: {exc}") from None
        for item in resources:
            before = len(self._slots)
            resource = self.publish(item)
            if len(self._slots) == before:  # published over an earlier one: never silently
                raise ConfigError(f"pool {name!r}: two resources have the id {resource.id!r}")

    #: slots and rate budget together, built when the first rate-limited resource arrives; a
    #: class default, so an unlimited pool's instance carries one attribute fewer
    _gate: BudgetGate | None = None

    def __repr__(self) -> str:
        return f"Pool({self.name!r}, resources={len(self._slots)})"

    @property
    def clock(self) -> Clock:
        return self._clock

    @clock.setter
    def clock(self, clock: Clock) -> None:
        self._clock = self._queue.clock = clock
        self.clock_is_default = False
        # the real clock's now() is time.monotonic: call it directly on the hot path
        self._now = time.monotonic if type(clock).now is Clock.now else clock.now

    @property
    def rate_limited(self) -> bool:
        """Whether any resource published here has rate limits (its grants then go through the
        budget gate)."""
        return self._gate is not None

    def share_budget(self, budget: SharedBudget) -> bool:
        """Share the rate budget of this pool's limited resources with other processes (the
        shards of one run, see ``shared_budget.py``); False (and nothing shared) when no
        resource published here has limits."""
        if self._gate is None:
            return False
        self._gate.share(budget)
        return True

    @property
    def ok_total(self) -> int:
        """Ok reports on this pool's leases."""
        return self._health.ok_total

    @property
    def failed_total(self) -> int:
        """Failed reports on this pool's leases (factory failures included)."""
        return self._health.failed_total

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
        if resource.limits is not None and self._gate is None:
            self._gate = BudgetGate(self)
            self._gate.install()
        if self._listened():
            self._emit(
                "resource.published",
                resource.id,
                {"kind": resource.kind, "capacity": resource.capacity, "by": by},
            )
        if self._waiters:
            self._queue.wake_slot(resource, resource.capacity)
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
            self._queue.wake_all()  # a wait that only this resource could end must find out
        return True

    def hold(self, resource_id: str, seconds: float, reason: str = "retry_after") -> bool:
        """No lease of the resource for exactly ``seconds`` from now (a server's Retry-After);
        its state stays ``ready``. Returns whether the resource exists."""
        resource = self._by_id.get(resource_id)
        if resource is None:
            return False
        self._health.hold(resource, seconds, reason)
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
            self._health.refresh(resource, self.clock.now())
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
                and resource._quick
            ):
                return self._lease(ctx, 0, resource, waited_ms)
        if not self._waiters:
            return self._try_general(ctx, where, score, waited_ms, selector)
        # somebody waits: a try that leases settles in ``_lease``; one that finds nothing or
        # raises (a broken ``where``) may have been a woken waiter's, so it settles here
        try:
            lease = self._try_general(ctx, where, score, waited_ms, selector)
        except BaseException:
            self._queue.settle()
            raise
        if lease is None:
            self._queue.settle()
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
                and resource._quick
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
                        f"pool {self.name!r}: resource factory failed: {describe_error(failure)}"
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
        now = self._now  # an instance attribute: a load and a call cost less than a method lookup
        lease = Lease(
            self,
            self.name,
            resource,
            resource.client,
            resource.options,
            None if ctx is None else getattr(ctx, "task_name", None),
            now(),
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
            self._queue.settle()
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
            self._health.factory_failed(resource, exc)
            return False
        resource.client = client
        resource._built = True
        resource._quick = resource.limits is None
        return True

    # -- waiting (the wait queue) ------------------------------------------------------------
    @property
    def waiting(self) -> int:
        """How many acquirers are blocked in ``wait_slot``."""
        return self._queue.waiting

    def reset_waiters(self) -> None:
        """Release every blocked waiter with False and drop the timers (shutdown, loop change)."""
        self._queue.reset()

    # -- acquisition ------------------------------------------------------------------------
    @property
    def algorithm(self) -> Algorithm:
        """The default algorithm (``wait`` unless the pool was given one), resolved on first use."""
        if self._algorithm is None:
            self._algorithm = self.resolver.resolve(None)
        return self._algorithm

    def resolve(self, algorithm: Any = None) -> Algorithm:
        """``algorithm`` as an instance (a spec goes through ``resolver``), else the default."""
        return self.algorithm if algorithm is None else self.resolver.resolve(algorithm)

    async def acquire(
        self,
        ctx: Any = None,
        *,
        algorithm: Any = None,
        timeout: float | None = None,
        where: Any = None,
        **selector: Any,
    ) -> Lease:
        """Lease through ``algorithm`` (an instance or a spec), else the pool's default."""
        # an instance (what the runner passes) or the resolved default is used without a call
        algo = self._algorithm if algorithm is None else algorithm
        if algo is None or not hasattr(algo, "acquire") or isinstance(algo, type):
            algo = self.resolve(algorithm)
        lease: Lease = await algo.acquire(self, ctx=ctx, where=where, timeout=timeout, selector=selector)
        return lease

    def first_try(self, algorithm: Any = None) -> Callable[..., Lease | None] | None:
        """The algorithm's synchronous first try (its optional ``try_now``), or None."""
        first: Callable[..., Lease | None] | None = getattr(self.resolve(algorithm), "try_now", None)
        return first

    def try_now(
        self, ctx: Any = None, *, algorithm: Any = None, where: Any = None, selector: Mapping[str, Any]
    ) -> Lease | None:
        """The algorithm's synchronous first try, or None when it has none or no slot is free;
        ``acquire`` with the same arguments is then the full path."""
        algo = self._algorithm if algorithm is None else algorithm  # as in ``acquire``
        if algo is None or not hasattr(algo, "acquire") or isinstance(algo, type):
            algo = self.resolve(algorithm)
        first = getattr(algo, "try_now", None)
        return None if first is None else first(self, ctx=ctx, where=where, selector=selector)

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

    # -- diagnostics.py: functions of the pool, bound as its methods --------------------------
    note_wait = diagnostics.note_wait
    watch_deadlock = diagnostics.watch_deadlock
    warn_unmatched = diagnostics.warn_unmatched
    stats = diagnostics.stats
    snapshot = diagnostics.snapshot
