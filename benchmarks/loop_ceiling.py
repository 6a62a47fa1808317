"""The event loop alone on the latency workload: what this machine allows before any runner.

C workers take pipelines from one shared iterator and await ``asyncio.sleep(L)`` once per task,
on the loop a run would build (``run.event_loop``: uvloop when installed). No runner, no
store, no lease: the gap between this and ``C / (tasks x L)`` is the loop's own timer
lateness and scheduling on this machine, which no runner can recover; the latency scenario
shows the product's and the floor runner's fractions beside it (docs/performance.md).

Prints ONE JSON line, like ``product_run.py`` and the baselines. Self-contained apart from
``pyattacker.engine.event_loop``; runs as ``python benchmarks/loop_ceiling.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import time
from collections.abc import Iterator
from typing import Any

from pyattacker import ConfigError
from pyattacker.engine.event_loop import loop_factory, resolve_event_loop


async def _drain(pipelines: Iterator[int], concurrency: int, tasks: int, latency_s: float) -> int:
    """Run every pipeline; returns the most pipelines that were in flight at once."""
    in_flight = peak = 0

    async def worker() -> None:
        nonlocal in_flight, peak
        for _ in pipelines:  # one iterator shared by every worker: the cheapest hand-out there is
            in_flight += 1
            peak = max(peak, in_flight)
            for _ in range(tasks):
                await asyncio.sleep(latency_s)
            in_flight -= 1

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return peak


def run(
    n: int, *, tasks: int = 3, concurrency: int = 64, latency_ms: float = 10.0, event_loop: str = "auto"
) -> dict[str, Any]:
    """Drain ``n`` pipelines and return the summary dict (not printed)."""
    kind = resolve_event_loop(event_loop)
    latency_s = latency_ms / 1000.0
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    with asyncio.Runner(loop_factory=loop_factory(kind)) as runner:
        peak = runner.run(_drain(iter(range(n)), concurrency, tasks, latency_s))
    elapsed = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    ideal = concurrency / (tasks * latency_s) if latency_s else None
    return {
        "runner": "loop",
        "n": n,
        "tasks": tasks,
        "concurrency": concurrency,
        "latency_ms": latency_ms,
        "event_loop": kind,
        "pipelines_run": n,
        "peak_in_flight": peak,
        "wall_s": elapsed,
        "cpu_s": cpu,
        "cpu_us_per_task": cpu / (n * tasks) * 1e6 if n else None,
        "pipelines_per_s": n / elapsed if n else None,
        "fraction_of_ideal": n / elapsed / ideal if n and ideal else None,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20_000, help="pipelines to run")
    ap.add_argument("--tasks", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--latency-ms", type=float, default=10.0, help="each task sleeps this long")
    ap.add_argument("--event-loop", default="auto", choices=("auto", "asyncio", "uvloop"))
    args = ap.parse_args(argv)
    if args.n < 1 or args.tasks < 1 or args.concurrency < 1 or args.latency_ms <= 0:
        ap.error("--n, --tasks and --concurrency must be at least 1, --latency-ms above 0")
    try:  # before any run: a loop that is not installed is a bad flag, not a traceback
        resolve_event_loop(args.event_loop)
    except ConfigError as exc:
        ap.error(f"--event-loop {args.event_loop}: {exc}")
    summary = run(
        args.n,
        tasks=args.tasks,
        concurrency=args.concurrency,
        latency_ms=args.latency_ms,
        event_loop=args.event_loop,
    )
    print(json.dumps(summary))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
