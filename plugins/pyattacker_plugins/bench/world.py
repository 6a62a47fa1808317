"""The simulated endpoints: what happens to a request once a lease has been taken.

The world never sees the algorithm. What it decides depends on the simulated time and on the
traffic it receives (capacity in use, its token bucket, which endpoint holds a job's session),
and its luck comes from keyed streams: the n-th request an endpoint *admits* draws from
``(seed, endpoint, n)``, whether a time window is a storm from ``(seed, endpoint, "storm",
window)``, and when an outage starts from ``(seed, "outage", index)``. Storms and outages
therefore come at the same moments whatever the client does, and every algorithm meets the
same sequence of latencies and errors at each endpoint.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

from .keys import keyed_rng
from .scenario import EndpointSpec, Outage, Scenario

__all__ = ["SimulatedHTTPError", "Endpoint", "Outcome", "World", "outage_windows"]

OK, REFUSED, ERROR, TIMEOUT, DOWN = "ok", "refused", "error", "timeout", "down"
#: outcomes of requests the endpoint never admitted (no server slot to free)
NOT_ADMITTED = (REFUSED, DOWN)


class SimulatedHTTPError(Exception):
    """An endpoint's error answer; ``error_class_of`` classifies it by ``status`` like a real one."""

    def __init__(self, status: int, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


@dataclass(slots=True)
class Outcome:
    """What a request will turn into, and after how long (simulated seconds)."""

    kind: str
    duration_s: float
    tokens: int = 0
    retry_after: float | None = None

    def error(self, endpoint: str, timeout_s: float) -> BaseException | None:
        """The exception the client sees, or None for a success."""
        if self.kind == OK:
            return None
        if self.kind == REFUSED:
            return SimulatedHTTPError(429, f"{endpoint}: 429 too many requests", self.retry_after)
        if self.kind == TIMEOUT:
            return TimeoutError(f"{endpoint}: no answer within {timeout_s:g}s")
        if self.kind == DOWN:
            return SimulatedHTTPError(503, f"{endpoint}: 503 service unavailable (outage)")
        return SimulatedHTTPError(503, f"{endpoint}: 503 service unavailable")


class Endpoint:
    """One endpoint's state: requests in service, its token bucket and its counters."""

    __slots__ = (
        "_last",
        "_outages",
        "_sessions",
        "_storms",
        "_tighten",
        "_tokens",
        "_window",
        "_window_tokens",
        "admitted",
        "down",
        "errors",
        "in_flight",
        "ok",
        "overloaded",
        "refused",
        "requests",
        "scenario",
        "seed",
        "spec",
        "timeouts",
        "tokens_used",
        "warm",
    )

    def __init__(
        self,
        spec: EndpointSpec,
        scenario: Scenario,
        seed: int,
        outages: tuple[tuple[float, float], ...] = (),
        sessions: dict[int, str] | None = None,
    ) -> None:
        self.spec = spec
        self.scenario = scenario
        self.seed = seed
        #: (start, end) of every outage that hits this endpoint, in simulated seconds
        self._outages = outages
        #: job -> the endpoint that admitted its latest request (shared by the world's
        #: endpoints); None when the world keeps no per-job state
        self._sessions = sessions
        self.down = 0
        self.warm = 0
        self.in_flight = 0
        self._tokens = spec.burst
        self._tighten = 1.0
        self._last = 0.0
        self._storms: dict[int, bool] = {}
        #: [time, tokens] of each request admitted in the last 60 s (the provider's rpm/tpm)
        self._window: deque[list[float]] = deque()
        self._window_tokens = 0.0
        self.requests = 0
        self.admitted = 0
        self.ok = 0
        self.refused = 0
        self.overloaded = 0
        self.errors = 0
        self.timeouts = 0
        self.tokens_used = 0

    # -- time-dependent properties ----------------------------------------------------------
    def capacity_factor(self, now: float) -> float:
        """Share of peak capacity at ``now``: a cosine between trough and peak (peak at phase 0)."""
        s = self.scenario
        angle = 2.0 * math.pi * (now + self.spec.phase_s) / s.cycle_period_s
        return s.cycle_trough + (s.cycle_peak - s.cycle_trough) * (1.0 + math.cos(angle)) / 2.0

    def in_storm(self, now: float) -> bool:
        """Whether ``now`` falls in a storm window; decided by (seed, endpoint, window) alone."""
        window = int(now // self.scenario.storm_window_s)
        storm = self._storms.get(window)
        if storm is None:
            rng = keyed_rng(self.seed, self.spec.name, "storm", window)
            storm = self._storms[window] = rng.random() < self.spec.storm_p
        return storm

    def in_outage(self, now: float) -> bool:
        """Whether ``now`` falls in one of this endpoint's outages."""
        return any(start <= now < end for start, end in self._outages)

    def _refill(self, now: float, factor: float) -> float:
        """Advance the bucket and the tightening to ``now``; the current refill rate."""
        dt = max(0.0, now - self._last)
        self._last = now
        s = self.scenario
        if self._tighten < 1.0:
            self._tighten = 1.0 - (1.0 - self._tighten) * math.exp(-dt / s.tighten_recover_s)
        rate = self.spec.rate_per_s * factor * self._tighten
        self._tokens = min(self.spec.burst, self._tokens + rate * dt)
        return rate

    def _over_limits(self, now: float) -> float | None:
        """None when the provider's rpm/tpm admit one more request now, else the Retry-After:
        exactly when enough admitted requests leave the 60 s window."""
        spec = self.spec
        window = self._window
        while window and window[0][0] + 60.0 <= now:
            self._window_tokens -= window.popleft()[1]
        at: float | None = None
        if spec.rpm is not None and len(window) >= spec.rpm:
            at = window[int(len(window) - spec.rpm)][0] + 60.0
        if spec.tpm is not None and self._window_tokens >= spec.tpm:
            freed = 0.0
            for t, tokens in window:
                freed += tokens
                if self._window_tokens - freed < spec.tpm:
                    at = max(at or t + 60.0, t + 60.0)
                    break
        return None if at is None else at - now

    def _tighten_on_refusal(self) -> None:
        s = self.scenario
        self._tighten = max(s.tighten_floor, self._tighten * s.tighten_factor)

    # -- a request ---------------------------------------------------------------------------
    def send(self, now: float, session: int | None = None) -> Outcome:
        """Admit or refuse a request of job ``session`` arriving at ``now``; an admitted one
        stays in service until ``finish()``.

        During an outage every request fails at once (a 503, not admitted). Otherwise the token
        bucket refills at ``rate_per_s`` x the capacity cycle x the tightening, and an empty
        bucket refuses (429; the refusal tightens the refill further). An admitted request is
        served at its drawn latency (times the scenario's ``warm_factor`` when this endpoint
        admitted the job's previous request) while the endpoint is within
        ``server_concurrency`` x the cycle; beyond that it queues, and the latency grows with
        the overload.
        """
        spec = self.spec
        s = self.scenario
        self.requests += 1
        if self._outages and self.in_outage(now):
            self.down += 1
            return Outcome(DOWN, s.refusal_latency_s)
        limited = spec.rpm is not None or spec.tpm is not None
        if limited:
            after = self._over_limits(now)
            if after is not None:
                self.refused += 1
                return Outcome(REFUSED, s.refusal_latency_s, retry_after=round(after, 3))
        factor = self.capacity_factor(now)
        rate = self._refill(now, factor)
        if self._tokens < 1.0:
            self.refused += 1
            self._tighten_on_refusal()
            after = None
            if spec.retry_after_hint:
                after = round(max(0.1, (1.0 - self._tokens) / rate), 1) if rate > 0 else 1.0
            return Outcome(REFUSED, s.refusal_latency_s, retry_after=after)
        self._tokens -= 1.0
        self.in_flight += 1
        n = self.admitted
        self.admitted += 1
        rng = keyed_rng(self.seed, spec.name, n)
        u_error = rng.random()
        latency = spec.latency_median_s * math.exp(spec.latency_sigma * rng.gauss(0.0, 1.0))
        if rng.random() < spec.tail_p:
            latency *= spec.tail_factor
        sessions = self._sessions
        if sessions is not None and session is not None:
            if sessions.get(session) == spec.name:  # this endpoint holds the job's session
                self.warm += 1
                latency *= s.warm_factor
            sessions[session] = spec.name
        limit = spec.server_concurrency * factor
        if self.in_flight > limit:  # over its current capacity the endpoint queues: slower answers
            self.overloaded += 1
            latency *= self.in_flight / limit
        low, high = spec.tokens_per_request
        tokens = low + int((high - low) * rng.random())
        p_error = spec.storm_error_rate if self.in_storm(now) else spec.error_rate
        if limited:  # the window counts the request, and the tokens of one that succeeds
            spent = 0 if u_error < p_error or latency > s.request_timeout_s else tokens
            self._window.append([now, float(spent)])
            self._window_tokens += spent
        if u_error < p_error:
            self.errors += 1
            return Outcome(ERROR, min(latency * 0.25, s.request_timeout_s))
        if latency > s.request_timeout_s:
            self.timeouts += 1
            return Outcome(TIMEOUT, s.request_timeout_s)
        self.ok += 1
        self.tokens_used += tokens
        return Outcome(OK, latency, tokens)

    def finish(self) -> None:
        """An admitted request has been answered (or abandoned): its server slot is free."""
        self.in_flight -= 1

    def admission(self) -> dict[str, Any]:
        """Per-endpoint counters for the report (``down`` and ``warm`` only in the worlds that
        have outages or a session cache)."""
        counts: dict[str, Any] = {
            "requests": self.requests,
            "admitted": self.admitted,
            "ok": self.ok,
            "refused": self.refused,
            "overloaded": self.overloaded,
            "errors": self.errors,
            "timeouts": self.timeouts,
            "tokens_used": self.tokens_used,
            "quota_tokens": self.spec.quota_tokens,
        }
        if self.scenario.outages:
            counts["down"] = self.down
        if self._sessions is not None:
            counts["warm"] = self.warm
        return counts


def outage_windows(scenario: Scenario, seed: int) -> list[tuple[Outage, float, float]]:
    """Every outage of ``scenario`` with its (start, end) for ``seed``."""
    windows = []
    for index, outage in enumerate(scenario.outages):
        start = outage.start_s
        if outage.start_jitter_s:
            start += outage.start_jitter_s * keyed_rng(seed, "outage", index).random()
        windows.append((outage, start, start + outage.duration_s))
    return windows


class World:
    """Every endpoint of a scenario for one seed."""

    def __init__(self, scenario: Scenario, seed: int) -> None:
        self.scenario = scenario
        windows = outage_windows(scenario, seed)
        #: job -> the endpoint holding its session, when the world has a session cache
        self.sessions: dict[int, str] | None = {} if scenario.warm_factor != 1.0 else None
        self.endpoints = {
            spec.name: Endpoint(
                spec,
                scenario,
                seed,
                tuple((start, end) for outage, start, end in windows if spec.name in outage.endpoints),
                self.sessions,
            )
            for spec in scenario.endpoints
        }

    def endpoint(self, name: str) -> Endpoint:
        return self.endpoints[name]
