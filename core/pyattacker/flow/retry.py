"""Retry policy and the recorded decision.

``Retrying`` says *whether* and *when* a failed attempt is tried again; ``decide`` returns the
decision record persisted with every attempt, so every retry (and every refusal) can be read
back later. Jitter comes from the attempt's seeded RNG, so a replay decides the same way.
"""

from __future__ import annotations

import asyncio
import builtins
import importlib
import random
from collections.abc import Mapping
from typing import Any

import msgspec

from pyattacker import errors
from pyattacker.errors import (
    RETRYABLE_CLASSES,
    ConfigError,
    FatalError,
    RetryableError,
    error_class_of,
    retry_after_of,
)
from pyattacker.resources.backoff import JITTERS, backoff_delay

__all__ = ["JITTERS", "Retrying", "backoff_delay", "coerce_retry", "resolve_exception_name"]

_NEVER = (asyncio.CancelledError, KeyboardInterrupt, SystemExit, GeneratorExit)


class Retrying(msgspec.Struct, frozen=True, kw_only=True):
    """Task-level retry policy. The default makes one attempt and never retries."""

    max_attempts: int = 1
    on: tuple[Any, ...] = ()
    retry_classified: bool = True
    retry_unknown: bool = False
    base: float = 0.5
    factor: float = 2.0
    cap: float = 30.0
    jitter: str = "full"
    max_total_s: float | None = None

    def __post_init__(self) -> None:
        if (
            not isinstance(self.max_attempts, int)
            or isinstance(self.max_attempts, bool)
            or self.max_attempts < 1
        ):
            raise ConfigError(f"retry.max_attempts: must be an integer >= 1, got {self.max_attempts!r}")
        if self.jitter not in JITTERS:
            raise ConfigError(f"retry.jitter: must be one of {', '.join(JITTERS)}, got {self.jitter!r}")
        for name in ("base", "factor", "cap"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ConfigError(f"retry.{name}: must be a non-negative number, got {value!r}")
        for item in self.on:
            if not (isinstance(item, type) and issubclass(item, BaseException)):
                raise ConfigError(f"retry.on: {item!r} is not an exception class")

    def should_retry(self, exc: BaseException) -> bool:
        if isinstance(exc, (*_NEVER, FatalError)):
            return False
        if isinstance(exc, RetryableError):
            return True
        if self.on and isinstance(exc, self.on):
            return True
        cls = error_class_of(exc)
        if self.retry_classified and cls in RETRYABLE_CLASSES:
            return True
        return self.retry_unknown and cls == "unknown"

    def delay(
        self, attempt: int, rng: random.Random | None = None, exc: BaseException | None = None
    ) -> float:
        if exc is not None:
            after = retry_after_of(exc)
            if after is not None:
                return after
        return backoff_delay(attempt, self.base, self.factor, self.cap, self.jitter, rng)

    def decide(
        self, exc: BaseException, attempts_used: int, rng: random.Random | None = None, elapsed: float = 0.0
    ) -> dict[str, Any]:
        """The decision record persisted with the attempt (keys are fixed; docs/retries.md)."""
        cls = error_class_of(exc)
        after = retry_after_of(exc)
        record: dict[str, Any] = {
            "retry": False,
            "reason": "policy_declined",
            "delay_s": 0.0,
            "error_class": cls,
            "attempt": attempts_used,
            "max_attempts": self.max_attempts,
            "retry_after": after,
        }
        if not self.should_retry(exc):
            return record
        if attempts_used >= self.max_attempts:
            record["reason"] = "attempts_exhausted"
            return record
        delay = (
            after
            if after is not None
            else backoff_delay(attempts_used, self.base, self.factor, self.cap, self.jitter, rng)
        )
        if self.max_total_s is not None and elapsed + delay > self.max_total_s:
            record["reason"] = "total_budget"
            return record
        record.update(retry=True, reason="retryable", delay_s=float(delay))
        return record

    def fingerprint(self) -> dict[str, Any]:
        return {
            "max_attempts": self.max_attempts,
            "on": sorted(f"{e.__module__}.{e.__qualname__}" for e in self.on),
            "retry_classified": self.retry_classified,
            "retry_unknown": self.retry_unknown,
            "base": self.base,
            "factor": self.factor,
            "cap": self.cap,
            "jitter": self.jitter,
            "max_total_s": self.max_total_s,
        }


#: Names accepted in ``retry.on`` of a config file, besides importable ``module:Class`` paths.
_BUILTIN_EXCEPTIONS: dict[str, type[BaseException]] = {
    name: obj
    for name, obj in vars(builtins).items()
    if isinstance(obj, type) and issubclass(obj, BaseException)
}


def resolve_exception_name(name: str) -> type[BaseException]:
    """``RetryableError``, a builtin like ``TimeoutError``, or ``module:Class``."""
    if name in errors.__all__ and isinstance(getattr(errors, name), type):
        found: type[BaseException] = getattr(errors, name)
        return found
    if name in _BUILTIN_EXCEPTIONS:
        return _BUILTIN_EXCEPTIONS[name]
    if ":" in name:
        module, _, attr = name.partition(":")
        try:
            obj = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise ConfigError(f"cannot import exception {name!r}: {exc}") from None
        except (Exception, SystemExit) as exc:  # the module itself failed while importing
            raise ConfigError(
                f"cannot import exception {name!r}: importing {module!r} failed: {type(exc).__name__}: {exc}"
            ) from None
        if isinstance(obj, type) and issubclass(obj, BaseException):
            return obj
    raise ConfigError(f"unknown exception name {name!r}")


def coerce_retry(value: Retrying | Mapping[str, Any] | None) -> Retrying:
    """Accept a policy, a mapping (``on`` may hold names), or None (the default policy)."""
    if value is None:
        return Retrying()
    if isinstance(value, Retrying):
        return value
    if isinstance(value, Mapping):
        data = dict(value)
        on = data.get("on", ())
        if isinstance(on, str | type):
            on = (on,)
        data["on"] = tuple(resolve_exception_name(x) if isinstance(x, str) else x for x in on)
        unknown = set(data) - set(Retrying.__struct_fields__)
        if unknown:
            raise ConfigError(f"retry: unknown field(s) {', '.join(sorted(unknown))}")
        try:
            return Retrying(**data)
        except TypeError as exc:
            raise ConfigError(f"retry: {exc}") from None
    raise ConfigError(f"retry: expected a Retrying or a mapping, got {type(value).__name__}")
