"""Instructions per pipeline under callgrind: a noise-free view of the overhead scenario.

Wall-clock throughput on these shared 2-core machines drifts 10-40 % between minutes, so a
change worth 5 % cannot be seen in pipelines/s. Valgrind's callgrind counts the instructions a
process executes, which is the same for the same program and input whatever else the machine
does. Each runner (product, floor, peer) runs twice on the overhead workload, at ``--n`` and at
``--base`` pipelines; the difference divided by the difference in N is the cost of one more
pipeline, with start-up, imports and plugin discovery cancelled out.

Instructions are a proxy, not the target: they leave out kernel time (the WAL writes) and treat
an instruction of SQLite's C like one of the interpreter's. Targets stay on same-run
pipelines/s (``python -m benchmarks``); use this to decide whether a change helped.

    python -m benchmarks.instructions                      # product, floor and peer
    python -m benchmarks.instructions --runners product --n 1500 --base 300
    python -m benchmarks.instructions --runners product --event-loop asyncio   # vs the default
    python -m benchmarks.instructions --concurrency 1024 --latency-ms 10      # the latency workload
    python -m benchmarks.instructions --runners handoff,chain2   # what a jump costs over a checkpoint

``handoff`` is the handoff scenario's product run (the first of three tasks hands every seed to
the third) and ``chain2`` a plain chain of the same two tasks: per task, both run two.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.scenarios import find_baselines

HERE = Path(__file__).resolve().parent
RUNNERS = ("product", "floor", "peer", "handoff", "chain2")
#: tasks each runner runs per pipeline (the handoff workload skips its middle task)
TASKS_RUN = {"handoff": 2, "chain2": 2}
_REFS = re.compile(r"I\s+refs:\s+([\d,]+)")
#: the string hash seed of every measured process. With a random seed, dict and set layouts
#: differ between runs and so do the counts, by up to about 0.3 %; with a fixed one the same
#: code repeats within about 0.02 %. ``--hash-seed random`` measures with Python's default.
DEFAULT_HASH_SEED = "0"


class Workload:
    """What every runner runs: 3 tasks per pipeline at ``concurrency``, each awaiting
    ``asyncio.sleep(0)`` once (``latency_ms`` 0) or sleeping ``latency_ms``."""

    def __init__(
        self,
        concurrency: int = 64,
        latency_ms: float = 0.0,
        event_loop: str = "auto",
        hash_seed: str = DEFAULT_HASH_SEED,
    ) -> None:
        self.concurrency = concurrency
        self.latency_ms = latency_ms
        self.event_loop = event_loop  # the product's run.event_loop (the baselines run asyncio)
        self.hash_seed = hash_seed  # PYTHONHASHSEED of every measured process

    def describe(self) -> str:
        task = f"{self.latency_ms:g} ms tasks" if self.latency_ms else "sleep(0) tasks"
        loop = f"product loop {self.event_loop}"
        return f"3 {task}, C={self.concurrency}, {loop}, PYTHONHASHSEED={self.hash_seed}"

    def args(self) -> list[str]:
        return ["--concurrency", str(self.concurrency), "--latency-ms", str(self.latency_ms)]


def command(
    runner: str, n: int, tmp: Path, baselines: Path | None, workload: Workload | None = None
) -> list[str]:
    """The workload (by default the overhead scenario's) for one runner."""
    w = workload or Workload()
    if runner in ("product", "handoff", "chain2"):
        shape = {"product": [], "handoff": ["--handoff"], "chain2": ["--tasks", "2"]}[runner]
        return [
            sys.executable, str(HERE / "product_run.py"), "--n", str(n), "--store", str(tmp / "p.db"),
            *w.args(), "--event-loop", w.event_loop, *shape,
        ]  # fmt: skip
    if baselines is None:
        raise SystemExit(f"runner {runner!r} needs the baseline scripts (--baselines DIR)")
    script = "floor_runner.py" if runner == "floor" else "baseline_peer.py"
    out = tmp / ("f.db" if runner == "floor" else "p.jsonl")
    sleep0 = ["--sleep0"] if not w.latency_ms else []
    return [sys.executable, str(baselines / script), "--n", str(n), *sleep0, *w.args(), "--out", str(out)]


def instructions(cmd: list[str], hash_seed: str = DEFAULT_HASH_SEED) -> int:
    """Instructions executed by ``cmd`` (whole process) as counted by callgrind."""
    # every process reads the installed metadata: with the kept entry-point scan, the first of
    # the two processes run side by side would scan and the other not (about 50 million
    # instructions apart, more than the pipelines between them), depending on which started
    env = dict(os.environ, PYTHONHASHSEED=hash_seed, PYATTACKER_PLUGIN_CACHE="0")
    with tempfile.TemporaryDirectory(prefix="pyattacker-cg-") as tmp:
        proc = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/cg.out", *cmd],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
    match = _REFS.search(proc.stderr)
    if proc.returncode != 0 or match is None:
        raise RuntimeError(
            f"callgrind run failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-2000:]}"
        )
    return int(match.group(1).replace(",", ""))


def marginal(
    build: Callable[[int, Path], list[str]], n: int, base: int, hash_seed: str = DEFAULT_HASH_SEED
) -> float:
    """Instructions per pipeline of the command ``build(size, tmp_dir)`` makes: run at ``n`` and at
    ``base`` pipelines side by side, the difference divided by ``n - base`` (start-up cancelled)."""
    with (
        tempfile.TemporaryDirectory(prefix="pyattacker-ins-") as big,
        tempfile.TemporaryDirectory(prefix="pyattacker-ins-") as small,
    ):
        cmds = [build(n, Path(big)), build(base, Path(small))]
        with ThreadPoolExecutor(max_workers=2) as pool:
            i_big, i_small = pool.map(lambda cmd: instructions(cmd, hash_seed), cmds)
    return (i_big - i_small) / (n - base)


def measure(
    runner: str, n: int, base: int, baselines: Path | None, workload: Workload | None = None
) -> dict[str, Any]:
    """Marginal instructions per pipeline and per task of ``runner`` (two runs in parallel)."""
    w = workload or Workload()
    per_pipeline = marginal(lambda size, tmp: command(runner, size, tmp, baselines, w), n, base, w.hash_seed)
    return {
        "runner": runner,
        "n": n,
        "base": base,
        "per_pipeline": per_pipeline,
        "per_task": per_pipeline / TASKS_RUN.get(runner, 3),
    }


def build_parser() -> argparse.ArgumentParser:
    """The command line (the docs' example commands are parsed with it by a test)."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.instructions", description=__doc__.split("\n")[0])
    ap.add_argument("--runners", default=",".join(RUNNERS), help="comma-separated: " + ", ".join(RUNNERS))
    ap.add_argument("--n", type=int, default=1500, help="pipelines in the larger run")
    ap.add_argument("--base", type=int, default=300, help="pipelines in the smaller run")
    ap.add_argument("--baselines", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=None, help="also write the results as JSON here")
    ap.add_argument("--concurrency", type=int, default=64, help="attempts at once (default 64)")
    ap.add_argument("--latency-ms", type=float, default=0.0, help="task sleep; 0 = await sleep(0) once")
    ap.add_argument(
        "--event-loop", default="auto", choices=("auto", "asyncio", "uvloop"), help="the product's loop"
    )
    ap.add_argument(
        "--hash-seed",
        default=DEFAULT_HASH_SEED,
        help="PYTHONHASHSEED of the measured processes (default 0: counts that repeat; 'random')",
    )
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.n <= args.base:
        ap.error("--n must be larger than --base")
    if args.concurrency < 1 or args.latency_ms < 0:
        ap.error("--concurrency must be >= 1 and --latency-ms >= 0")
    if args.base < args.concurrency:
        # the smaller run never fills its workers: the difference counts their start-up and drain
        print(
            f"note: --base {args.base} < --concurrency {args.concurrency}: the smaller run never"
            " reaches full concurrency, so the figure includes the ramp of the extra workers"
            " (compare like with like, or use --base >= --concurrency for a steady-state figure)",
            file=sys.stderr,
        )
    if args.hash_seed != "random" and not (args.hash_seed.isdigit() and int(args.hash_seed) <= 4294967295):
        ap.error(f"--hash-seed: expected 'random' or an integer 0..4294967295, got {args.hash_seed!r}")
    workload = Workload(args.concurrency, args.latency_ms, args.event_loop, args.hash_seed)
    runners = [r.strip() for r in args.runners.split(",") if r.strip()]
    unknown = sorted(set(runners) - set(RUNNERS))
    if unknown:
        ap.error(f"unknown runner(s) {', '.join(unknown)}; choose from {', '.join(RUNNERS)}")
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    baselines = find_baselines(args.baselines)
    results = {r: measure(r, args.n, args.base, baselines, workload) for r in runners}
    print(f"instructions per pipeline (callgrind, N={args.n} minus N={args.base}, {workload.describe()})")
    if any(r in TASKS_RUN for r in runners):
        print("  (handoff: the first of the 3 tasks hands each seed to the third; chain2: 2 tasks)")
    for r in runners:
        print(f"  {r:8} {results[r]['per_pipeline']:>12,.0f}  ({results[r]['per_task']:,.0f} per task)")
    ratios: dict[str, float] = {}
    if "product" in results:
        mine = results["product"]["per_pipeline"]
        for other in ("peer", "floor"):
            if other in results:
                # fewer instructions = more pipelines/s when CPU-bound: other/product ~ product/other speed
                ratio = ratios[f"product_vs_{other}"] = results[other]["per_pipeline"] / mine
                print(f"  {other}/product instructions (~ product/{other} speed): {ratio:.3f}")
    if "handoff" in results and "chain2" in results:
        jump, plain = results["handoff"]["per_pipeline"], results["chain2"]["per_pipeline"]
        extra = jump - plain
        ratio = ratios["handoff_vs_chain2"] = plain / jump
        print(f"  a jump over a checkpoint: {extra:+,.0f} per pipeline (chain2/handoff {ratio:.3f})")
    if args.out is not None:
        record = {"workload": vars(workload), "results": results, "ratios": ratios}
        args.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
