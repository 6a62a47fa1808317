"""A resource: one leasable capability (an endpoint, a key, a local worker) and its health state.

What a resource declares (kind, capacity, options, tags, thresholds) is fixed when it is built;
its counters and health fields are the pool's to change (``health.py`` moves the state,
``pool.py`` counts leases). Selectors match resources by id, kind, tags and options.
"""

from __future__ import annotations

import enum
import itertools
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pyattacker.errors import ConfigError
from pyattacker.resources.limits import Limits
from pyattacker.resources.redact import shown

__all__ = ["DEAD", "DEGRADED", "READY", "REVOKED", "Resource", "ResourceState"]


class ResourceState(enum.StrEnum):
    READY = "ready"
    DEGRADED = "degraded"
    DEAD = "dead"
    REVOKED = "revoked"


READY, DEGRADED, DEAD, REVOKED = (
    ResourceState.READY,
    ResourceState.DEGRADED,
    ResourceState.DEAD,
    ResourceState.REVOKED,
)

#: ``Resource.lookup`` of a key the resource does not have.
_MISSING = object()

_ids: dict[str, itertools.count[int]] = {}


def _tag_list(tags: Any) -> tuple[str, ...]:
    """Tags given as a string or a list of strings (a mapping is kept as it is by the caller)."""
    if isinstance(tags, str):
        return (tags,)
    try:
        listed = tuple(tags)
    except TypeError:
        raise ConfigError(f"resource tags must be strings or a mapping, got {tags!r}") from None
    if not all(isinstance(t, str) for t in listed):
        raise ConfigError(f"resource tags must be strings, got {list(listed)!r}")
    return listed


def _next_id(kind: str) -> str:
    counter = _ids.get(kind)
    if counter is None:
        counter = _ids[kind] = itertools.count(1)
    return f"{kind}-{next(counter)}"


def _positive_int(name: str, value: Any, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"resource {name} must be an integer >= {minimum}, got {value!r}")
    return value


class Resource:
    """One leasable capability (an endpoint, a key, a local worker) with a per-instance capacity.

    The mutable counters below are owned by the pool; read them, do not write them.
    """

    __slots__ = (
        "_built",
        "_factory_exc",
        "_quick",
        "_tagset",
        "active",
        "blocked_until",
        "capacity",
        "client",
        "consecutive_failures",
        "cooldown_s",
        "dead_after",
        "degrade_after",
        "factory",
        "factory_error",
        "failed_total",
        "id",
        "kind",
        "latency_ms_ema",
        "leases_total",
        "limits",
        "meta",
        "ok_total",
        "options",
        "state",
        "tags",
        "usage",
        "waited_budget_ms",
        "waited_slot_ms",
    )

    def __init__(
        self,
        kind: str,
        *,
        id: str | None = None,
        capacity: int = 1,
        options: Mapping[str, Any] | None = None,
        tags: Iterable[str] | Mapping[str, Any] = (),
        factory: Callable[[Resource], Any] | None = None,
        degrade_after: int = 3,
        dead_after: int = 8,
        cooldown_s: float = 30.0,
        meta: Mapping[str, Any] | None = None,
        limits: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(kind, str) or not kind:
            raise ConfigError(f"resource kind must be a non-empty string, got {kind!r}")
        if id is not None and (not isinstance(id, str) or not id):
            raise ConfigError(f"resource id must be a non-empty string, got {id!r}")
        if factory is not None and not callable(factory):
            raise ConfigError(f"resource factory must be callable, got {type(factory).__name__}")
        if (
            isinstance(cooldown_s, bool)
            or not isinstance(cooldown_s, int | float)
            or not 0 <= cooldown_s < math.inf  # NaN fails too
        ):
            raise ConfigError(f"resource cooldown_s must be a finite number >= 0, got {cooldown_s!r}")
        if options is not None and not isinstance(options, Mapping):
            raise ConfigError(f"resource options must be a mapping, got {type(options).__name__}")
        self.kind = kind
        self.id = id or _next_id(kind)
        self.capacity = _positive_int("capacity", capacity)
        self.degrade_after = _positive_int("degrade_after", degrade_after)
        self.dead_after = _positive_int("dead_after", dead_after)
        self.cooldown_s = float(cooldown_s)
        self.options: dict[str, Any] = dict(options or {})
        self.tags: tuple[str, ...] | dict[str, Any]
        if isinstance(tags, Mapping):
            self.tags = dict(tags)
            self._tagset: frozenset[str] = frozenset()
        else:
            self.tags = _tag_list(tags)
            self._tagset = frozenset(self.tags)
        self.factory = factory
        self.meta: dict[str, Any] = dict(meta or {})
        self.client: Any = None
        self._built = factory is None
        #: rate limits checked at each grant (``limits.py``); None: capacity alone limits it
        self.limits: Limits | None = Limits(limits) if limits else None
        #: built and unlimited: the pool's fast paths may lease it with no further check
        self._quick = self._built and self.limits is None
        #: how long leases of this resource waited for rate budget, and for a free slot
        self.waited_budget_ms = 0.0
        self.waited_slot_ms = 0.0
        self.reset_health()
        self.active = 0
        self.leases_total = 0
        self.ok_total = 0
        self.failed_total = 0
        self.latency_ms_ema: float | None = None
        self.usage: dict[str, float] = {}

    @classmethod
    def create(
        cls,
        kind: str,
        *,
        id: str | None = None,
        capacity: int = 1,
        options: Mapping[str, Any] | None = None,
        tags: Iterable[str] | Mapping[str, Any] = (),
        factory: Callable[[Resource], Any] | None = None,
        degrade_after: int = 3,
        dead_after: int = 8,
        cooldown_s: float = 30.0,
        meta: Mapping[str, Any] | None = None,
        limits: Mapping[str, Any] | None = None,
    ) -> Resource:
        """Build a resource; the id defaults to ``"<kind>-<n>"``."""
        return cls(
            kind,
            id=id,
            capacity=capacity,
            options=options,
            tags=tags,
            factory=factory,
            degrade_after=degrade_after,
            dead_after=dead_after,
            cooldown_s=cooldown_s,
            meta=meta,
            limits=limits,
        )

    def reset_health(self) -> None:
        """READY, with no failure counted, no cooldown and no stored factory error (a fresh
        resource, or one published again)."""
        self.state = READY
        self.consecutive_failures = 0
        #: Clock time until which the resource is not leasable (cooldown or stored factory error).
        self.blocked_until: float | None = None
        self.factory_error: str | None = None
        self._factory_exc: BaseException | None = None

    # -- selectors --------------------------------------------------------------------
    def lookup(self, key: str) -> Any:
        """Selector value for ``key``: id, kind, tags, options, then a dotted path into options."""
        if key == "id":
            return self.id
        if key == "kind":
            return self.kind
        tags = self.tags
        if isinstance(tags, dict) and key in tags:
            return tags[key]
        if key in self.options:
            return self.options[key]
        if "." in key:
            node: Any = self.options
            for part in key.split("."):
                if not isinstance(node, Mapping) or part not in node:
                    return _MISSING
                node = node[part]
            return node
        return _MISSING

    def matches(self, selector: Mapping[str, Any] | None = None, where: Any = None) -> bool:
        """Plain-equality match; ``tag``/``tags`` test membership in a tag list."""
        if selector:
            for key, want in selector.items():
                if key == "tokens":
                    continue  # reserved: the request's token estimate, not a selector key
                if (key == "tag" or key == "tags") and not isinstance(self.tags, dict):
                    wanted = (want,) if isinstance(want, str) else want
                    if not self._tagset.issuperset(wanted):
                        return False
                elif self.lookup(key) != want:
                    return False
        if where is None:
            return True
        if callable(where):
            return bool(where(self))
        return self.matches(where)

    # -- views --------------------------------------------------------------------------
    def spec(self) -> dict[str, Any]:
        """The declared shape of the resource, secrets masked (safe to store and display).

        Options may hold live objects (a client, a lock): those are stored as their ``repr``,
        so the run's resource rows never fail the store's commit.
        """
        return {
            "id": self.id,
            "kind": self.kind,
            "capacity": self.capacity,
            "options": shown(self.options),
            "tags": shown(self.tags) if isinstance(self.tags, dict) else list(self.tags),
            "degrade_after": self.degrade_after,
            "dead_after": self.dead_after,
            "cooldown_s": self.cooldown_s,
            "meta": shown(self.meta),
            **({"limits": dict(self.limits.spec)} if self.limits is not None else {}),
        }

    def __repr__(self) -> str:
        return f"Resource({self.id!r}, state={self.state.value}, active={self.active}/{self.capacity})"
