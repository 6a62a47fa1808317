"""Rate limits of one resource, the way providers set them: requests and tokens per minute/day.

Each limit is a **sliding window log**, not a token bucket: a lease is granted only when the
grants (or tokens) of the last ``span`` seconds leave room for it. A token bucket of size N
refilled at N per minute lets 2N requests through in one 60 s window (a full bucket spent at
once, then a minute of refill); the log makes "at most N in *any* 60 s window" hold exactly,
which is what a provider counts. Memory is one entry per grant still inside the window.

A token charge is the request's estimate (``tokens=`` of the acquisition), recorded at grant
time; ``lease.report(usage={"tokens": n})`` settles it to the real count, in every token window
that still holds it. An estimate larger than the limit waits for an empty window (it could
never fit otherwise).

Nothing here runs in the background: windows are pruned when they are read, and the pool's
wait queue keeps one timer on the earliest time a waiting request fits (``ready_at``).

``PYATTACKER_LIMIT_WINDOW_SCALE`` (a positive number, default 1) multiplies every window's
length, read when a resource is built: tests and rehearsals run a "minute" of 3 s with 0.05.
"""

from __future__ import annotations

import difflib
import math
import os
from collections import deque
from collections.abc import Mapping
from typing import Any

from pyattacker.errors import ConfigError

__all__ = [
    "LIMIT_KEYS",
    "WINDOW_SCALE_ENV",
    "Charge",
    "Limits",
    "check_limits",
    "request_tokens",
    "window_scale",
]

#: limit key -> (what it counts, window in seconds)
LIMIT_KEYS: dict[str, tuple[str, float]] = {
    "rpm": ("requests", 60.0),
    "tpm": ("tokens", 60.0),
    "rpd": ("requests", 86400.0),
    "tpd": ("tokens", 86400.0),
}


#: multiplies every window's length (tests shorten a minute); see the module docstring
WINDOW_SCALE_ENV = "PYATTACKER_LIMIT_WINDOW_SCALE"


def window_scale() -> float:
    """``PYATTACKER_LIMIT_WINDOW_SCALE`` as a positive number (1.0 when unset)."""
    text = os.environ.get(WINDOW_SCALE_ENV)
    if not text:
        return 1.0
    try:
        scale = float(text)
    except ValueError:
        scale = math.nan
    if not 0 < scale < math.inf:
        raise ConfigError(f"{WINDOW_SCALE_ENV} must be a positive number, got {text!r}")
    return scale


def check_limits(limits: Any) -> dict[str, float]:
    """``limits`` as ``{key: positive finite number}``; a ConfigError names the bad key."""
    if not isinstance(limits, Mapping):
        raise ConfigError(f"resource limits must be a mapping like {{rpm: 500}}, got {type(limits).__name__}")
    checked: dict[str, float] = {}
    for key, value in limits.items():
        if key not in LIMIT_KEYS:
            close = difflib.get_close_matches(str(key), list(LIMIT_KEYS), n=1, cutoff=0.5)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"resource limits: unknown limit {key!r}{hint}; known: {', '.join(LIMIT_KEYS)}")
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not 0 < value < math.inf  # NaN fails too
        ):
            raise ConfigError(f"resource limits.{key} must be a positive number, got {value!r}")
        checked[key] = float(value)
    return checked


def request_tokens(selector: Mapping[str, Any] | None) -> float:
    """The token estimate of a request: the reserved ``tokens`` key of its selector (0 if none)."""
    if not selector:
        return 0.0
    value = selector.get("tokens")
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
        raise ValueError(f"tokens= must be a non-negative number (the request's estimate), got {value!r}")
    return float(value)


class Charge:
    """One lease's tokens in the token windows: the estimate, then what it really used."""

    __slots__ = ("at", "ref", "settled", "tokens")

    def __init__(self, at: float, tokens: float) -> None:
        self.at = at
        self.tokens = tokens
        self.settled = False
        #: its name in a shared budget (``shared_budget.py``), 0 when the budget is this process's
        self.ref = 0


class _Window:
    """At most ``limit`` units in any ``span`` seconds: the log of what is still inside."""

    __slots__ = ("key", "limit", "log", "span", "used")

    def __init__(self, key: str, limit: float, span: float) -> None:
        self.key = key
        self.limit = limit
        self.span = span
        self.log: deque[Charge] = deque()
        self.used = 0.0

    def prune(self, now: float) -> None:
        log = self.log
        span = self.span
        while log and log[0].at + span <= now:
            self.used -= log.popleft().tokens
        if not log:
            self.used = 0.0  # no float residue from settlements

    def fits(self, units: float) -> bool:
        return self.used + min(units, self.limit) <= self.limit

    def ready_at(self, now: float, units: float) -> float:
        """When ``units`` fit, as far as the entries already logged decide (``now`` if they do)."""
        excess = self.used + min(units, self.limit) - self.limit
        if excess <= 0:
            return now
        freed = 0.0
        for entry in self.log:
            freed += entry.tokens
            if freed >= excess:
                return entry.at + self.span
        return self.log[-1].at + self.span if self.log else now

    def view(self, now: float) -> dict[str, Any]:
        refill = self.log[0].at + self.span - now if self.log else 0.0
        return {
            "limit": self.limit,
            "used": round(self.used, 3),
            "left": round(max(0.0, self.limit - self.used), 3),
            "refill_s": round(max(0.0, refill), 3),
        }


class Limits:
    """The rate limits of one resource (``rpm``, ``tpm``, ``rpd``, ``tpd``), checked at grant."""

    __slots__ = ("_requests", "_tokens", "spec")

    def __init__(self, limits: Mapping[str, Any]) -> None:
        self.spec = check_limits(limits)
        self._requests: list[_Window] = []
        self._tokens: list[_Window] = []
        scale = window_scale()
        for key, limit in self.spec.items():
            unit, span = LIMIT_KEYS[key]
            (self._requests if unit == "requests" else self._tokens).append(_Window(key, limit, span * scale))

    def _windows(self) -> list[_Window]:
        return self._requests + self._tokens

    def prune(self, now: float) -> None:
        for w in self._requests:
            w.prune(now)
        for w in self._tokens:
            w.prune(now)

    def allows(self, now: float, tokens: float) -> bool:
        """Whether one more request of ``tokens`` estimated tokens fits in every window now."""
        self.prune(now)
        for w in self._requests:
            if not w.fits(1.0):
                return False
        return all(w.fits(tokens) for w in self._tokens)

    def ready_at(self, now: float, tokens: float) -> float:
        """The earliest time a request of ``tokens`` fits (``now`` when it does already)."""
        self.prune(now)
        at = now
        for w in self._requests:
            at = max(at, w.ready_at(now, 1.0))
        for w in self._tokens:
            at = max(at, w.ready_at(now, tokens))
        return at

    def charge(self, now: float, tokens: float) -> Charge | None:
        """Record a grant at ``now``; the token charge (for settling), or None without token limits."""
        for w in self._requests:
            w.log.append(Charge(now, 1.0))
            w.used += 1.0
        if not self._tokens:
            return None
        entry = Charge(now, tokens)
        for w in self._tokens:
            w.log.append(entry)
            w.used += tokens
        return entry

    def settle(self, charge: Charge, tokens: float, now: float) -> float:
        """Replace the estimate by the real count (the first report), then add to it (later
        reports), in every window still holding the charge; returns the change."""
        delta = tokens - charge.tokens if not charge.settled else tokens
        charge.settled = True
        if delta:
            self.adjust(charge, delta, now)
        return delta

    def adjust(self, charge: Charge, delta: float, now: float) -> None:
        """Change a charge by ``delta`` tokens in every window still holding it (a settlement,
        made here or, through a shared budget, by another process)."""
        charge.tokens += delta
        for w in self._tokens:
            if charge.at + w.span > now:
                w.used += delta

    @property
    def longest_span(self) -> float:
        """The longest window, in seconds (how long a grant may still count)."""
        return max(w.span for w in self._windows())

    def share_left(self, now: float, unit: str | None = None) -> float:
        """The smallest share of any window still free (1.0 = untouched), of ``unit`` windows
        (``"requests"``, ``"tokens"``) or of all; 1.0 when there is no such window."""
        self.prune(now)
        windows = self._windows() if unit is None else (self._tokens if unit == "tokens" else self._requests)
        share = 1.0
        for w in windows:
            share = min(share, max(0.0, w.limit - w.used) / w.limit)
        return share

    def view(self, now: float) -> dict[str, Any]:
        """Per limit: ``limit``, ``used``, ``left`` and ``refill_s`` (when the oldest entry leaves)."""
        self.prune(now)
        return {w.key: w.view(now) for w in self._windows()}

    def __repr__(self) -> str:
        return f"Limits({self.spec!r})"
