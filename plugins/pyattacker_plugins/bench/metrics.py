"""The reported metrics: what each one means, its unit, which way is better, and its value.

Directions: ``higher`` or ``lower`` is better, ``neutral`` describes the run without being
better either way (no winner). ``needs_completion`` marks metrics an algorithm could improve by
doing less: only algorithms that complete nearly as many of their started jobs as the best one
are compared on them (see ``winners``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from .driver import RunResult

__all__ = ["COMPLETION", "DIRECTIONS", "METRICS", "Metric", "compute", "metric"]

HIGHER, LOWER, NEUTRAL = "higher", "lower", "neutral"
DIRECTIONS = (HIGHER, LOWER, NEUTRAL)


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    direction: str
    needs_completion: bool
    meaning: str


METRICS: tuple[Metric, ...] = (
    Metric("completion", "ratio", HIGHER, False, "jobs done / jobs started: the eligibility gate"),
    Metric("jobs_done", "jobs", HIGHER, False, "jobs whose every step succeeded"),
    Metric("jobs_failed", "jobs", NEUTRAL, False, "started jobs abandoned when a step's retry was declined"),
    Metric("jobs_unstarted", "jobs", NEUTRAL, False, "jobs not started before the horizon"),
    Metric("makespan_s", "s", NEUTRAL, False, "simulated time until the last started job ended"),
    Metric("throughput_rps", "jobs/s", HIGHER, True, "jobs done per simulated second of the makespan"),
    Metric("requests", "requests", NEUTRAL, False, "requests sent to endpoints, refused ones included"),
    Metric(
        "attempts_per_completed_job",
        "attempts/job",
        LOWER,
        True,
        "step attempts of every started job / jobs done (the minimum is the step count)",
    ),
    Metric(
        "attempt_inflation",
        "ratio",
        LOWER,
        True,
        "requests / (jobs done x steps x calls): 1.0 means no request was wasted",
    ),
    Metric("failed_attempt_rate", "ratio", LOWER, True, "failed step attempts / step attempts"),
    Metric("retry_rate", "ratio", LOWER, True, "started steps retried at least once / started steps"),
    Metric("refusal_rate", "ratio", LOWER, True, "requests refused by a rate limit (429) / requests"),
    Metric("error_rate", "ratio", LOWER, True, "requests that failed otherwise (5xx, timeout) / requests"),
    Metric(
        "rate_limit_use",
        "ratio",
        HIGHER,
        True,
        "requests answered ok per minute of the makespan / the endpoints' combined rpm (rpm-limited worlds)",
    ),
    Metric("successful_job_latency_p50_ms", "ms", LOWER, True, "median start-to-end time of jobs done"),
    Metric("successful_job_latency_p95_ms", "ms", LOWER, True, "95th percentile of the same"),
    Metric("successful_job_latency_p99_ms", "ms", LOWER, True, "99th percentile of the same"),
    Metric("acquire_wait_p50_ms", "ms", LOWER, True, "median time from asking for a lease to holding it"),
    Metric("acquire_wait_p99_ms", "ms", LOWER, True, "99th percentile of the same"),
    Metric("request_latency_p50_ms", "ms", NEUTRAL, False, "median time from sending a request to its reply"),
    Metric(
        "utilization",
        "ratio",
        HIGHER,
        True,
        "slot-seconds spent on successful requests / (pool slots x makespan)",
    ),
    Metric(
        "endpoint_spread",
        "ratio",
        NEUTRAL,
        False,
        "how evenly requests spread over the endpoints (normalised entropy: 0 one endpoint, 1 even)",
    ),
    Metric(
        "leases_active_at_end", "leases", LOWER, False, "leases still held when the run ended (must be 0)"
    ),
    Metric("wall_s", "s", NEUTRAL, False, "real seconds the run took (not deterministic)"),
)
COMPLETION = "completion"
_BY_NAME = {m.name: m for m in METRICS}


def metric(name: str) -> Metric:
    return _BY_NAME[name]


def _percentile_ms(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile, in milliseconds; None when there is nothing to rank."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(len(ordered) * q / 100.0))
    return ordered[rank - 1] * 1000.0


def _ratio(part: float, whole: float) -> float | None:
    return part / whole if whole else None


def _spread(counts: Sequence[int]) -> float | None:
    total = sum(counts)
    if not total or len(counts) < 2:
        return None
    entropy = -sum(c / total * math.log(c / total) for c in counts if c)
    return entropy / math.log(len(counts))


def _rate_limit_use(r: RunResult) -> float | None:
    if not r.combined_rpm or not r.makespan_s:
        return None
    ok = r.requests - r.refused - r.errored
    return ok / (r.makespan_s / 60.0) / r.combined_rpm


def compute(r: RunResult) -> dict[str, float | None]:
    """Every metric of one run (None where it is undefined, e.g. a ratio over zero jobs done)."""
    ideal_requests = r.jobs_done * r.steps * r.calls
    return {
        "completion": r.jobs_done / r.jobs_started if r.jobs_started else 0.0,
        "jobs_done": float(r.jobs_done),
        "jobs_failed": float(r.jobs_failed),
        "jobs_unstarted": float(r.jobs_total - r.jobs_started),
        "makespan_s": r.makespan_s,
        "throughput_rps": r.jobs_done / r.makespan_s if r.makespan_s else 0.0,
        "requests": float(r.requests),
        "attempts_per_completed_job": _ratio(r.step_attempts, r.jobs_done),
        "attempt_inflation": _ratio(r.requests, ideal_requests),
        "failed_attempt_rate": _ratio(r.failed_attempts, r.step_attempts),
        "retry_rate": _ratio(r.steps_retried, r.steps_started),
        "refusal_rate": _ratio(r.refused, r.requests),
        "error_rate": _ratio(r.errored, r.requests),
        "rate_limit_use": _rate_limit_use(r),
        "successful_job_latency_p50_ms": _percentile_ms(r.job_latencies_s, 50),
        "successful_job_latency_p95_ms": _percentile_ms(r.job_latencies_s, 95),
        "successful_job_latency_p99_ms": _percentile_ms(r.job_latencies_s, 99),
        "acquire_wait_p50_ms": _percentile_ms(r.acquire_waits_s, 50),
        "acquire_wait_p99_ms": _percentile_ms(r.acquire_waits_s, 99),
        "request_latency_p50_ms": _percentile_ms(r.request_latencies_s, 50),
        "utilization": _ratio(r.ok_busy_s, r.slots * r.makespan_s),
        "endpoint_spread": _spread(list(r.requests_by_endpoint.values())),
        "leases_active_at_end": float(r.leases_active_at_end),
        "wall_s": r.wall_s,
    }
