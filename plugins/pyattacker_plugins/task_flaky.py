"""The ``flaky`` task factory: fails its first ``fail_times`` attempts, then succeeds.

``use: flaky`` with ``kwargs: {fail_times: 2, error: retryable, message: ...}``. Whether an
attempt fails depends only on its number (``ctx.attempt``), so a run is reproducible by
construction, and the task's own retry policy allows exactly ``fail_times + 1`` attempts with a
millisecond backoff: retries are easy to watch. The result is ``{"value": <input>, "attempts":
<the attempt that succeeded>, "resource": None}``. ``error`` is what a failing attempt raises:
``retryable``, ``rate_limit`` (``RetryableError`` of that class), ``timeout`` (``TimeoutError``),
``fatal`` (``FatalError``, never retried) or ``invalid`` (``ValueError``, not retried by default).
"""

from __future__ import annotations

from typing import Any

from pyattacker import ConfigError, FatalError, RetryableError, Retrying, TaskSpec, hookimpl
from pyattacker.flow.taskspec import factory_task
from pyattacker.plugins.hookspecs import Register

__all__ = ["ERRORS", "flaky"]

ERRORS = ("retryable", "rate_limit", "timeout", "fatal", "invalid")


def _failure(kind: str, message: str) -> Exception:
    if kind == "fatal":
        return FatalError(message)
    if kind == "timeout":
        return TimeoutError(message)
    if kind == "rate_limit":
        return RetryableError(message, error_class="rate_limit", retry_after=0.01)
    if kind == "invalid":
        return ValueError(message)
    return RetryableError(message)


@factory_task
def flaky(fail_times: int = 2, error: str = "retryable", message: str = "mock failure") -> TaskSpec:
    """Build the task; the arguments are checked here, so ``validate`` reports them."""
    if isinstance(fail_times, bool) or not isinstance(fail_times, int) or fail_times < 0:
        raise ConfigError(f"flaky: fail_times must be an integer >= 0, got {fail_times!r}")
    if error not in ERRORS:
        raise ConfigError(f"flaky: error must be one of {', '.join(ERRORS)}, got {error!r}")
    if not isinstance(message, str):
        raise ConfigError(f"flaky: message must be a string, got {message!r}")

    def attempt(value: Any, ctx: Any) -> dict[str, Any]:
        if ctx.attempt <= fail_times:
            raise _failure(error, message)
        return {"value": value, "attempts": ctx.attempt, "resource": None}

    attempt.__qualname__ = "flaky.attempt"
    policy = Retrying(max_attempts=fail_times + 1, base=0.001, cap=0.01)
    return TaskSpec(attempt, name="flaky", retry=policy)


@hookimpl
def pyattacker_tasks(register: Register) -> None:
    register("flaky", flaky)
