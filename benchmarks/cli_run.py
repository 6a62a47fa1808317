"""The overhead workload through the command line: ``pyattacker run -c <config> [--shards N]``.

The shards scenario measures what a user runs: one ``pyattacker run`` process against the same
command with ``--shards 2`` (two shard processes, each with its own store, capacity split between
them, the merged report at the end). This script writes the config (the three tasks of
``product_run.py``, one pool, a ``range`` source), runs the command as a child, and prints ONE
JSON line like the other runners: pipelines/s over the command's whole wall time, start-up and
the merged report included, and what the command spent around its runs (``around_runs``: read
from the runs' rows once it has ended, so the measurement costs the command nothing).

    python benchmarks/cli_run.py --n 50000 --store /tmp/x/cli.db [--shards 2]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def config(n: int, store: str, concurrency: int, capacity: int) -> dict[str, Any]:
    """The overhead workload as a config: what ``product_run.py`` builds with the SDK."""
    return {
        "run": {"store": store, "concurrency": concurrency},
        "pools": {"apis": {"resources": [{"id": "api-1", "capacity": capacity}]}},
        "pipeline": {"name": "bench", "tasks": [{"use": f"benchmarks.product_run:t{k}"} for k in range(3)]},
        "source": {"kind": "range", "n": n},
    }


def succeeded(summary: dict[str, Any], sharded: bool) -> int:
    """Pipelines that succeeded, from ``--summary-format json`` (merged across shards)."""
    if sharded:
        merged = summary.get("merged") or {}
        return int(((merged.get("pipelines") or {}).get("by_state") or {}).get("succeeded", 0))
    return int((summary.get("counters") or {}).get("pipelines_succeeded", 0))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, required=True, help="pipelines to run")
    ap.add_argument("--store", required=True, help="store path (shards write <store>.shard{i}of{N}.db)")
    ap.add_argument("--shards", type=int, default=0, help="0: one process; N >= 2: --shards N")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument(
        "--capacity", type=int, default=1000, help="the resource's capacity (split across shards)"
    )
    args = ap.parse_args(argv)
    cfg_path = Path(args.store).with_suffix(".config.json")
    cfg_path.write_text(json.dumps(config(args.n, args.store, args.concurrency, args.capacity)))
    cmd = [sys.executable, "-m", "pyattacker", "run", "-c", str(cfg_path), "--summary-format", "json"]
    if args.shards:
        cmd += ["--shards", str(args.shards)]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH")))),
    }
    began = time.time()  # the runs' rows are dated with the wall clock
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    ended = began + wall
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-3000:])
        return proc.returncode
    ran = succeeded(json.loads(proc.stdout), bool(args.shards))
    print(
        json.dumps(
            {
                "runner": "product-cli",
                "n": args.n,
                "shards": args.shards or 1,
                "status": "completed" if ran == args.n else "incomplete",
                "pipelines_run": ran,
                "wall_s": wall,
                "elapsed_s": wall,
                "pipelines_per_s": ran / wall if wall else None,
                # the largest child (a shard, or the single run process)
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
                **around_runs(run_spans(args.store, args.shards), began, ended),
            }
        )
    )
    return 0 if ran == args.n else 1


def run_spans(store: str, shards: int) -> list[tuple[float, float]]:
    """``(started_at, ended_at)`` of every ended run in the command's store(s), read through the
    product's own store and shard naming after the command has ended."""
    from pyattacker.shard.plan import shard_store_path
    from pyattacker.views.common import read_only_store

    count = max(shards, 1)
    spans = []
    for index in range(count):
        with read_only_store(shard_store_path(store, index, count)) as opened:
            spans += [(run.started_at, run.ended_at) for run in opened.runs() if run.ended_at is not None]
    return spans


def around_runs(spans: list[tuple[float, float]], began: float, ended: float) -> dict[str, float]:
    """What the command spent around its runs: ``start_s`` before the first run started (start-up,
    config check, the shards' start), ``tail_s`` after the last run ended (the store's close,
    the merged report, the exit), and ``spread_s`` between the first and the last run's end
    (shards that do not end together leave a core idle)."""
    if not spans:
        return {}
    return {
        "start_s": min(start for start, _ in spans) - began,
        "tail_s": ended - max(end for _, end in spans),
        "spread_s": max(end for _, end in spans) - min(end for _, end in spans),
    }


if __name__ == "__main__":
    raise SystemExit(main())
