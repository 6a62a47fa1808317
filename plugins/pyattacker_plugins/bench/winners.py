"""Per-metric winners, never a composite score.

The rule, for one metric:

1. A neutral metric has no winner.
2. Only suited algorithms compete. For a metric marked ``needs_completion`` only those whose
   mean completion (jobs done / jobs started) is at least 90 % of the best suited mean compete:
   an algorithm that gives up on jobs would otherwise win the latency and rate metrics.
   An algorithm with an undefined value on any seed (a ratio over zero jobs, or a value that
   is not a finite number) does not compete.
3. Fewer than two competitors: no winner (the note names a lone survivor).
4. Every competitor's mean is 0: no winner (nothing to tell apart).
5. Otherwise the best mean wins, and so does every competitor within
   ``max(1 % of the best mean, 2 x the standard error of the paired per-seed differences)``
   of it. With one seed there is no standard error: only the best mean (and exact ties) wins.

The differences are paired by seed because every algorithm meets the same world per seed:
the seed-to-seed swings they share cancel, and what is left is the algorithm's own effect.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from .metrics import HIGHER, NEUTRAL, Metric

__all__ = ["ELIGIBLE_SHARE", "RELATIVE_TOLERANCE", "Summary", "Verdict", "eligibility", "judge", "summarize"]

#: share of the best mean completion an algorithm needs to compete on completion-bound metrics
ELIGIBLE_SHARE = 0.9
#: differences smaller than this share of the best mean are never told apart
RELATIVE_TOLERANCE = 0.01
#: standard errors of the paired differences that still count as a tie
SE_MULTIPLIER = 2.0


@dataclass(frozen=True)
class Summary:
    """Mean ± stdev (min/max) over the seeds where the value is defined."""

    mean: float | None
    stdev: float | None
    min: float | None
    max: float | None
    n: int


def _defined(value: float | None) -> bool:
    """A value the rule can rank: not None, not NaN, not infinite."""
    return value is not None and math.isfinite(value)


def summarize(values: Sequence[float | None]) -> Summary:
    defined = [float(v) for v in values if v is not None and _defined(v)]
    if not defined:
        return Summary(None, None, None, None, 0)
    stdev = statistics.stdev(defined) if len(defined) > 1 else 0.0
    return Summary(statistics.fmean(defined), stdev, min(defined), max(defined), len(defined))


@dataclass(frozen=True)
class Verdict:
    """The winners of one metric and why (``note`` is empty when the rule ran its full course)."""

    metric: str
    winners: tuple[str, ...]
    best: str | None
    competitors: tuple[str, ...]
    note: str


def eligibility(
    completion: Mapping[str, Sequence[float]], suited: Collection[str], share: float = ELIGIBLE_SHARE
) -> tuple[float | None, tuple[str, ...]]:
    """(baseline, eligible): the best mean completion among suited algorithms, and those within
    ``share`` of it. Unsuited algorithms never set the baseline."""
    means = {a: statistics.fmean(v) for a, v in completion.items() if a in suited and v}
    if not means:
        return None, ()
    baseline = max(means.values())
    return baseline, tuple(a for a, m in means.items() if m >= share * baseline)


def judge(
    metric: Metric,
    values: Mapping[str, Sequence[float | None]],
    *,
    suited: Collection[str],
    eligible: Collection[str],
) -> Verdict:
    """Apply the rule above to one metric. ``values`` maps an algorithm to its per-seed values
    (same seeds, same order for every algorithm); ``eligible`` is ``eligibility(...)[1]``."""
    name = metric.name
    if metric.direction == NEUTRAL:
        return Verdict(name, (), None, (), "neutral: describes the run")
    runners = [a for a in values if a in suited]
    pool = [a for a in runners if not metric.needs_completion or a in eligible]
    competitors = [a for a in pool if values[a] and all(_defined(v) for v in values[a])]
    if len(competitors) < 2:
        if len(runners) < 2:
            note = "a single algorithm is never crowned"
        elif competitors:
            note = f"only {competitors[0]} competes (the others complete too few jobs or lack a value)"
        else:
            note = "no algorithm competes"
        return Verdict(name, (), None, tuple(competitors), note)
    series = {a: [float(v) for v in values[a] if v is not None] for a in competitors}
    means = {a: statistics.fmean(s) for a, s in series.items()}
    if all(m == 0 for m in means.values()):
        return Verdict(name, (), None, tuple(competitors), "all zero")
    pick = max if metric.direction == HIGHER else min
    best = pick(competitors, key=lambda a: means[a])
    best_mean = means[best]
    seeds = len(series[best])
    if seeds < 2:
        winners = tuple(a for a in competitors if means[a] == best_mean)
        return Verdict(name, winners, best, tuple(competitors), "one seed: the best mean wins")
    winners_list = []
    for a in competitors:
        diffs = [x - y for x, y in zip(series[a], series[best], strict=True)]
        se = statistics.stdev(diffs) / math.sqrt(seeds)
        tolerance = max(RELATIVE_TOLERANCE * abs(best_mean), SE_MULTIPLIER * se)
        if abs(means[a] - best_mean) <= tolerance * (1 + 1e-9) + 1e-12:
            winners_list.append(a)
    return Verdict(name, tuple(winners_list), best, tuple(competitors), "")
