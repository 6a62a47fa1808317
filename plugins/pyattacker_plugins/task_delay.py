"""The ``delay`` task factory: waits ``seconds``, then returns its input (``use: delay``).

Handy to watch concurrency, throughput and a stop in the middle of a run. The wait is on the
run's clock (``ctx.clock``), so a run on a virtual clock does not really wait.
"""

from __future__ import annotations

import math
from typing import Any

from pyattacker import ConfigError, TaskSpec, hookimpl
from pyattacker.flow.taskspec import factory_task
from pyattacker.plugins.hookspecs import Register

__all__ = ["delay"]


@factory_task
def delay(seconds: float = 1.0) -> TaskSpec:
    """Build the task; ``seconds`` must be a finite number >= 0 (checked by ``validate``)."""
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not math.isfinite(seconds)
        or seconds < 0
    ):
        raise ConfigError(f"delay: seconds must be a finite number >= 0, got {seconds!r}")
    wait = float(seconds)

    async def pause(value: Any, ctx: Any) -> Any:
        await ctx.clock.sleep(wait)
        return value

    pause.__qualname__ = "delay.pause"
    return TaskSpec(pause, name="delay")


@hookimpl
def pyattacker_tasks(register: Register) -> None:
    register("delay", delay)
