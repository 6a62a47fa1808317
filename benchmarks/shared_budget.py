"""One rate budget shared by shard processes: does the sum stay within the limit, and what does
a grant cost?

Two measurements, printed as ONE JSON line:

- ``shards``: ``--procs`` processes (shards) on this machine, each a pool with one resource of
  ``--rpm`` requests per minute sharing one budget file, each with ``--workers`` workers leasing
  as fast as they can for ``--seconds``. Windows are shortened with
  ``PYATTACKER_LIMIT_WINDOW_SCALE`` (``--scale``). Reports the most grants seen in any window
  (must be <= the limit) and ``of_budget``: the grants against the most the limit allows in
  that time (the limit times the windows, back to back, from the first grant; 1.0: all used).
- ``cost``: CPU microseconds per lease (acquire + release, one process, never short of budget;
  CPU time, not wall time, which a loaded machine makes meaningless) on a pool without limits,
  with limits, and with limits shared through the budget file.

    python benchmarks/shared_budget.py --procs 4 --rpm 60 --scale 0.05 --seconds 12
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing
import os
import tempfile
import time
from typing import Any

from pyattacker import Pool, Resource
from pyattacker.resources.shared_budget import FileBudget


def _most_in_window(times: list[float], span: float) -> int:
    times = sorted(times)
    most, j = 0, 0
    for i, start in enumerate(times):
        while j < len(times) and times[j] < start + span:
            j += 1
        most = max(most, j - i)
    return most


def _shard(path: str, rpm: float, workers: int, until: float, out: Any) -> None:
    async def main() -> list[float]:
        pool = Pool("llm", [Resource("llm", id="k", capacity=workers, limits={"rpm": rpm})])
        pool.share_budget(FileBudget(path))
        grants: list[float] = []

        async def worker() -> None:
            while time.monotonic() < until:
                # past ``until`` the wait ends with an error, which ends this worker
                lease = await pool.acquire(timeout=max(0.01, until - time.monotonic()))
                grants.append(lease.acquired_at)
                await asyncio.sleep(0.001)
                lease.release_now()

        await asyncio.gather(*(worker() for _ in range(workers)), return_exceptions=True)
        return [t for t in grants if t < until]

    out.put(asyncio.run(main()))


def shards(procs: int, rpm: float, scale: float, seconds: float, workers: int) -> dict[str, Any]:
    os.environ["PYATTACKER_LIMIT_WINDOW_SCALE"] = str(scale)
    path = os.path.join(tempfile.mkdtemp(prefix="budget-"), "b.budget")
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    until = time.monotonic() + 1.0 + seconds  # a second to start every process
    children = [ctx.Process(target=_shard, args=(path, rpm, workers, until, queue)) for _ in range(procs)]
    for child in children:
        child.start()
    per_shard = [queue.get() for _ in children]
    for child in children:
        child.join()
    times = [t for grants in per_shard for t in grants]
    span = 60.0 * scale
    # back-to-back windows from the first grant: the most the limit allows in that time
    windows = math.ceil((until - min(times)) / span)
    return {
        "procs": procs,
        "rpm": rpm,
        "window_s": span,
        "grants": len(times),
        "per_shard": [len(g) for g in per_shard],
        "most_in_any_window": _most_in_window(times, span),
        "of_budget": round(len(times) / (windows * rpm), 3),
    }


def _lease_cost(limits: dict[str, float] | None, shared: bool, n: int) -> float:
    async def main() -> float:
        pool = Pool("p", [Resource("p", id="k", capacity=4, limits=limits)])
        if shared:
            pool.share_budget(FileBudget(os.path.join(tempfile.mkdtemp(prefix="budget-"), "b")))
        start = time.process_time()
        for _ in range(n):
            (await pool.acquire()).release_now()
        return (time.process_time() - start) / n * 1e6

    return round(asyncio.run(main()), 2)


def cost(n: int) -> dict[str, float]:
    os.environ.pop("PYATTACKER_LIMIT_WINDOW_SCALE", None)
    big = {"rpm": 1e12}
    return {
        "unlimited_cpu_us_per_lease": _lease_cost(None, False, n),
        "limited_cpu_us_per_lease": _lease_cost(big, False, n),
        "limited_shared_cpu_us_per_lease": _lease_cost(big, True, n),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, default=4)
    parser.add_argument("--rpm", type=float, default=60.0)
    parser.add_argument("--scale", type=float, default=0.05, help="window length factor (0.05: a 3 s minute)")
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--workers", type=int, default=8, help="workers per shard")
    parser.add_argument("--leases", type=int, default=20_000, help="leases per cost measurement")
    args = parser.parse_args()
    out = {"cost": cost(args.leases)}
    out["shards"] = shards(args.procs, args.rpm, args.scale, args.seconds, args.workers)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
