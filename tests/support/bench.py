"""Scenarios and algorithms the bench tests register (importable from a subprocess too)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from pyattacker import Retrying
from pyattacker.plugins.manager import get_plugins
from pyattacker.plugins.registry import Provided, Registry
from pyattacker_plugins.bench.scenario import EndpointSpec, Scenario, register_scenario

DEAD = "test_all_dead"


def registry_with(**extra: Any) -> Registry:
    """The built-in algorithms plus test ones, as a third-party plugin would add them."""
    registry = Registry("algorithms")
    builtins = get_plugins().algorithms
    for name in builtins.names():
        provided = builtins.provider(name)
        assert provided is not None
        registry.add(provided)
    for name, factory in extra.items():
        registry.add(Provided("algorithms", name, factory, "test-plugin", False))
    return registry


def dead_scenario() -> Scenario:
    """One endpoint that fails every request and is dead after its first failure."""
    return Scenario(
        name=DEAD,
        description="every endpoint fails every request and is dead after one failure",
        endpoints=(
            EndpointSpec(
                name="gone",
                slots=2,
                server_concurrency=2,
                rate_per_s=100.0,
                burst=100.0,
                latency_median_s=0.1,
                latency_sigma=0.0,
                error_rate=1.0,
                degrade_after=1,
                dead_after=1,
            ),
        ),
        jobs=50,
        concurrency=4,
        horizon_s=60.0,
        retry=Retrying(max_attempts=3, base=0.1, cap=1.0),
    )


def register_dead() -> None:
    register_scenario(dead_scenario(), replace=True)


class Spin:
    """Never returns and never sleeps: a loop spinning on ready callbacks (simulated time stops)."""

    name = "spin"

    async def acquire(
        self, pool: Any, *, ctx: Any, where: Any, timeout: float | None, selector: Mapping[str, Any]
    ) -> Any:
        while True:
            await asyncio.sleep(0)

    def fingerprint(self) -> dict[str, Any]:
        return {"name": self.name}


class Poll:
    """Never returns but sleeps on the pool's clock: simulated time runs, nothing finishes."""

    name = "poll"

    async def acquire(
        self, pool: Any, *, ctx: Any, where: Any, timeout: float | None, selector: Mapping[str, Any]
    ) -> Any:
        while True:
            await pool.clock.sleep(1.0)

    def fingerprint(self) -> dict[str, Any]:
        return {"name": self.name}


class Block:
    """Blocks the event loop: a synchronous ``time.sleep`` inside the async method (a bug the
    wall budget must still stop)."""

    name = "block"
    #: seconds each call blocks for
    seconds = 3600.0
    #: calls whose sleep ran to its end (an interrupted one raised out of it)
    completed = 0

    async def acquire(
        self, pool: Any, *, ctx: Any, where: Any, timeout: float | None, selector: Mapping[str, Any]
    ) -> Any:
        time.sleep(self.seconds)
        type(self).completed += 1

    def fingerprint(self) -> dict[str, Any]:
        return {"name": self.name}
