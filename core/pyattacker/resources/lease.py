"""A lease: one use of one resource, returned to its pool synchronously.

Returning a lease never awaits, so it can always be done from a ``finally`` block, even while
the task is being cancelled (invariant 5, the lease-safety contract).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from pyattacker.clock import round3
from pyattacker.errors import retry_after_of
from pyattacker.resources.limits import Charge
from pyattacker.resources.resource import Resource

if TYPE_CHECKING:
    from pyattacker.resources.pool import Pool

__all__ = ["Lease"]


class Lease(msgspec.Struct, eq=False):
    """One use of one resource. Return it: ``async with lease:``, ``release_now()`` or ``release()``.

    Built by its pool only (``Pool._lease``). A msgspec Struct rather than a class with
    ``__init__`` because one is built per lease: CPython 3.11 runs a Python ``__init__`` through
    ``type.__call__`` and a call from C, where msgspec builds the object in C. ``eq=False``:
    compared by identity, as a plain object would be.
    """

    _pool: Pool
    #: the pool's name
    pool: str
    resource: Resource
    #: the resource's client and options when leased
    client: Any
    options: Any
    task_name: str | None
    acquired_at: float
    waited_ms: float
    #: when the lease was returned (the pool's clock); None while it is held
    released_at: float | None = None
    #: the grant's token charge on a rate-limited resource (settled by ``report``), else None
    charge: Charge | None = None

    @property
    def released(self) -> bool:
        """Whether the lease was returned. Derived from ``released_at``: a release sets one
        field of the Struct, not two (a Struct's field is slower to set than to read)."""
        return self.released_at is not None

    @property
    def held_ms(self) -> float:
        end = self.released_at if self.released_at is not None else self._pool._now()
        return (end - self.acquired_at) * 1000.0

    def report(
        self,
        ok: bool = True,
        latency_ms: float | None = None,
        usage: Mapping[str, float] | None = None,
        error: BaseException | str | None = None,
    ) -> None:
        """Tell the pool how the call went: the only way a resource's health ever changes.

        ``usage={"tokens": n}`` on a rate-limited resource settles the grant's token estimate to
        ``n``; a failed report whose error carries a Retry-After (``RetryableError(retry_after=)``
        or a 429 response's header) holds the resource for exactly that long.
        """
        self._pool._health.report(self.resource, ok, latency_ms, usage, error, self.charge)

    def pause(self, seconds: float, reason: str = "retry_after") -> None:
        """No lease of this resource for exactly ``seconds`` (the server said "retry after")."""
        self._pool._health.hold(self.resource, seconds, reason)

    def degrade(self, reason: str = "") -> None:
        """Take the resource out of rotation for one cooldown (e.g. the server said "slow down")."""
        self._pool._health.degrade(self.resource, reason)

    def release_now(self, *, leaked: bool = False) -> bool:
        """Return the slot synchronously (no await, so cancellation cannot interrupt it).

        Idempotent: returns whether this call released the lease.
        """
        if self.released_at is not None:  # ``released``, without the property's call
            return False
        pool = self._pool
        now = pool._now  # an instance attribute: a load and a call cost less than a method lookup
        self.released_at = now()
        resource = self.resource
        resource.active -= 1
        if leaked:
            pool.leaked_total += 1
        if (
            (pool.listeners and (leaked or pool.trace_leases))
            or pool._subs
            or (pool.bus is not None and pool.bus.subscriber_count)
        ):
            pool._emit(
                "resource.leaked" if leaked else "resource.released",
                resource.id,
                {"active": resource.active, "held_ms": self.held_ms, "task": self.task_name},
            )
        if pool._waiters:
            pool._queue.wake_slot(resource, 1)
        return True

    async def release(self) -> bool:
        """Awaitable alias of ``release_now`` (it never actually suspends)."""
        return self.release_now()

    def as_dict(self) -> dict[str, Any]:
        """The shape recorded on an attempt (one per lease: ``held_ms`` is computed inline)."""
        end = self.released_at if self.released_at is not None else self._pool._now()
        held = (end - self.acquired_at) * 1000.0
        waited = self.waited_ms
        return {
            "pool": self.pool,
            "resource_id": self.resource.id,
            # round3(held) inline: this runs once per lease (no call)
            "held_ms": (held * 1000.0 + 0.5) // 1.0 / 1000.0 if held >= 0.0 else round3(held),
            "waited_ms": round3(waited) if waited else 0.0,
        }

    async def __aenter__(self) -> Lease:
        return self

    async def __aexit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is not None:
            self.failed_with(exc)
        self.release_now()

    def failed_with(self, exc: BaseException) -> None:
        """An error escaped the lease's block: a server's Retry-After in it (``retry_after``, or a
        response's header) holds the resource for exactly that long."""
        after = retry_after_of(exc)
        if after is not None and self.released_at is None:
            self._pool._health.hold(self.resource, after, "retry_after")

    def __repr__(self) -> str:
        state = "released" if self.released else "held"
        return f"Lease(pool={self.pool!r}, resource={self.resource.id!r}, {state})"
