"""Live aggregates of one run, shared by ``watch`` and the ``serve`` plugin.

Attempts and events are append-only with increasing ids, so a ``LiveDigest`` reads only the
rows added since its last update (keyset pages) and folds them into latency, throughput,
recent-error and parked-pipeline figures. Latency is measured per attempt of the selected run,
so a resumed run is not charged for time spent in an earlier run. ``snapshot`` adds the cheap
per-refresh reads (stats, run row, resources, run-level metrics); curves are never read here.
"""

from __future__ import annotations

import bisect
import threading
import time
from array import array
from collections import Counter, deque
from collections.abc import Callable, Mapping
from typing import Any

from pyattacker.model import EventRecord, ResourceRecord
from pyattacker.plugins.store_base import StoreBase
from pyattacker.plugins.store_stats import percentile
from pyattacker.views.common import RunChoice, to_plain
from pyattacker.views.standing import dataset_standing

__all__ = ["HISTOGRAM_EDGES_MS", "LiveDigest", "pool_summary", "snapshot"]

#: upper edges (ms) of the latency histogram buckets; the last bucket is open-ended
HISTOGRAM_EDGES_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000, 60000, 300000)
_PAGE = 1000
_ERROR_KINDS = frozenset(
    {"task.failed", "pipeline.failed", "pipeline.terminal_repair_failed", "runner.worker_crashed"}
)
#: pool events that say why leases may never come; the live views count them per run
WAIT_HINT_KINDS = ("acquire.waiting_unmatched", "acquire.suspected_deadlock")
_UNPARK_KINDS = frozenset(
    {
        "task.succeeded",
        "task.failed",
        "pipeline.succeeded",
        "pipeline.failed",
        "pipeline.interrupted",
        "pipeline.canceled",
        "pipeline.deferred_interrupted",
    }
)
#: per-pipeline metric summaries are re-read at most this often (they scale with pipelines)
METRIC_SUMMARY_EVERY_S = 10.0
#: The store statistics (state counts, duration percentiles, task counts) are aggregates over the
#: whole run, dearer the larger the store, and a live view refreshes every 1-2 s, on the machine
#: that runs the pipelines. Statistics that cost less than ``STATS_ALWAYS_S`` are read
#: at every refresh; dearer ones are reused until ``STATS_COST_RATIO`` times their cost has passed,
#: so a viewer spends at most about a tenth of a core on them whatever the store's size.
STATS_ALWAYS_S = 0.05
STATS_COST_RATIO = 10.0


def _event_row(ev: EventRecord) -> dict[str, Any]:
    return {
        "event_id": ev.event_id,
        "ts": ev.ts,
        "kind": ev.kind,
        "scope": ev.scope,
        "run_id": ev.run_id,
        "pipeline_id": ev.pipeline_id,
        "pool": ev.pool,
        "resource_id": ev.resource_id,
        "data": to_plain(ev.data),
    }


class LiveDigest:
    """Incremental view of the attempts and events of one run (``run_id=None``: every run)."""

    def __init__(
        self, run_id: str | None, recent: int = 40, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.run_id = run_id
        self.lock = threading.Lock()
        self._clock = clock
        self._stats_lock = threading.Lock()  # one reader computes them; concurrent requests wait
        self._stats: dict[str, Any] | None = None
        self._stats_read_at = 0.0
        self._stats_next = 0.0
        self._dataset: dict[str, Any] | None = None
        self._dataset_at = 0.0
        self._attempt_after: tuple[Any, ...] | None = None
        self._event_after: tuple[Any, ...] | None = None
        self._durations = array("d")
        self._sorted = True
        self.histogram = [0] * (len(HISTOGRAM_EDGES_MS) + 1)
        #: second (int, wall clock) -> [attempts ended, succeeded, failed]
        self.seconds: dict[int, list[int]] = {}
        self.attempts_seen = 0
        self.last_ended: float | None = None
        # ids of the last ``recent`` events and error events; only those are read whole (a live
        # view catching up with a large run counts every event, and shows a few)
        self._recent_errors: deque[int] = deque(maxlen=recent)
        self._recent_events: deque[int] = deque(maxlen=recent)
        self._records: dict[int, EventRecord] = {}
        self.parked: dict[str, float] = {}
        self.event_counts: dict[str, int] = {}
        self._metric_summary: dict[str, Any] = {}
        self._metric_summary_at = 0.0

    # -- reading ---------------------------------------------------------------------------------
    def update(self, store: StoreBase) -> None:
        """Fold every attempt and event written since the last update."""
        with self.lock:
            while True:
                after = self._attempt_after
                # four columns instead of whole rows (SQLite decodes no JSON for them)
                rows = store.attempt_summaries(self.run_id, None if after is None else after[0], _PAGE)
                self._add_attempts(rows)
                if rows:
                    self._attempt_after = (rows[-1][0],)
                if len(rows) < _PAGE:
                    break
            while True:
                after = self._event_after
                erows = store.event_summaries(self.run_id, None if after is None else after[0], _PAGE)
                self._add_events(erows)
                if erows:
                    self._event_after = (erows[-1][0],)
                if len(erows) < _PAGE:
                    break
            self._read_recent(store)

    def _read_recent(self, store: StoreBase) -> None:
        """Whole rows of the recent events and errors not read yet; forget the others."""
        shown = set(self._recent_events)
        shown.update(self._recent_errors)
        self._records = {i: ev for i, ev in self._records.items() if i in shown}
        recent = list(self._recent_events)
        first = next((n for n, i in enumerate(recent) if i not in self._records), None)
        if first is not None:  # the run's latest events: one page from the first one missing
            after = (recent[first] - 1,)
            for ev in store.page("events", run_id=self.run_id, after=after, limit=len(recent) - first):
                if ev.event_id in shown:
                    self._records[ev.event_id] = ev
        for event_id in self._recent_errors:
            if event_id not in self._records:
                for ev in store.page("events", run_id=self.run_id, after=(event_id - 1,), limit=1):
                    if ev.event_id == event_id:
                        self._records[event_id] = ev

    def _add_attempts(self, rows: list[tuple[int, float, float, str]]) -> None:
        """Fold ``(attempt_id, duration_ms, ended_at, outcome)`` rows (a page at a time).

        Column-wise: a live view that catches up with a large run folds every attempt of it
        (600,000 for 200,000 pipelines), so a page costs a few calls, not a few per row."""
        if not rows:
            return
        _ids, durations, ended, outcomes = zip(*rows, strict=True)
        page = array("d", map(float, durations))
        ordered = sorted(page)
        known = self._durations
        if self._sorted and (ordered != page.tolist() or (known and ordered[0] < known[-1])):
            self._sorted = False
        known.extend(page)
        histogram, below = self.histogram, 0
        for bucket, edge in enumerate(HISTOGRAM_EDGES_MS):  # bucket i: edge[i-1] < ms <= edge[i]
            upto = bisect.bisect_right(ordered, edge)
            histogram[bucket] += upto - below
            below = upto
        histogram[-1] += len(ordered) - below
        failed = Counter(int(t) for t, outcome in zip(ended, outcomes, strict=True) if outcome != "succeeded")
        seconds = self.seconds
        for sec, n in Counter(map(int, ended)).items():
            slot = seconds.get(sec)
            if slot is None:
                slot = seconds[sec] = [0, 0, 0]
            bad = failed.get(sec, 0)
            slot[0] += n
            slot[1] += n - bad
            slot[2] += bad
        last = max(ended)
        if self.last_ended is None or last > self.last_ended:
            self.last_ended = last
        self.attempts_seen += len(rows)

    def _add_events(self, rows: list[tuple[int, str, str | None, float]]) -> None:
        """Fold ``(event_id, kind, pipeline_id, ts)`` rows (a page at a time)."""
        counts, parked = self.event_counts, self.parked
        recent, errors = self._recent_events.append, self._recent_errors.append
        for event_id, kind, pid, ts in rows:
            counts[kind] = counts.get(kind, 0) + 1
            recent(event_id)
            if kind in _ERROR_KINDS:
                errors(event_id)
            if pid is None:
                continue
            if kind == "pipeline.deferred":
                parked[pid] = ts
            elif kind in _UNPARK_KINDS and pid in parked and parked[pid] <= ts:
                del parked[pid]

    def _rows(self, ids: deque[int]) -> list[dict[str, Any]]:
        with self.lock:
            return [_event_row(self._records[i]) for i in ids if i in self._records]

    @property
    def recent_events(self) -> list[dict[str, Any]]:
        """The last events read (oldest first), as rows."""
        return self._rows(self._recent_events)

    @property
    def recent_errors(self) -> list[dict[str, Any]]:
        """The last error events read (oldest first), as rows."""
        return self._rows(self._recent_errors)

    def store_stats(self, store: StoreBase, *, ended_at: float | None = None) -> tuple[dict[str, Any], float]:
        """The run's store statistics and the wall time they were read at (see ``STATS_ALWAYS_S``).

        ``ended_at``: when the run ended (None while it runs). Statistics read before then are
        read again whatever they cost: an ended run's counts are final, and a view that shows
        it ended must not show counts from while it ran (once; later reads keep them)."""
        with self._stats_lock:
            start = self._clock()
            if (
                self._stats is None
                or start >= self._stats_next
                or (ended_at is not None and self._stats_read_at < ended_at)
            ):
                read_at = time.time()
                self._stats = store.stats(self.run_id)
                cost = self._clock() - start
                self._stats_read_at = read_at
                self._stats_next = start + cost * STATS_COST_RATIO if cost >= STATS_ALWAYS_S else start
            return self._stats, self._stats_read_at

    def dataset(self, store: StoreBase, stats_read_at: float) -> dict[str, Any] | None:
        """Where the dataset stands (``dataset_standing``; None for the every-run view, whose
        counts are that already). A run's rows are only the share it owns; this is read again
        whenever the run's statistics were (``stats_read_at``), at their cadence."""
        if self.run_id is None:
            return None
        with self._stats_lock:
            if self._dataset is None or self._dataset_at != stats_read_at:
                self._dataset = dataset_standing(store)
                self._dataset_at = stats_read_at
            return self._dataset

    # -- figures -----------------------------------------------------------------------------
    def latency(self) -> dict[str, Any]:
        """Percentiles of attempt durations (ms) of the run, same rule as the store stats."""
        with self.lock:
            if not self._sorted:
                self._durations = array("d", sorted(self._durations))
                self._sorted = True
            d = self._durations
            return {
                "count": len(d),
                "p50": percentile(d, 0.5),
                "p95": percentile(d, 0.95),
                "p99": percentile(d, 0.99),
                "max": percentile(d, 1.0),
            }

    def histogram_rows(self) -> list[dict[str, Any]]:
        with self.lock:
            edges: list[float | None] = [*HISTOGRAM_EDGES_MS, None]
            return [{"le_ms": e, "count": c} for e, c in zip(edges, self.histogram, strict=True)]

    def throughput(self, points: int = 60) -> list[dict[str, Any]]:
        """Attempts ended per second, resampled into at most ``points`` buckets over the run."""
        with self.lock:
            if not self.seconds:
                return []
            first, last = min(self.seconds), max(self.seconds)
            width = max(1, -(-(last - first + 1) // points))
            out: dict[int, list[int]] = {}
            for sec, (n, ok, bad) in self.seconds.items():
                b = first + ((sec - first) // width) * width
                slot = out.setdefault(b, [0, 0, 0])
                slot[0] += n
                slot[1] += ok
                slot[2] += bad
            rows = []
            for b in range(first, last + 1, width):
                n, ok, bad = out.get(b, (0, 0, 0))
                rows.append(
                    {
                        "t": b,
                        "width_s": width,
                        "attempts": n,
                        "succeeded": ok,
                        "failed": bad,
                        "per_s": round(n / width, 3),
                    }
                )
            return rows

    def recent_rate(self, window_s: float = 60.0) -> float:
        """Attempts per second over the last ``window_s`` seconds of attempt activity."""
        with self.lock:
            if self.last_ended is None:
                return 0.0
            start = int(self.last_ended - window_s) + 1
            n = sum(v[0] for s, v in self.seconds.items() if s >= start)
            return round(n / window_s, 3)

    def metric_summary(self, store: StoreBase, now: float) -> dict[str, Any]:
        """Per-name count and latest value of pipeline-scope metrics (refreshed every few seconds)."""
        if self.run_id is None:
            return {}
        if now - self._metric_summary_at >= METRIC_SUMMARY_EVERY_S or not self._metric_summary_at:
            summary: dict[str, dict[str, Any]] = {}
            for m in store.metrics(run_id=self.run_id):
                if m.pipeline_id == "":
                    continue
                s = summary.setdefault(m.name, {"pipelines": 0, "latest": None, "updated_at": 0.0})
                s["pipelines"] += 1
                if m.updated_at >= s["updated_at"]:
                    s["latest"], s["updated_at"] = m.value, m.updated_at
            self._metric_summary, self._metric_summary_at = summary, now
        return self._metric_summary


def pool_summary(rows: list[ResourceRecord]) -> list[dict[str, Any]]:
    """Per pool: active/capacity and how many resources are ready, degraded, dead, revoked;
    how long leases waited for rate budget and for a slot; and per rate-limited resource its
    budget (``budget``: ``{resource_id, limits: {rpm: {limit, used, left, refill_s}}}``)."""
    latest: dict[tuple[str, str], ResourceRecord] = {}
    for r in rows:  # across runs keep the newest row of each resource
        old = latest.get((r.pool, r.resource_id))
        if old is None or r.updated_at >= old.updated_at:
            latest[(r.pool, r.resource_id)] = r
    pools: dict[str, dict[str, Any]] = {}
    for (pool, _), r in sorted(latest.items()):
        p = pools.setdefault(
            pool,
            {
                "pool": pool,
                "active": 0,
                "capacity": 0,
                "ready": 0,
                "degraded": 0,
                "dead": 0,
                "revoked": 0,
                "waiting": None,
                "resources": 0,
                "updated_at": 0.0,
                "waited_budget_ms": 0.0,
                "waited_slot_ms": 0.0,
                "budget": [],
            },
        )
        p["resources"] += 1
        p["updated_at"] = max(p["updated_at"], r.updated_at)
        stats = r.stats or {}
        active, capacity = stats.get("active"), stats.get("capacity")
        if isinstance(active, int) and not isinstance(active, bool):
            p["active"] += active
        if isinstance(capacity, int) and not isinstance(capacity, bool) and r.state != "revoked":
            p["capacity"] += capacity
        if r.state in ("ready", "degraded", "dead", "revoked"):
            p[r.state] += 1
        for key in ("waited_budget_ms", "waited_slot_ms"):
            waited = stats.get(key)
            if isinstance(waited, int | float) and not isinstance(waited, bool):
                p[key] += waited
        limits = stats.get("limits")
        if isinstance(limits, dict) and limits:
            p["budget"].append({"resource_id": r.resource_id, "limits": limits})
        waiting = stats.get("waiting")
        if isinstance(waiting, int) and not isinstance(waiting, bool):
            p["waiting"] = (p["waiting"] or 0) + waiting
    return list(pools.values())


def _eta(run: Any, counters: Mapping[str, Any], now: float) -> tuple[int | None, float | None]:
    """``(expected pipelines, seconds left)`` of a running run whose caller said how many
    pipelines it has (``run_async(expected=)``; the CLI does when the source can count them).

    Left = expected minus the pipelines finished or skipped, at the rate this run finished them;
    both from the run row's counters, which are as of its last heartbeat, so the time since
    then is taken off. Unknown (None) before the first pipeline finishes, for a run that is not
    running, and for ``all``.
    """
    expected = (run.config or {}).get("expected_pipelines") if run is not None else None
    if not isinstance(expected, int) or isinstance(expected, bool) or expected < 0:
        return None, None
    done = counters.get("pipelines_done")
    if run.status != "running" or not isinstance(done, int) or done <= 0:
        return expected, None
    at = run.heartbeat_at or now
    spent = at - run.started_at
    if spent <= 0:
        return expected, None
    left = max(0, expected - done - int(counters.get("skipped") or 0))
    return expected, round(max(0.0, left * spent / done - max(0.0, now - at)), 1)


def snapshot(
    store: StoreBase, choice: RunChoice, digest: LiveDigest, *, now: float | None = None
) -> dict[str, Any]:
    """Everything a live view shows, read now (the digest is updated first)."""
    now = time.time() if now is None else now
    digest.update(store)
    run = store.get_run(choice.run_id) if choice.run_id is not None else None
    ended = run.ended_at if run is not None and run.status != "running" else None
    stats, stats_read_at = digest.store_stats(store, ended_at=ended)
    counters: dict[str, Any] = dict(run.stats) if run is not None else {}
    elapsed: float | None = None
    if run is not None:
        elapsed = round(max(0.0, (now if ended is None else ended) - run.started_at), 3)
    in_flight = None
    if "pipelines_admitted" in counters and "pipelines_done" in counters:
        in_flight = max(0, int(counters["pipelines_admitted"]) - int(counters["pipelines_done"]))
    pools = pool_summary(store.resources(run_id=choice.run_id))
    waiting_known = [p["waiting"] for p in pools if p["waiting"] is not None]
    waiting = counters.get("waiting_pipelines", sum(waiting_known) if waiting_known else None)
    done = stats["pipelines"]["total"] - sum(
        stats["pipelines"]["by_state"].get(s, 0) for s in ("running", "pending")
    )
    expected, eta = _eta(run, counters, now)
    run_metrics: dict[str, Any] = {}
    if choice.run_id is not None:
        run_metrics = {m.name: m.value for m in store.metrics(run_id=choice.run_id, pipeline_id="")}
    return {
        "run_id": choice.run_id,
        "run_selected": choice.how,
        "run": None
        if run is None
        else {
            "status": run.status,
            "label": run.label,
            "started_at": run.started_at,
            "ended_at": run.ended_at,
            "heartbeat_at": run.heartbeat_at,
            "stop_reason": run.stop_reason,
        },
        "elapsed_s": elapsed,
        "stats_age_s": round(max(0.0, now - stats_read_at), 3),
        "pipelines": stats["pipelines"],
        "dataset": digest.dataset(store, stats_read_at),
        "tasks": stats.get("tasks", {}),
        "attempts_total": stats.get("attempts_total", 0),
        "events_total": stats.get("events_total", 0),
        "handoffs_total": stats.get("handoffs_total", 0),
        # the split by operation is asked only of a run that has handoffs (one small query)
        "handoffs_by_operation": store.handoffs_by_operation(choice.run_id)
        if stats.get("handoffs_total")
        else {},
        "counters": counters,
        "in_flight": in_flight,
        "parked": len(digest.parked),
        "waiting": waiting,
        "latency_ms": digest.latency(),
        "throughput": {
            "attempts_per_s_recent": digest.recent_rate(),
            "pipelines_per_s": round(done / elapsed, 3) if elapsed else None,
        },
        "expected_pipelines": expected,
        "eta_s": eta,
        "pools": pools,
        "wait_hints": {k: digest.event_counts[k] for k in WAIT_HINT_KINDS if digest.event_counts.get(k)},
        "recent_errors": digest.recent_errors[-10:],
        "reported_metrics": None
        if choice.run_id is None
        else {
            "run": run_metrics,
            "pipelines": digest.metric_summary(store, now),
        },
    }
