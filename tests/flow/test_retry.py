"""Retry decisions and the error classifier are pure tables: every row pinned here."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest

from pyattacker import AcquireTimeout, ConfigError, FatalError, ResourceUnavailable, RetryableError, Retrying
from pyattacker.errors import error_class_of, retry_after_of
from pyattacker.flow.retry import backoff_delay, coerce_retry


class HTTPError(Exception):
    def __init__(self, status: int, headers: dict[str, str] | None = None) -> None:
        super().__init__(f"HTTP {status}")
        self.status_code = status
        self.response = type("R", (), {"status_code": status, "headers": headers or {}})()


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (RetryableError("x"), "retryable"),
        (RetryableError("x", error_class="rate_limit"), "rate_limit"),
        (FatalError("x"), "fatal"),
        (TimeoutError(), "timeout"),
        (TimeoutError(), "timeout"),
        (ConnectionResetError(), "connection"),
        (HTTPError(408), "timeout"),
        (HTTPError(504), "timeout"),
        (HTTPError(429), "rate_limit"),
        (HTTPError(425), "rate_limit"),
        (HTTPError(500), "upstream"),
        (HTTPError(503), "upstream"),
        (HTTPError(529), "upstream"),
        (HTTPError(599), "upstream"),
        (HTTPError(400), "fatal"),
        (HTTPError(404), "fatal"),
        (ValueError(), "invalid"),
        (KeyError("k"), "invalid"),
        (ZeroDivisionError(), "invalid"),
        (ResourceUnavailable("none"), "unknown"),
        (AcquireTimeout("slow"), "unknown"),
        (RuntimeError("?"), "unknown"),
        (asyncio.CancelledError(), "cancelled"),
    ],
)
def test_classifier_table(exc: BaseException, expected: str) -> None:
    assert error_class_of(exc) == expected


def test_status_attribute_variants_and_bools() -> None:
    class E(Exception):
        pass

    e = E()
    e.code = 429  # type: ignore[attr-defined]
    assert error_class_of(e) == "rate_limit"
    b = E()
    b.status = True  # type: ignore[attr-defined]
    assert error_class_of(b) == "unknown"


@pytest.mark.parametrize(
    ("value", "expected"),
    [("3", 3.0), ("0.5", 0.5), ("-1", None), ("soon", None), (None, None)],
)
def test_retry_after_from_header(value: Any, expected: float | None) -> None:
    exc = HTTPError(429, {"Retry-After": value} if value is not None else {})
    assert retry_after_of(exc) == expected


def test_decide_every_reason() -> None:
    pol = Retrying(max_attempts=3, base=1.0, factor=2.0, cap=10.0, jitter="none", max_total_s=5.0)
    ok = pol.decide(TimeoutError(), 1, elapsed=0.0)
    assert ok == {
        "retry": True,
        "reason": "retryable",
        "delay_s": 1.0,
        "error_class": "timeout",
        "attempt": 1,
        "max_attempts": 3,
        "retry_after": None,
    }
    assert pol.decide(ValueError(), 1)["reason"] == "policy_declined"
    assert pol.decide(TimeoutError(), 3)["reason"] == "attempts_exhausted"
    budget = pol.decide(TimeoutError(), 2, elapsed=4.0)
    assert budget["reason"] == "total_budget" and budget["retry"] is False and budget["delay_s"] == 0.0
    after = pol.decide(RetryableError("x", retry_after=2.5), 1)
    assert after["delay_s"] == 2.5 and after["retry_after"] == 2.5


def test_non_retryable_error_on_the_last_attempt_is_policy_declined() -> None:
    """Pinned order: whether to retry at all is asked before whether attempts remain."""
    pol = Retrying(max_attempts=2)
    assert pol.decide(ValueError("bad input"), 2)["reason"] == "policy_declined"
    assert pol.decide(TimeoutError(), 2)["reason"] == "attempts_exhausted"


def test_default_policy_makes_one_attempt() -> None:
    d = Retrying().decide(RetryableError("x"), 1)
    assert d["retry"] is False and d["reason"] == "attempts_exhausted"


def test_should_retry_rules() -> None:
    pol = Retrying(max_attempts=5, on=(KeyError,), retry_classified=False, retry_unknown=True)
    assert pol.should_retry(KeyError("x"))
    assert not pol.should_retry(TimeoutError())  # classified retry switched off
    assert pol.should_retry(RuntimeError())  # unknown allowed
    assert not pol.should_retry(FatalError())
    assert not pol.should_retry(asyncio.CancelledError())
    assert pol.should_retry(RetryableError())


def test_jitter_is_reproducible_with_a_seeded_rng() -> None:
    a = [backoff_delay(i, 0.5, 2, 30, "full", random.Random(7)) for i in range(1, 6)]
    b = [backoff_delay(i, 0.5, 2, 30, "full", random.Random(7)) for i in range(1, 6)]
    assert a == b
    assert backoff_delay(10, 0.5, 2, 30, "none") == 30
    eq = backoff_delay(1, 4, 2, 30, "equal", random.Random(1))
    assert 2 <= eq <= 4


@pytest.mark.parametrize(
    ("data", "match"),
    [
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": True}, "max_attempts"),
        ({"jitter": "some"}, "jitter"),
        ({"base": -1}, "base"),
        ({"on": ["NoSuchError"]}, "NoSuchError"),
        ({"max_attemps": 2}, "max_attemps"),
    ],
)
def test_bad_policies_name_the_field(data: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        coerce_retry(data)


def test_on_names_resolve() -> None:
    pol = coerce_retry({"max_attempts": 2, "on": ["RetryableError", "TimeoutError", "builtins:OSError"]})
    assert pol.on == (RetryableError, TimeoutError, OSError)
