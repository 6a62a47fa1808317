"""The ``simulate_llm`` task factory: a fake model call for demos, tests and dry runs.

``use: simulate_llm`` (or ``pyattacker.tasks:simulate_llm``) with ``kwargs: {latency_ms,
fail_rate, tokens, error, resource, seed}``. Failures are drawn from ``ctx.rng``, which is seeded
by (pipeline, task, attempt): a replay fails and succeeds exactly the same way. With a
``resource`` the task leases it and reports every call, so a flaky endpoint really degrades
(a resource's ``options`` may override ``latency_ms`` and ``fail_rate``, which is how the demo
gives one endpoint a worse personality).
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from typing import Any

import msgspec

from pyattacker import ConfigError, FatalError, RetryableError, TaskSpec, hookimpl
from pyattacker.flow.taskspec import factory_task
from pyattacker.plugins.hookspecs import Register

__all__ = ["ERRORS", "simulate_llm"]

#: ``error=`` values: what a simulated failure raises.
ERRORS = ("retryable", "fatal", "timeout")


def _number(name: str, value: Any, *, upper: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise ConfigError(f"simulate_llm: {name} must be a number >= 0, got {value!r}")
    if upper is not None and value > upper:
        raise ConfigError(f"simulate_llm: {name} must be <= {upper}, got {value!r}")
    return float(value)


def _failure(kind: str, message: str) -> Exception:
    if kind == "fatal":
        return FatalError(message)
    if kind == "timeout":
        return TimeoutError(message)
    return RetryableError(message)


def _answer(value: Any, seed: int) -> str:
    """Deterministic in (input, seed) only, so every successful attempt answers the same."""
    try:
        data = msgspec.json.encode(value)
    except (TypeError, msgspec.EncodeError):
        data = repr(value).encode()
    return "sim-" + hashlib.blake2b(data + b"|" + str(seed).encode(), digest_size=6).hexdigest()


@factory_task
def simulate_llm(
    latency_ms: float = 5,
    fail_rate: float = 0.0,
    tokens: int = 64,
    error: str = "retryable",
    resource: str | None = None,
    seed: int = 0,
) -> TaskSpec:
    """Build the simulated call; arguments are checked here, so ``validate`` reports them."""
    latency = _number("latency_ms", latency_ms)
    rate = _number("fail_rate", fail_rate, upper=1.0)
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise ConfigError(f"simulate_llm: tokens must be an integer >= 0, got {tokens!r}")
    if error not in ERRORS:
        raise ConfigError(f"simulate_llm: error must be one of {', '.join(ERRORS)}, got {error!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError(f"simulate_llm: seed must be an integer, got {seed!r}")

    async def call(value: Any, ctx: Any) -> dict[str, Any]:
        rng = random.Random(ctx.rng.getrandbits(64) ^ seed)
        if ctx.task.resource is None:
            await asyncio.sleep(latency / 1000.0)
            if rng.random() < rate:
                raise _failure(error, f"simulated {error} failure")
            return {"input": value, "answer": _answer(value, seed), "tokens": tokens}
        async with ctx.acquire() as lease:
            options = lease.options or {}
            my_latency = float(options.get("latency_ms", latency))
            my_rate = float(options.get("fail_rate", rate))
            await asyncio.sleep(my_latency / 1000.0)
            if rng.random() < my_rate:
                exc = _failure(error, f"simulated {error} failure on {lease.resource.id}")
                lease.report(ok=False, latency_ms=my_latency, error=exc)
                raise exc
            lease.report(ok=True, latency_ms=my_latency, usage={"tokens": tokens})
            return {"input": value, "answer": _answer(value, seed), "tokens": tokens}

    call.__qualname__ = "simulate_llm.call"
    return TaskSpec(call, name="simulate_llm", resource=resource)


@hookimpl
def pyattacker_tasks(register: Register) -> None:
    register("simulate_llm", simulate_llm)
