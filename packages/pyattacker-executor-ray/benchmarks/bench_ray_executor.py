"""``run --shards 2 --executor ray`` against ``--executor local``, side by side, start-up apart.

Run: ``python packages/pyattacker-executor-ray/benchmarks/bench_ray_executor.py`` (needs ray).
One local Ray is started first (``ray.init(num_cpus=2)``: its start-up is reported on its own);
then each workload runs through the CLI with each executor in turn, alternating, ``--repeat``
times. Per command: ``wall_s`` (the whole command), ``start_s`` (command start to the first
shard's run start: interpreter, config check, connecting to Ray, placing and starting shards),
``runs_per_s``: pipelines per second over the shards' runs (first run start to last run end,
from the stores; it still holds the stagger of the shards' starts, ``start_spread_s``), and
``shard_rates_per_s``: the sum over shards of each one's pipelines per second of its own run,
the "after start-up" rate. The ratio ray/local of its medians is the figure the README quotes
(target >= 0.9). Workloads: ``overhead`` (3 tasks, sleep(0)) and
``latency`` (3 tasks, 10 ms each, concurrency 64). JSON on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _config(path: Path, n: int, concurrency: int) -> None:
    path.write_text(
        json.dumps(
            {
                "run": {"concurrency": concurrency},
                "pools": {"apis": {"resources": [{"id": "api-1", "capacity": 1000}]}},
                "pipeline": {"name": "bench", "tasks": [{"use": f"bench_tasks:t{k}"} for k in range(3)]},
                "source": {"kind": "range", "n": n},
            }
        )
    )


def _spans(store: str) -> list[tuple[float, float, int]]:
    from pyattacker.shard.plan import shard_store_path
    from pyattacker.views.common import read_only_store

    spans = []
    for index in range(2):
        with read_only_store(shard_store_path(store, index, 2)) as opened:
            rows = opened.count_rows("pipelines")
            spans += [(r.started_at, r.ended_at, rows) for r in opened.runs() if r.ended_at is not None]
    return spans


def _one(folder: Path, executor: str, address: str, n: int, latency_ms: float, k: int) -> dict[str, Any]:
    cfg = folder / "cfg.json"
    store = str(folder / f"{executor}-{latency_ms:g}-{k}.db")
    cmd = [sys.executable, "-m", "pyattacker", "run", "-c", str(cfg), "--store", store, "--shards", "2"]
    cmd += ["--executor", executor, "--summary-format", "json"]
    if executor == "ray":
        for option in (f"address={address}", "progress_s=0", "env=PYTHONPATH,BENCH_LATENCY_MS"):
            cmd += ["--executor-option", option]
    env = {**os.environ, "PYTHONPATH": str(HERE), "BENCH_LATENCY_MS": str(latency_ms)}
    began = time.time()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{executor} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    spans = _spans(store)
    first, last = min(s for s, _e, _n in spans), max(e for _s, e, _n in spans)
    return {
        "wall_s": wall,
        "start_s": first - began,
        "start_spread_s": max(s for s, _e, _n in spans) - first,
        "runs_per_s": n / (last - first),
        "shard_rates_per_s": sum(k / (e - s) for s, e, k in spans),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--overhead-n", type=int, default=20000)
    ap.add_argument("--latency-n", type=int, default=4000)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args(argv)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray

    t0 = time.perf_counter()
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="WARNING")
    ray_start_s = time.perf_counter() - t0
    address = str(ray.get_runtime_context().gcs_address)
    out: dict[str, Any] = {"ray_local_start_s": ray_start_s, "workloads": {}}
    try:
        for name, n, latency_ms, concurrency in (
            ("overhead", args.overhead_n, 0.0, 64),
            ("latency", args.latency_n, 10.0, 64),
        ):
            with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
                folder = Path(tmp)
                _config(folder / "cfg.json", n, concurrency)
                runs: dict[str, list[dict[str, Any]]] = {"local": [], "ray": []}
                for k in range(args.repeat):
                    for executor in ("local", "ray"):
                        runs[executor].append(_one(folder, executor, address, n, latency_ms, k))
            medians = {
                ex: {key: statistics.median(r[key] for r in rs) for key in rs[0]} for ex, rs in runs.items()
            }
            out["workloads"][name] = {
                "n": n,
                "latency_ms": latency_ms,
                "runs": runs,
                "median": medians,
                "ray_over_local_runs_span": medians["ray"]["runs_per_s"] / medians["local"]["runs_per_s"],
                "ray_over_local_after_startup": medians["ray"]["shard_rates_per_s"]
                / medians["local"]["shard_rates_per_s"],
                "ray_over_local_wall": medians["local"]["wall_s"] / medians["ray"]["wall_s"],
            }
    finally:
        ray.shutdown()
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
