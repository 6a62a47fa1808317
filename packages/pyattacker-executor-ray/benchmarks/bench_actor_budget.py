"""What one grant costs through the Ray actor budget, against the budget file and no sharing.

Run: ``python packages/pyattacker-executor-ray/benchmarks/bench_actor_budget.py`` (needs ray).
One local Ray (``num_cpus=2``) is started first, then one ``BudgetLog`` actor. Each variant is a
pool with one resource limited to far more than it is asked for (never short of budget), leased
and returned ``--leases`` times in a row by one process; ``--rounds`` rounds, alternating the
variants. Per lease: the median wall microseconds (the actor's round trip is a wait, not work)
and the median CPU microseconds of the leasing process. Also the same through ``--procs``
processes leasing at once from one actor (the lock is cluster-wide: grants/s in total). JSON on
stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import tempfile
import time
from typing import Any

from pyattacker import Pool, Resource
from pyattacker.resources.shared_budget import FileBudget, SharedBudget


def _leases(budget: SharedBudget | None, n: int) -> tuple[float, float]:
    async def main() -> tuple[float, float]:
        pool = Pool("p", [Resource("p", id="k", capacity=4, limits={"rpm": 1e12})])
        if budget is not None:
            pool.share_budget(budget)
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(n):
            (await pool.acquire()).release_now()
        return (time.perf_counter() - wall) / n * 1e6, (time.process_time() - cpu) / n * 1e6

    return asyncio.run(main())


def _parallel(address: str, name: str, n: int, out: Any) -> None:
    import ray
    from pyattacker_executor_ray.budget import NAMESPACE, ActorBudget

    ray.init(address=address, namespace=NAMESPACE, logging_level="WARNING", log_to_driver=False)
    budget = ActorBudget(ray.get_actor(name, namespace=NAMESPACE))
    _leases(budget, 20)  # warm
    start = time.perf_counter()
    _leases(budget, n)
    out.put((start, time.perf_counter()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--leases", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--procs", type=int, default=4)
    args = parser.parse_args()
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    import ray
    from pyattacker_executor_ray.budget import ActorBudget, start_budget_log

    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING")
    actor, name = start_budget_log("bench", keep_s=60.0)
    folder = tempfile.mkdtemp(prefix="budget-")
    variants: dict[str, Any] = {
        "limited_unshared": lambda: None,
        "file_budget": lambda: FileBudget(os.path.join(folder, "b")),
        "actor_budget": lambda: ActorBudget(actor),
    }
    results: dict[str, list[tuple[float, float]]] = {k: [] for k in variants}
    _leases(ActorBudget(actor), 50)  # warm the actor's worker and the connection
    for _ in range(args.rounds):
        for key, make in variants.items():
            results[key].append(_leases(make(), args.leases))
    out: dict[str, Any] = {
        key: {
            "wall_us_per_lease": round(statistics.median(w for w, _ in rows), 1),
            "cpu_us_per_lease": round(statistics.median(c for _, c in rows), 1),
        }
        for key, rows in results.items()
    }
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    gcs = str(ray.get_runtime_context().gcs_address)
    procs = [ctx.Process(target=_parallel, args=(gcs, name, args.leases, queue)) for _ in range(args.procs)]
    for proc in procs:
        proc.start()
    spans = [queue.get() for _ in procs]
    for proc in procs:
        proc.join()
    total = args.leases * args.procs
    out["actor_budget_parallel"] = {
        "procs": args.procs,
        "grants": total,
        "grants_per_s": round(total / (max(e for _, e in spans) - min(s for s, _ in spans)), 1),
    }
    out["actor_stats"] = ray.get(actor.stats.remote())
    print(json.dumps(out))
    ray.shutdown()


if __name__ == "__main__":
    main()
