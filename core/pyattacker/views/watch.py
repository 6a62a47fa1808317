"""``watch``: a live terminal panel over a read-only connection to a (running) store.

It redraws in place only when stdout is a terminal; into a pipe or a file it prints plain
snapshots one after another (no escape codes), so ``watch --iterations 1 | tee`` is useful.
Stored text (error messages, metric names) is always printed as literal text, never as markup.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from rich.console import Console, Group
from rich.text import Text

from pyattacker.flow.visits import handoffs_label
from pyattacker.plugins.store_base import StoreBase
from pyattacker.views.common import choose_run, open_view
from pyattacker.views.live import LiveDigest, snapshot

__all__ = ["bar", "duration_text", "render_snapshot", "watch"]

BAR_WIDTH = 20
_STATE_STYLE = {
    "succeeded": "green",
    "failed": "red",
    "running": "cyan",
    "interrupted": "yellow",
    "pending": "dim",
}


def bar(done: float, total: float, width: int = BAR_WIDTH) -> str:
    """``[#####.....]`` with ``done/total`` filled (clamped, rounded)."""
    frac = 0.0 if total <= 0 else min(1.0, max(0.0, done / total))
    filled = round(frac * width)
    return "[" + "#" * filled + "." * (width - filled) + "]"


def duration_text(seconds: float) -> str:
    """``1h 02m``, ``12m 30s``, ``45s``: how long a long run has left, at a glance."""
    total = max(0, round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m"
    return f"{minutes}m {secs:02d}s" if minutes else f"{secs}s"


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".") if value != int(value) else str(int(value))
    return str(value)


def _short(text: Any, limit: int = 160) -> str:
    s = " ".join(str(text).split())
    return s if len(s) <= limit else s[: limit - 1] + "…"


def _wait_hints(hints: dict[str, int]) -> list[Text]:
    """Waits that may never end, said in words: a run waiting for a resource that no pool has
    looks like a hang otherwise (the events hold the pool, selector and task)."""
    lines = []
    unmatched = hints.get("acquire.waiting_unmatched")
    if unmatched:
        lines.append(
            Text(
                f"warning: {unmatched} lease request(s) matched no resource of their pool and waited for"
                " one to be published (events acquire.waiting_unmatched: check the selector)",
                style="yellow",
            )
        )
    deadlock = hints.get("acquire.suspected_deadlock")
    if deadlock:
        lines.append(
            Text(
                f"warning: {deadlock} suspected deadlock(s): a task waited for a lease while holding one"
                " from the same pool (events acquire.suspected_deadlock)",
                style="yellow",
            )
        )
    return lines


def _standing(dataset: dict[str, Any]) -> Text:
    """Every pipeline's current state across all runs of the store: where the dataset stands."""
    line = Text(f"dataset (all runs) total={dataset['total']}")
    for state, n in dataset["by_state"].items():
        line.append(f" {state}=", style=_STATE_STYLE.get(state, ""))
        line.append(str(n))
    return line


def render_snapshot(snap: dict[str, Any]) -> Group:
    """The panel as rich Text lines (literal text only: stored strings are not markup)."""
    lines: list[Text] = []
    head = Text("pyattacker watch  ", style="bold")
    if snap["run_selected"] == "all":
        head.append("all runs (aggregate)")
    elif snap["run_id"] is None:
        head.append("no run recorded yet")
    else:
        run = snap["run"] or {}
        head.append(
            f"run={snap['run_id']} ({'latest started' if snap['run_selected'] == 'latest' else 'chosen'})"
        )
        head.append(f" status={run.get('status')}")
        if run.get("label"):
            head.append(f" label={run['label']}")
    head.append(f" elapsed={_fmt(snap['elapsed_s'])}s in-flight={_fmt(snap['in_flight'])}")
    lines.append(head)

    p = snap["pipelines"]
    by_state = p.get("by_state", {})
    total = p.get("total", 0)
    finished = total - by_state.get("running", 0) - by_state.get("pending", 0)
    expected = snap.get("expected_pipelines")
    dataset = snap.get("dataset")
    label = "pipelines"
    if dataset is not None and (dataset["total"], dataset["by_state"]) != (total, by_state):
        label = f"pipelines ({'latest run' if snap['run_selected'] == 'latest' else 'this run'}'s share)"
    if expected:  # the whole dataset, not the rows so far; a resume's skipped ones count as done
        skipped = int((snap.get("counters") or {}).get("skipped") or 0)
        line = Text(f"{label} {bar(finished + skipped, max(total + skipped, expected))} total={total}")
    else:
        line = Text(f"{label} {bar(finished, total)} total={total}")
    for state, n in by_state.items():
        line.append(f" {state}=", style=_STATE_STYLE.get(state, ""))
        line.append(str(n))
    line.append(f"  parked={snap['parked']} waiting={_fmt(snap['waiting'])}")
    if snap.get("eta_s") is not None:
        line.append(f"  eta {duration_text(snap['eta_s'])} (of {snap['expected_pipelines']:,} expected)")
    age = snap.get("stats_age_s") or 0.0
    if age >= 2.0:  # a large run's counts are re-read less often (live.STATS_COST_RATIO)
        line.append(f"  (counts {age:.0f} s old)", style="dim")
    lines.append(line)
    if dataset is not None:
        lines.append(_standing(dataset))

    lat = snap["latency_ms"]
    tp = snap["throughput"]
    lines.append(
        Text(
            f"latency (per attempt, ms) p50={_fmt(lat['p50'])} p95={_fmt(lat['p95'])} p99={_fmt(lat['p99'])}"
            f" max={_fmt(lat['max'])} n={lat['count']}"
            f"   throughput {_fmt(tp['attempts_per_s_recent'])} attempts/s"
            f" (last 60 s), {_fmt(tp['pipelines_per_s'])} pipelines/s overall"
        )
    )
    for name, states in snap["tasks"].get("by_name", {}).items():
        lines.append(Text(f"  task {name}: " + " ".join(f"{s}={n}" for s, n in states.items())))

    lines.extend(_pool_lines(snap["pools"]))
    counters = snap["counters"]
    handoffs = handoffs_label(snap.get("handoffs_total", 0), snap.get("handoffs_by_operation"))
    attempts = Text(f"attempts total={snap['attempts_total']} events={snap['events_total']}{handoffs}")
    if counters.get("retries"):
        attempts.append(f" retries={counters['retries']}")
    lines.append(attempts)
    if counters.get("leases_leaked"):
        lines.append(Text(f"warning: {counters['leases_leaked']} lease(s) leaked", style="yellow"))
    lines.extend(_wait_hints(snap.get("wait_hints") or {}))

    metrics = snap["reported_metrics"]
    if metrics is not None and (metrics["run"] or metrics["pipelines"]):
        m = Text("metrics ")
        m.append(" ".join(f"{k}={_short(v, 40)}" for k, v in metrics["run"].items()))
        for name, s in metrics["pipelines"].items():
            m.append(f" {name}(latest of {s['pipelines']})={_short(s['latest'], 40)}")
        lines.append(m)

    errors = snap["recent_errors"][-3:]
    if errors:
        lines.append(Text("recent errors:", style="red"))
        for e in errors:
            data = e.get("data") or {}
            what = data.get("error_class") or ""
            msg = data.get("error") or ""
            lines.append(
                Text(
                    f"  {e['kind']} {e.get('pipeline_id') or '-'} {data.get('task') or ''}"
                    f" {what} {_short(msg)}"
                )
            )
    return Group(*lines)


def watch(
    location: str,
    *,
    run_id: str | None = None,
    interval: float = 1.0,
    iterations: int | None = None,
    clear: bool = True,
    console: Console | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Poll ``location`` and render; follows the latest started run unless ``run_id`` is given."""
    console = console or Console(file=sys.stdout)
    store: StoreBase = open_view(location)
    try:
        choice = choose_run(store, run_id)
        digest = LiveDigest(choice.run_id)
        live = console.is_terminal and sys.stdout.isatty() and clear
        shown = 0

        def frame() -> Group:
            nonlocal choice, digest
            if run_id is None:  # follow a run started after watch began
                latest = choose_run(store, None)
                if latest.run_id != choice.run_id:
                    choice, digest = latest, LiveDigest(latest.run_id)
            return render_snapshot(snapshot(store, choice, digest))

        if live:
            from rich.live import Live  # only when drawing on a terminal

            with Live(console=console, auto_refresh=False, transient=False) as panel:
                while True:
                    panel.update(frame(), refresh=True)
                    shown += 1
                    if iterations is not None and shown >= iterations:
                        break
                    sleep(interval)
        else:
            while True:
                if shown:
                    console.print()
                console.print(frame(), soft_wrap=True)
                shown += 1
                if iterations is not None and shown >= iterations:
                    break
                sleep(interval)
        return 0
    finally:
        store.close()


def _pool_lines(pools: list[dict[str, Any]]) -> list[Text]:
    """One line per pool (its slots and resources' states), then its rate budget if it has one."""
    lines = []
    for pool in pools:
        lines.append(
            Text(
                f"pool {pool['pool']} {bar(pool['active'], pool['capacity'])}"
                f" active={pool['active']}/{pool['capacity']}"
                f" ready={pool['ready']} degraded={pool['degraded']} dead={pool['dead']}"
                f" waiting={_fmt(pool['waiting'])}"
            )
        )
        lines.extend(_budget_lines(pool))
    return lines


def _budget_lines(pool: dict[str, Any]) -> list[Text]:
    """Per rate-limited resource: each limit's budget left and when it next refills; then how
    long the pool's leases waited for budget and for a slot."""
    budget = pool.get("budget") or []
    if not budget:
        return []
    lines = []
    for row in budget:
        parts = [
            f"{key} {_fmt(w.get('left'))}/{_fmt(w.get('limit'))} left"
            + (f" (refill {_fmt(w.get('refill_s'))}s)" if w.get("refill_s") else "")
            for key, w in row["limits"].items()
            if isinstance(w, dict)
        ]
        lines.append(Text(f"  {row['resource_id']}: " + ", ".join(parts)))
    lines.append(
        Text(
            f"  waited for budget {_fmt(pool.get('waited_budget_ms', 0.0) / 1000.0)}s,"
            f" for a slot {_fmt(pool.get('waited_slot_ms', 0.0) / 1000.0)}s"
        )
    )
    return lines
