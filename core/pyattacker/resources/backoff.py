"""Exponential backoff with jitter: the delay shared by the ``backoff`` algorithm and the retry
policy, so that waiting for a lease and waiting to retry grow the same way."""

from __future__ import annotations

import math
import random

from pyattacker.errors import ConfigError

__all__ = ["JITTERS", "backoff_delay"]

#: Jitter modes: ``full`` draws U(0, raw), ``equal`` raw/2 + U(0, raw/2), ``none`` is raw itself.
JITTERS = ("full", "equal", "none")


def backoff_delay(
    attempt: int,
    base: float,
    factor: float,
    cap: float,
    jitter: str = "full",
    rng: random.Random | None = None,
) -> float:
    """``min(cap, base * factor**(attempt-1))`` jittered: full U(0,raw), equal raw/2+U(0,raw/2), none."""
    try:
        raw = base * factor ** max(0, attempt - 1)
    except OverflowError:
        raw = math.inf
    raw = max(0.0, min(cap, raw))
    if jitter == "none":
        return raw
    draw = (rng or random).random()
    if jitter == "full":
        return raw * draw
    if jitter == "equal":
        return raw / 2 + (raw / 2) * draw
    raise ConfigError(f"jitter must be one of {', '.join(JITTERS)}, got {jitter!r}")
