"""The ``leaky`` task factory: takes a lease and never gives it back, on purpose.

``use: leaky`` with ``kwargs: {pool: apis}`` (or the entry's ``resource:``). It exists to show
and test the lease guarantee: the lease is reclaimed when the attempt ends, the attempt and the
pool record a leaked lease (``leases_leaked`` in the summary), and with ``--strict-leases`` the
task fails with ``LeaseLeakError`` instead. The result is ``{"leaked": <resource id>}``.
"""

from __future__ import annotations

from typing import Any

from pyattacker import ConfigError, TaskSpec, hookimpl
from pyattacker.flow.taskspec import factory_task
from pyattacker.plugins.hookspecs import Register

__all__ = ["leaky"]


@factory_task
def leaky(pool: str | None = None) -> TaskSpec:
    """Build the task; ``pool`` (a pool name, or None for the task's ``resource``)."""
    if pool is not None and (not isinstance(pool, str) or not pool):
        raise ConfigError(f"leaky: pool must be a pool name (a non-empty string), got {pool!r}")

    async def leak(value: Any, ctx: Any) -> dict[str, Any]:
        lease = await ctx.acquire_lease(pool)  # never released: the point of this task
        return {"leaked": lease.resource.id}

    leak.__qualname__ = "leaky.leak"
    return TaskSpec(leak, name="leaky", resource=pool)


@hookimpl
def pyattacker_tasks(register: Register) -> None:
    register("leaky", leaky)
