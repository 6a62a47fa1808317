"""The ``wait`` (the default) and ``immediate`` acquisition algorithms.

``wait`` blocks on the pool's targeted wake-ups, so a waiter costs nothing until a matching
slot is released; ``immediate`` is one synchronous try for callers that prefer failing fast.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pyattacker import Lease, Pool, hookimpl
from pyattacker.plugins.hookspecs import Register
from pyattacker.resources.algorithm import optional_number_param, try_free_slot, unavailable, wait_for_lease


class Wait:
    """Try; else wait for a matching release. ``timeout`` (the call's wins) → AcquireTimeout."""

    name = "wait"

    def __init__(self, timeout: float | None = None) -> None:
        self.timeout = optional_number_param("timeout", timeout)

    async def acquire(
        self, pool: Pool, *, ctx: Any, where: Any, timeout: float | None, selector: Mapping[str, Any]
    ) -> Lease:
        limit = timeout if timeout is not None else self.timeout
        return await wait_for_lease(pool, ctx=ctx, where=where, selector=selector, timeout=limit)

    #: the first step of ``acquire`` (a free slot needs no coroutine)
    try_now = staticmethod(try_free_slot)

    def fingerprint(self) -> dict[str, Any]:
        return {"name": self.name, "timeout": self.timeout}

    def __repr__(self) -> str:
        return f"Wait(timeout={self.timeout})"


class Immediate:
    """One synchronous try; nothing free → ResourceUnavailable."""

    name = "immediate"

    async def acquire(
        self, pool: Pool, *, ctx: Any, where: Any, timeout: float | None, selector: Mapping[str, Any]
    ) -> Lease:
        lease = try_free_slot(pool, ctx=ctx, where=where, selector=selector)
        if lease is None:
            raise unavailable(pool, selector, where)
        return lease

    #: the only step of ``acquire`` when a slot is free
    try_now = staticmethod(try_free_slot)

    def fingerprint(self) -> dict[str, Any]:
        return {"name": self.name}

    def __repr__(self) -> str:
        return "Immediate()"


@hookimpl
def pyattacker_algorithms(register: Register) -> None:
    register("wait", Wait)
    register("immediate", Immediate)
