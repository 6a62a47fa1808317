"""Profile the overhead scenario: where does the product's CPU time per task go?

Two passes, because a profiler inflates what it measures:

1. a fresh, unprofiled process (``product_run.py``) gives the true CPU µs per task;
2. the same workload in this process under cProfile (after a small warm-up run, so imports and
   plugin discovery are not charged to the tasks) gives the *shares* of that time.

The per-task breakdown is share x true µs/task, in the buckets the hot-path work is organised by:
store commit, codec encode, events/attempt/task records, leases, the task bodies, and
scheduling (event loop, workers, producer, group-commit futures: the remainder). Buckets are
built from cumulative times of entry points (and caller edges), so they are approximations
that add up to 100 %. pyinstrument / py-spy are used when installed, never required.

    python -m benchmarks.profile_overhead --n 10000
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

Key = tuple[str, int, str]
StatRow = tuple[int, int, float, float, dict[Key, tuple[int, int, float, float]]]


def _match(key: Key, file_part: str, func: str) -> bool:
    return key[2] == func and file_part in key[0].replace(os.sep, "/")


class Profile:
    """Queries over one ``pstats.Stats``: cumulative time of entry points, by caller if asked."""

    def __init__(self, stats: pstats.Stats) -> None:
        self.raw: dict[Key, StatRow] = stats.stats  # type: ignore[attr-defined]
        self.total = sum(row[2] for row in self.raw.values())

    def keys(self, file_part: str, func: str) -> list[Key]:
        return [k for k in self.raw if _match(k, file_part, func)]

    def cum(self, file_part: str, func: str, caller: tuple[str, str] | None = None) -> float:
        total = 0.0
        for k in self.keys(file_part, func):
            if caller is None:
                total += self.raw[k][3]
            else:
                total += sum(e[3] for ck, e in self.raw[k][4].items() if _match(ck, *caller))
        return total

    def tot(self, file_part: str, func: str) -> float:
        return sum(self.raw[k][2] for k in self.keys(file_part, func))

    def calls(self, file_part: str, func: str) -> int:
        return sum(self.raw[k][1] for k in self.keys(file_part, func))

    def tot_where(self, pred: Callable[[Key], bool]) -> float:
        return sum(row[2] for k, row in self.raw.items() if pred(k))


def breakdown(p: Profile) -> dict[str, float]:
    """Seconds per bucket (profiled time). 'scheduling' is the remainder, so the sum is the total."""
    ck = ("engine/checkpoint.py", "stage")
    store = p.cum("store_sqlite/commit.py", "_apply")  # every commit's transaction
    codec = p.cum("store/codecs.py", "encode", caller=ck) + p.cum(
        "pyattacker/digest.py", "digest_bytes", caller=("engine/checkpoint.py", "artifact")
    )
    emits = p.cum("resources/pool.py", "_emit")
    records = (
        p.cum("engine/telemetry.py", "event")
        + p.cum("engine/checkpoint.py", "record_attempt")
        + p.cum("engine/checkpoint.py", "snapshot")
        + p.cum("pyattacker/model.py", "extend")
        # the artifact, task, pipeline and attempt rows are built there
        + p.tot(*ck)
        + p.tot("engine/checkpoint.py", "artifact")
        + p.tot("engine/checkpoint.py", "close")
        + p.tot("engine/checkpoint.py", "attempt_row")
        + max(0.0, emits - p.cum("engine/telemetry.py", "_pool_event"))
    )
    leases = max(
        0.0,
        p.cum("engine/context.py", "_lease_now")
        + p.cum("engine/context.py", "_lease_from")
        + p.cum("engine/context.py", "_return")
        + p.cum("engine/context.py", "reclaim_now")
        - emits,
    )
    bodies = p.tot("product_run.py", "_work")
    out = {
        "store commit (SQLite + row tuples)": store,
        "codec encode + digest of outputs": codec,
        "events / attempt / task records": records,
        "leases (acquire + release)": leases,
        "task bodies": bodies,
    }
    out["scheduling (event loop, workers, producer, commit futures)"] = max(0.0, p.total - sum(out.values()))
    return out


def details(p: Profile) -> dict[str, float]:
    """Finer numbers inside the buckets (seconds, profiled), for the lead's hot-path work."""
    sql = p.tot_where(lambda k: k[0] == "~" and "sqlite3.Connection" in k[2])
    return {
        "sqlite C calls (execute/executemany own time)": sql,
        "row tuple encoding (store_sqlite/rows.py)": p.tot_where(lambda k: "store_sqlite/rows.py" in k[0]),
        "asyncio internals (own time in asyncio/*)": p.tot_where(lambda k: "/asyncio/" in k[0]),
        "producer (admission: lookup + bind seeds)": p.cum("engine/admission.py", "produce"),
        "store lookup_pipelines": p.cum("store_sqlite/reads.py", "lookup_pipelines"),
        "pool ResourceEvent emission (pool._emit)": p.cum("resources/pool.py", "_emit"),
        "Telemetry.event (all events)": p.cum("engine/telemetry.py", "event"),
        "Checkpointer.record_attempt": p.cum("engine/checkpoint.py", "record_attempt"),
        "TaskContext construction": p.cum("engine/context.py", "__init__"),
    }


def unprofiled(n: int, concurrency: int, tmp: Path) -> dict[str, Any]:
    """The true cost: a fresh process, no profiler."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH")))),
    }
    cmd = [sys.executable, str(HERE / "product_run.py"), "--n", str(n), "--concurrency", str(concurrency)]
    proc = subprocess.run(
        [*cmd, "--store", str(tmp / "unprofiled.db")], capture_output=True, text=True, env=env, check=True
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def commit_stats(product_run: Any, n: int, concurrency: int, tmp: Path) -> dict[str, Any] | None:
    """Unprofiled pass with a timer around the SQLite store's ``commit``: how well commits group."""
    try:
        from pyattacker_plugins.store_sqlite.store import SqliteStore
    except ImportError:
        return None
    original = SqliteStore._apply  # the transaction of every commit (``commit`` and ``commit_behind``)
    times: list[float] = []
    task_rows: list[int] = []
    all_rows: list[int] = []

    def timed(self: Any, batch: Any) -> None:
        t0 = time.perf_counter()
        original(self, batch)
        times.append(time.perf_counter() - t0)
        task_rows.append(len(batch.tasks))
        all_rows.append(len(batch))

    SqliteStore._apply = timed  # type: ignore[method-assign]
    try:
        res = product_run.run(str(tmp / "commits.db"), n, concurrency=concurrency)
    finally:
        SqliteStore._apply = original  # type: ignore[method-assign]
    if not times:
        return None
    times.sort()
    return {
        "commits": len(times),
        "task_rows_per_commit": sum(task_rows) / len(times),
        "rows_per_commit": sum(all_rows) / len(times),
        "commit_ms_mean": 1e3 * sum(times) / len(times),
        "commit_ms_p50": 1e3 * times[len(times) // 2],
        "commit_ms_p95": 1e3 * times[int(len(times) * 0.95)],
        "commit_share_of_wall": sum(times) / res["wall_s"],
        "wall_s": res["wall_s"],
        "cpu_s": res["cpu_s"],
    }


def build_parser() -> argparse.ArgumentParser:
    """The command line (the docs' example commands are parsed with it by a test)."""
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.profile_overhead", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--n", type=int, default=10_000, help="pipelines (x 3 tasks)")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--top", type=int, default=30, help="functions listed by own time")
    ap.add_argument("--json", type=Path, default=None, help="also write the breakdown here")
    ap.add_argument("--no-baseline-run", action="store_true", help="skip the unprofiled process")
    return ap


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    sys.path.insert(0, str(REPO))
    from benchmarks import product_run

    tmp = Path(tempfile.mkdtemp(prefix="pyattacker-profile-"))
    try:
        true = None if args.no_baseline_run else unprofiled(args.n, args.concurrency, tmp)
        product_run.run(str(tmp / "warmup.db"), 200, concurrency=args.concurrency)  # imports, plugins, caches
        prof = cProfile.Profile()
        prof.enable()
        res = product_run.run(str(tmp / "profiled.db"), args.n, concurrency=args.concurrency)
        prof.disable()
        tasks = res["pipelines_run"] * res["tasks"]
        stats = pstats.Stats(prof)
        buf = io.StringIO()
        stats.stream = buf  # type: ignore[attr-defined]
        stats.sort_stats("tottime").print_stats(args.top)
        print(f"== top {args.top} functions by own time (cProfile, N={args.n}, {tasks} tasks)")
        print("\n".join(buf.getvalue().splitlines()[4:]))

        p = Profile(stats)
        buckets = breakdown(p)
        true_us = true["cpu_us_per_task"] if true else None
        prof_us = p.total / tasks * 1e6
        print(
            f"\n== per-task CPU breakdown (N={args.n} pipelines x {res['tasks']} tasks, C={args.concurrency})"
        )
        if true:
            print(
                f"unprofiled fresh process: {true_us:.1f} µs CPU per task,"
                f" {true['pipelines_per_s']:,.0f} pipelines/s,"
                f" wall {true['wall_s']:.2f}s vs CPU {true['cpu_s']:.2f}s"
                f" ({100 * true['cpu_s'] / true['wall_s']:.0f} % of wall on CPU)"
            )
            if true.get("write_mb") is not None:
                print(
                    f"written by the process: {true['write_mb']:,.0f} MB"
                    f" = {1024 * true['write_mb'] / args.n:,.1f} KB per pipeline for a store of"
                    f" {true['bytes_per_pipeline']:,.0f} bytes per pipeline;"
                    f" {true['write_syscalls'] / tasks:.1f} write syscalls per task"
                )
        print(f"profiled: {prof_us:.1f} µs per task (cProfile overhead included); shares below are of that")
        scale = true_us if true_us else prof_us
        print(f"{'bucket':<58} {'share':>7} {'µs/task':>9}")
        for name, secs in buckets.items():
            print(f"{name:<58} {100 * secs / p.total:6.1f}% {scale * secs / p.total:9.1f}")
        print(f"{'total':<58} {100.0:6.1f}% {scale:9.1f}")
        print("\n-- inside the buckets (approximate, overlapping)")
        det = details(p)
        for name, secs in det.items():
            print(f"{name:<58} {100 * secs / p.total:6.1f}% {scale * secs / p.total:9.1f}")
        commits = p.calls("store_sqlite/commit.py", "_apply")
        if commits:
            commit_s = buckets["store commit (SQLite + row tuples)"]
            print(
                f"\nstore commits: {commits} for {tasks} checkpointed tasks = {tasks / commits:.1f} tasks per"
                f" transaction; {1e3 * commit_s / commits:.2f} ms per commit (profiled)"
            )
        cs = commit_stats(product_run, args.n, args.concurrency, tmp)
        if cs:
            print(
                f"unprofiled, timed commits: {cs['commits']} commits, {cs['task_rows_per_commit']:.1f} task"
                f" checkpoints ({cs['rows_per_commit']:.0f} rows) per transaction; commit"
                f" {cs['commit_ms_mean']:.2f} ms mean, {cs['commit_ms_p50']:.2f} p50,"
                f" {cs['commit_ms_p95']:.2f} p95;"
                f" {100 * cs['commit_share_of_wall']:.0f} % of wall time inside store.commit"
                f" (wall {cs['wall_s']:.2f}s, CPU {cs['cpu_s']:.2f}s)"
            )
        print(
            f"store size: {res['store_bytes']:,} bytes = {res['bytes_per_pipeline']:,.0f} bytes per pipeline"
        )
        if args.json:
            args.json.write_text(
                json.dumps(
                    {
                        "n": args.n,
                        "tasks": tasks,
                        "unprofiled": true,
                        "profiled_us_per_task": prof_us,
                        "buckets_share": {k: v / p.total for k, v in buckets.items()},
                        "details_share": {k: v / p.total for k, v in det.items()},
                        "store_commits": commits,
                        "commit_stats": cs,
                    },
                    indent=1,
                )
            )
        _optional_profilers(args, product_run, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _optional_profilers(args: argparse.Namespace, product_run: Any, tmp: Path) -> None:
    """pyinstrument (call tree) and py-spy (flame graph) if present; silently skipped otherwise."""
    try:
        from pyinstrument import Profiler  # type: ignore[import-not-found]
    except ImportError:
        print("\n(pyinstrument not installed: call-tree view skipped)")
    else:
        profiler = Profiler(async_mode="disabled")
        profiler.start()
        product_run.run(str(tmp / "pyinstrument.db"), args.n, concurrency=args.concurrency)
        profiler.stop()
        text = profiler.output_text(unicode=False, color=False)
        print("\n== pyinstrument (first 60 lines)\n" + "\n".join(text.splitlines()[:60]))
    spy = shutil.which("py-spy")
    if spy is None:
        print("(py-spy not installed: flame graph skipped)")
        return
    svg = Path(tempfile.gettempdir()) / "pyattacker-overhead-pyspy.svg"
    cmd = [
        spy,
        "record",
        "-o",
        str(svg),
        "--",
        sys.executable,
        str(HERE / "product_run.py"),
        "--n",
        str(args.n),
        "--store",
        str(tmp / "pyspy.db"),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True)
    print(f"py-spy flame graph: {svg}" if done.returncode == 0 else f"py-spy failed: {done.stderr[-300:]}")


if __name__ == "__main__":
    main()
