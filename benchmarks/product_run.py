"""One product run as a fresh process: the SDK ``Runner`` on the overhead workload.

Prints ONE JSON line (like ``baseline_peer.py`` / ``floor_runner.py``) so the harness can compare
the product with the baselines round by round. Everything goes through the real product path:
an on-disk SQLite store with the default (full) journal, one pool whose capacity never binds,
``async with ctx.acquire()`` in every task, events and attempts recorded, default settings.
Self-contained on purpose (no import from the ``benchmarks`` package): it runs as
``python benchmarks/product_run.py`` or ``python -m benchmarks.product_run``.
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import json
import math
import os
import random
import resource
import sys
import time
from collections.abc import Iterator
from typing import Any

from pyattacker import Handoff, Pool, Resource, Runner, pipeline, task
from pyattacker.flow.chain import PipelineTemplate

#: per-task latency in seconds; 0 means "await asyncio.sleep(0) once" (the cheapest real suspension)
_LATENCY_S = 0.0
#: log-normal latencies, one per (pipeline index, task): set by ``run(..., sigma=...)``; empty = fixed L
_LATENCIES: list[float] = []
_TASKS = 3


def lognormal_latencies(n: int, tasks: int, median_s: float, sigma: float, seed: int = 51) -> list[float]:
    """``n * tasks`` log-normal latencies (median ``median_s``), the same in every process."""
    rng = random.Random(seed)
    mu = math.log(median_s)
    return [rng.lognormvariate(mu, sigma) for _ in range(n * tasks)]


def ideal_makespan(latencies: list[float], n: int, tasks: int, concurrency: int) -> float:
    """A zero-overhead runner's makespan: C slots take pipelines in seed order, each runs its
    tasks back to back (list scheduling, what a runner with no cost of its own achieves)."""
    slots = [0.0] * min(concurrency, n)
    for i in range(n):
        start = heapq.heappop(slots)
        heapq.heappush(slots, start + sum(latencies[i * tasks : (i + 1) * tasks]))
    return max(slots) if slots else 0.0


async def _work(value: Any, ctx: Any) -> Any:
    """The benchmark task: lease from the pool, suspend once (or sleep L), return a new string."""
    async with ctx.acquire():
        if _LATENCIES:  # "in-<i>|t0|t1": pipeline i, task ctx.seq
            await asyncio.sleep(_LATENCIES[int(value.split("|", 1)[0][3:]) * _TASKS + ctx.seq])
        else:
            await asyncio.sleep(_LATENCY_S)
    return f"{value}|t{ctx.seq}"


async def _jump(value: Any, ctx: Any) -> Any:
    """The handoff workload's first task: as ``_work``, then hands its value to the last task."""
    async with ctx.acquire():
        await asyncio.sleep(_LATENCY_S)
    return Handoff.to(_LAST, f"{value}|t{ctx.seq}")


async def _back(value: Any, ctx: Any) -> Any:
    """The rewind workload's second task: as ``_work``; on its first visit it sends its value
    back to ``t0``, so each pipeline runs t0, t1, t0, t1 with one rewind."""
    async with ctx.acquire():
        await asyncio.sleep(_LATENCY_S)
    if ctx.visit == 0:
        return Handoff.rewind("t0", f"{value}|back")
    return f"{value}|t{ctx.seq}"


#: the task ``_jump`` hands off to (set with the template)
_LAST = "t2"


def build_rewind_template() -> PipelineTemplate:
    """``t0, t1`` where ``t1`` rewinds to ``t0`` once: four task runs, one of them a move back,
    against a plain chain of four tasks (three checkpoints and the last output)."""
    return pipeline(
        "bench-rewind",
        task(_work, name="t0", resource="apis"),
        task(_back, name="t1", resource="apis"),
        control={"rewind": {"t1": ["t0"]}, "max_handoffs": 1},
    )


def build_template(n_tasks: int = 3, handoff: bool = False) -> PipelineTemplate:
    """``pipeline("bench", t0, t1, ...)``: same source and names in every process (stable keys).

    ``handoff``: ``t0`` hands every seed to the last task (declared as the pipeline's one edge),
    so each pipeline runs two tasks and skips the ones between: a jump where a plain chain of two
    tasks has a checkpoint."""
    global _LAST
    tasks = [task(_work, name=f"t{k}", resource="apis") for k in range(n_tasks)]
    if not handoff:
        return pipeline("bench", *tasks)
    if n_tasks < 3:
        raise ValueError("the handoff workload needs at least 3 tasks (one to skip)")
    _LAST = tasks[-1].name
    tasks[0] = task(_jump, name="t0", resource="apis")
    return pipeline("bench-handoff", *tasks, control={"edges": {"t0": [_LAST]}})


#: the same three tasks for configs (``use: benchmarks.product_run:t0``), see ``cli_run.py``
t0, t1, t2 = build_template(3).tasks


def build_pools(capacity: int, resources: int = 1) -> list[Pool]:
    """One pool with more capacity than the concurrency (leases never wait), held by one
    resource or split evenly across ``resources`` of them."""
    each = max(1, -(-capacity // resources))
    held = [Resource.create("api", id=f"api-{k + 1}", capacity=each) for k in range(resources)]
    return [Pool("apis", held)]


def seeds(lo: int, hi: int) -> Iterator[str]:
    """A streaming source: seeds are produced lazily, never held in a list."""
    for i in range(lo, hi):
        yield f"in-{i}"


def store_bytes(path: str) -> int:
    """Size of the store on disk: the database plus its WAL and shared-memory files."""
    return sum(os.path.getsize(p) for p in (path, path + "-wal", path + "-shm") if os.path.exists(p))


def io_counters() -> dict[str, int]:
    """Bytes this process asked to write (``wchar``) and sent to the block layer (Linux only)."""
    out: dict[str, int] = {}
    try:
        with open("/proc/self/io") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key in ("wchar", "write_bytes", "syscw"):
                    out[key] = int(value)
    except OSError:
        pass
    return out


def run(
    store: str,
    n: int,
    *,
    lo: int = 0,
    tasks: int = 3,
    concurrency: int = 64,
    latency_ms: float = 0.0,
    capacity: int | None = None,
    event_loop: str = "auto",
    handoff: bool = False,
    settings: dict[str, Any] | None = None,
    sigma: float = 0.0,
    resources: int = 1,
    rewind: bool = False,
) -> dict[str, Any]:
    """Run pipelines ``lo..lo+n`` into ``store`` and return the summary dict (not printed).

    ``sigma`` > 0: each task sleeps a log-normal latency of median ``latency_ms`` (fixed per
    pipeline and task), and the summary carries ``fraction_of_ideal`` = zero-overhead makespan /
    wall time."""
    global _LATENCY_S, _LATENCIES, _TASKS
    _LATENCY_S = latency_ms / 1000.0
    _TASKS = tasks
    ideal = None
    if sigma > 0:
        if handoff or lo:
            raise ValueError("log-normal latencies need a plain chain from seed 0")
        _LATENCIES = lognormal_latencies(n, tasks, _LATENCY_S, sigma)
        ideal = ideal_makespan(_LATENCIES, n, tasks, concurrency)
    template = build_rewind_template() if rewind else build_template(tasks, handoff)
    # per pipeline: a jump skips the tasks between; a rewind runs both tasks twice
    ran_tasks = 4 if rewind else 2 if handoff else tasks
    t_start_epoch = time.time()
    cpu0 = time.process_time()
    sys0 = resource.getrusage(resource.RUSAGE_SELF).ru_stime
    t0 = time.perf_counter()
    with Runner(
        store=store,
        pools=build_pools(capacity or max(1000, 2 * concurrency), resources),
        concurrency=concurrency,
        event_loop=event_loop,
        **(settings or {}),
    ) as runner:
        report = runner.run(template.map(seeds(lo, lo + n)))
        # the loop the run recorded as the one it ran on (not merely the one it was asked for);
        # the read is left out of the timing
        q0, qc0 = time.perf_counter(), time.process_time()
        recorded = runner.store.get_run(report.run_id)
        loop = recorded.config.get("event_loop") if recorded is not None else None
        untimed, untimed_cpu = time.perf_counter() - q0, time.process_time() - qc0
    elapsed = time.perf_counter() - t0 - untimed
    cpu = time.process_time() - cpu0 - untimed_cpu
    # the kernel's share (WAL writes, checkpoints, syncs): instruction counts never see it
    system = resource.getrusage(resource.RUSAGE_SELF).ru_stime - sys0
    counters = dict(report.counters)
    ran = counters.get("pipelines_succeeded", 0) + counters.get("pipelines_failed", 0)
    skipped = counters.get("skipped", 0)
    size = store_bytes(store.split("?", 1)[0])
    io = io_counters()
    return {
        "runner": "product",
        "n": n,
        "tasks": ran_tasks,
        "handoff": handoff,
        "rewind": rewind,
        "concurrency": concurrency,
        "latency_ms": latency_ms,
        "sleep0": latency_ms == 0,
        "synchronous": os.environ.get("PYATTACKER_SQLITE_SYNCHRONOUS", "normal"),
        "status": report.status,
        "event_loop": loop,
        "pipelines_run": ran,
        "pipelines_skipped": skipped,
        "wall_s": elapsed,
        "elapsed_s": elapsed,
        "cpu_s": cpu,
        "cpu_us_per_task": cpu / (ran * ran_tasks) * 1e6 if ran else None,
        "sys_us_per_task": system / (ran * ran_tasks) * 1e6 if ran else None,
        "pipelines_per_s": ran / elapsed if ran else None,
        "skipped_per_s": skipped / elapsed if skipped else None,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "store_bytes": size,
        "write_mb": io["wchar"] / 2**20 if "wchar" in io else None,
        "write_syscalls": io.get("syscw"),
        "bytes_per_pipeline": size / n if n else None,
        "resources": resources,
        "sigma": sigma,
        "ideal_makespan_s": ideal,
        "fraction_of_ideal": ideal / elapsed if ideal else None,
        "t_start_epoch": t_start_epoch,
        "t_end_epoch": time.time(),
        "counters": counters,
    }


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=50_000, help="pipelines to run")
    ap.add_argument("--lo", type=int, default=0, help="first seed index (shards run disjoint ranges)")
    ap.add_argument("--tasks", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--latency-ms", type=float, default=0.0, help="0 = await asyncio.sleep(0) once per task")
    ap.add_argument(
        "--sigma",
        type=float,
        default=0.0,
        help="log-normal latencies of median --latency-ms with this sigma (0 = fixed latency)",
    )
    ap.add_argument("--resources", type=int, default=1, help="resources in the pool (capacity split)")
    ap.add_argument("--capacity", type=int, default=None, help="pool capacity (default max(1000, 2*C))")
    ap.add_argument("--store", required=True, help="store path (may carry ?synchronous=full)")
    ap.add_argument(
        "--event-loop", default="auto", choices=("auto", "asyncio", "uvloop"), help="run.event_loop"
    )
    ap.add_argument(
        "--handoff",
        action="store_true",
        help="the first task hands every seed to the last one (two tasks run per pipeline)",
    )
    ap.add_argument(
        "--rewind",
        action="store_true",
        help="two tasks, the second rewinding to the first once (four tasks run per pipeline)",
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a run setting (RunConfig field), the value read as JSON when it parses, e.g. "
        "events=all, write_behind=false, journal=summary, artifact_backend='\"null\"'",
    )
    return ap


def main(argv: list[str] | None = None) -> None:
    ap = build_parser()
    args = ap.parse_args(argv)
    settings: dict[str, Any] = {}
    for item in args.set:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            ap.error(f"--set {item!r}: expected KEY=VALUE")
        try:
            settings[key] = json.loads(raw)
        except ValueError:
            settings[key] = raw
    if args.handoff and args.tasks < 3:
        ap.error("--handoff needs --tasks >= 3 (a task to skip)")
    summary = run(
        args.store,
        args.n,
        lo=args.lo,
        tasks=args.tasks,
        concurrency=args.concurrency,
        latency_ms=args.latency_ms,
        capacity=args.capacity,
        event_loop=args.event_loop,
        handoff=args.handoff,
        settings=settings,
        sigma=args.sigma,
        resources=args.resources,
        rewind=args.rewind,
    )
    summary["settings"] = settings
    print(json.dumps(summary))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
