"""One rate budget for the shards of a Ray run, whichever nodes they run on: a Ray actor.

The kernel's shared budget (``pyattacker.resources.shared_budget``) is a grant log that every
shard appends to, and a lock that makes "pull what the others granted, decide, record mine"
one step. On one machine that is a file and ``flock``; across nodes it is ``BudgetLog``, one
named actor per run (``pyattacker-budget-<run id>`` in namespace ``pyattacker``), created by the
driver and ending with it (job-scoped). Each shard's pools reach it through ``ActorBudget``,
which the kernel loads from ``PYATTACKER_SHARED_BUDGET=py:pyattacker_executor_ray.budget:connect``.

Cost per grant: one actor round trip (``acquire``: wait for the lock, get the others' records),
then a one-way ``release`` that carries this grant and frees the lock; a settlement or a
server's hold is one one-way ``append``. Nothing else talks to the actor, and a pool without
limited resources never opens a budget.

Clocks: each node has its own monotonic clock, so records travel in the actor's. A shard
converts with the bounds of its last round trip (the actor read its clock between the call's
send and its answer): its own times become the latest actor time they can be, the others'
the latest local time. Every record is seen at most one round trip later than it was made,
never earlier, so a window may hold a grant a little longer, never shorter.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import time
from collections.abc import Iterator
from typing import Any

from pyattacker.errors import ConfigError
from pyattacker.resources.shared_budget import BudgetEntry

__all__ = ["ACTOR_ENV", "FACTORY_SPEC", "NAMESPACE", "ActorBudget", "BudgetLog", "connect"]

#: set for each shard by the executor: ``<GCS address> <namespace> <actor name>``
ACTOR_ENV = "PYATTACKER_RAY_BUDGET"
#: the ``PYATTACKER_SHARED_BUDGET`` value that makes the kernel load ``connect``
FACTORY_SPEC = "py:pyattacker_executor_ray.budget:connect"
NAMESPACE = "pyattacker"

Record = tuple[bytes, int, int, float, float]  # BudgetEntry's fields, ``at`` in the actor's clock


class BudgetLog:
    """The actor: the records of every shard (kept ``keep_s`` seconds) and one lock.

    A record's position (``seq``) is its cursor: ``acquire`` returns the records others added
    since the caller's cursor. A holder that does not let go within ``stale_s`` (its process was
    killed inside a grant) loses the lock to the next caller.
    """

    def __init__(self, keep_s: float, stale_s: float = 10.0) -> None:
        self.keep_s = keep_s
        self.stale_s = stale_s
        self.log: list[tuple[int, Record]] = []  # (origin, record)
        self.base = 0  # the seq of log[0]
        self.owner: int | None = None
        self.owned_at = 0.0
        self.grants = 0
        self.broken = 0
        self._freed: asyncio.Condition | None = None

    def _condition(self) -> asyncio.Condition:
        if self._freed is None:  # made in the actor's event loop, on first use
            self._freed = asyncio.Condition()
        return self._freed

    def clock(self) -> float:
        return time.monotonic()

    async def acquire(self, origin: int, cursor: int) -> tuple[float, list[Record], int]:
        """Wait for the lock; the actor's clock, the others' records since ``cursor``, the new cursor."""
        freed = self._condition()
        async with freed:
            while self.owner is not None:
                left = self.owned_at + self.stale_s - time.monotonic()
                if left <= 0:
                    self.broken += 1
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(freed.wait(), left)
            self.owner = origin
            now = self.owned_at = time.monotonic()
            self.grants += 1
            start = max(0, cursor - self.base)
            records = [record for who, record in self.log[start:] if who != origin]
            return now, records, self.base + len(self.log)

    async def release(self, origin: int, records: list[Record]) -> None:
        """The holder's records (its grant), and the lock let go."""
        freed = self._condition()
        async with freed:
            self._add(origin, records)
            if self.owner == origin:
                self.owner = None
                freed.notify()

    def append(self, origin: int, records: list[Record]) -> None:
        """Records made outside a grant (a settlement, a server's hold)."""
        self._add(origin, records)

    def _add(self, origin: int, records: list[Record]) -> None:
        self.log.extend((origin, record) for record in records)
        horizon = time.monotonic() - self.keep_s
        drop = 0
        for _, record in self.log:  # oldest first (a hold's end may lie ahead: it stays)
            if record[3] >= horizon:
                break
            drop += 1
        if drop > len(self.log) // 2:  # trimmed in halves: amortised O(1) per record
            del self.log[:drop]
            self.base += drop

    def stats(self) -> dict[str, Any]:
        return {"grants": self.grants, "records": len(self.log), "broken_locks": self.broken}


class ActorBudget:
    """``SharedBudget`` through a ``BudgetLog`` actor (see the module docstring)."""

    def __init__(self, actor: Any) -> None:
        import ray

        self._ray = ray
        self._actor = actor
        self._origin = secrets.randbits(38) | 1
        self._count = 0
        self._cursor = 0
        #: the last round trip: the actor's clock, and this process's before and after it
        self._sync: tuple[float, float, float] | None = None
        self._acquired = False
        self._out: list[Record] = []

    @contextlib.contextmanager
    def hold(self) -> Iterator[None]:
        """The lock is taken by ``pull`` (one round trip); a hold that only pushes takes none."""
        self._acquired = False
        try:
            yield
        finally:
            out, self._out = self._out, []
            if self._acquired:
                self._actor.release.remote(self._origin, out)
            elif out:
                self._actor.append.remote(self._origin, out)
            self._acquired = False

    def pull(self) -> list[BudgetEntry]:
        if self._acquired:
            return []  # the lock is held: no grant of another shard can come in meanwhile
        sent = time.monotonic()
        now, records, self._cursor = self._ray.get(self._actor.acquire.remote(self._origin, self._cursor))
        received = time.monotonic()
        self._acquired = True
        self._sync = (now, sent, received)
        later = received - now  # an actor time, as the latest local time it may be
        return [BudgetEntry(key, kind, ref, at + later, tokens) for key, kind, ref, at, tokens in records]

    def push(self, entry: BudgetEntry) -> None:
        sync = self._sync
        if sync is None:
            sent = time.monotonic()
            sync = self._sync = (self._ray.get(self._actor.clock.remote()), sent, time.monotonic())
        now, sent, _ = sync
        self._out.append((entry.key, entry.kind, entry.ref, entry.at - sent + now, entry.tokens))

    def new_ref(self) -> int:
        self._count = (self._count + 1) & 0xFFFFFF
        return self._origin << 24 | self._count

    def close(self) -> None:
        pass


def connect(pool: str) -> ActorBudget:
    """The kernel's factory (``FACTORY_SPEC``): the run's ``BudgetLog``, joined from a shard."""
    spec = os.environ.get(ACTOR_ENV, "").split()
    if len(spec) != 3:
        raise ConfigError(f"pool {pool!r}: {ACTOR_ENV} must be '<address> <namespace> <actor>', got {spec!r}")
    address, namespace, name = spec
    import ray

    if not ray.is_initialized():
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        ray.init(address=address, namespace=namespace, logging_level=logging.WARNING, log_to_driver=False)
    try:
        actor = ray.get_actor(name, namespace=namespace)
    except ValueError:
        raise ConfigError(f"pool {pool!r}: the run's rate budget actor {name!r} is gone") from None
    return ActorBudget(actor)


def start_budget_log(run_id: str, keep_s: float) -> tuple[Any, str]:
    """On the driver: the run's ``BudgetLog`` actor (up and answering), and its name."""
    import ray

    name = f"pyattacker-budget-{run_id}"
    remote: Any = ray.remote(num_cpus=0, max_restarts=0)(BudgetLog)
    actor = remote.options(name=name, namespace=NAMESPACE).remote(keep_s)
    ray.get(actor.clock.remote())
    return actor, name
