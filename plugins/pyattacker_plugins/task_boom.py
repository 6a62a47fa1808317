"""The ``boom`` task factory: always fails, the way ``error`` says (``use: boom``).

For tests, tutorials and trying out retry policies and failure reports: ``kwargs: {message,
error}`` where ``error`` is ``retryable`` (``RetryableError``, class ``upstream``: retried when
the task's policy allows more than one attempt), ``fatal`` (``FatalError``: never retried) or
``invalid`` (``ValueError``: an unclassified error, not retried by default).
"""

from __future__ import annotations

from typing import Any

from pyattacker import ConfigError, FatalError, RetryableError, TaskSpec, hookimpl
from pyattacker.flow.taskspec import factory_task
from pyattacker.plugins.hookspecs import Register

__all__ = ["ERRORS", "boom"]

#: ``error=`` values and what each raises
ERRORS = ("retryable", "fatal", "invalid")


def failure(kind: str, message: str) -> Exception:
    """The exception ``boom`` raises for ``error=kind``."""
    if kind == "fatal":
        return FatalError(message)
    if kind == "invalid":
        return ValueError(message)
    return RetryableError(message, error_class="upstream")


@factory_task
def boom(message: str = "boom", error: str = "retryable") -> TaskSpec:
    """A task that raises on every attempt; the arguments are checked here (``validate``)."""
    if not isinstance(message, str):
        raise ConfigError(f"boom: message must be a string, got {message!r}")
    if error not in ERRORS:
        raise ConfigError(f"boom: error must be one of {', '.join(ERRORS)}, got {error!r}")

    def explode(value: Any) -> Any:
        raise failure(error, message)

    explode.__qualname__ = "boom.explode"
    return TaskSpec(explode, name="boom")


@hookimpl
def pyattacker_tasks(register: Register) -> None:
    register("boom", boom)
