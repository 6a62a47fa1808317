"""Shared helpers for the pool and algorithm tests (kept out of conftest.py on purpose)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Coroutine, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest

from pyattacker import Lease, Pool, VirtualClock
from pyattacker.plugins.manager import Plugins, reset_plugins
from pyattacker.plugins.registry import Registry
from pyattacker.resources.pool import ResourceEvent
from pyattacker_plugins import (
    algo_backoff,
    algo_failover,
    algo_least_busy,
    algo_quota_aware,
    algo_sticky,
    algo_wait,
)

T = TypeVar("T")

ALGO_MODULES = {
    "algo-wait": algo_wait,
    "algo-backoff": algo_backoff,
    "algo-failover": algo_failover,
    "algo-least-busy": algo_least_busy,
    "algo-sticky": algo_sticky,
    "algo-quota-aware": algo_quota_aware,
}


def algo_plugins() -> Plugins:
    """Just the algorithm plugins, registered by hand (independent of other plugins' state)."""
    plugins = Plugins()
    for name, module in ALGO_MODULES.items():
        row = plugins.add_plugin(module, name, builtin=True, dist="pyattacker")
        assert row.status == "active", row.error
    return plugins


@pytest.fixture(name="algorithms")
def algorithms_fixture() -> Iterator[Registry]:
    """An algorithms registry, also installed process-wide so lazy resolution finds it."""
    plugins = algo_plugins()
    reset_plugins(plugins)
    try:
        yield plugins.algorithms
    finally:
        reset_plugins(None)


@pytest.fixture(name="clock")
def clock_fixture() -> VirtualClock:
    return VirtualClock()


def run(clock: VirtualClock, factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine on a virtual-time loop: sleeps and cooldowns take no real time."""
    with asyncio.Runner(loop_factory=clock.new_event_loop) as runner:
        return runner.run(factory())


@dataclass
class Ctx:
    """A minimal AcquireContext for tests."""

    rng: random.Random | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    pools: Mapping[str, Pool] = field(default_factory=dict)
    task_name: str | None = "t"
    pipeline_id: str | None = "p1"
    held_leases: list[Lease] = field(default_factory=list)
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def emit(self, kind: str, **data: Any) -> None:
        self.events.append((kind, data))


class Recorder:
    """A pool listener that keeps every event."""

    def __init__(self) -> None:
        self.events: list[ResourceEvent] = []

    def __call__(self, event: ResourceEvent) -> None:
        self.events.append(event)

    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]

    def of(self, kind: str) -> list[ResourceEvent]:
        return [e for e in self.events if e.kind == kind]
