"""The scale scenario: run-level views on a 1,000,000-pipeline SQLite store (issue 51).

    python -m benchmarks.scale                       # 1M pipelines, the cached store
    python -m benchmarks.scale --pipelines 100000    # a smaller one
    python -m benchmarks.scale --store PATH          # any store built by ``scale_store``

The store is built once (``scale_store.cached_scale_store``: through the store API, cached
under ``$PYATTACKER_BENCH_CACHE`` or ``~/.cache/pyattacker-bench`` by size and schema version).
Then each measurement runs in a fresh process, timed from outside (wall) and through
``os.wait4`` (the child's CPU and peak RSS): ``report``, ``runs``, ``compare``, ``watch``'s first
frame and ``export`` as the commands a user types; every viewer endpoint as ``Api.call`` in a
process of its own, cold (its first call) and warm (its second, answer cache off); and a
``resume`` of run ``scale-a`` with nothing to do but its failed pipelines (on a copy of the
store, so the cached one stays as built). Prints a table and writes
``benchmarks/results/<date>-scale.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path
from typing import Any

from benchmarks.scale_store import RUNS, cached_scale_store

HERE = Path(__file__).resolve().parent
#: the viewer's JSON endpoints and the parameters each is asked with (``{pid}``: a pipeline)
ENDPOINTS: dict[str, dict[str, str]] = {
    "/stats": {},
    "/runs": {},
    "/compare": {"a": RUNS[0][0], "b": RUNS[1][0]},
    "/pipelines": {},
    "/pipelines?state=failed": {"state": "failed"},
    "/pipeline": {"pipeline_id": "{pid}"},
    "/failures": {},
    "/errors": {},
    "/timeline": {},
    "/events": {},
    "/metrics": {},
    "/resources": {},
    "/curves": {},
    "/logs": {},
}


def _pyattacker() -> list[str]:
    return [sys.executable, "-m", "pyattacker"]


def timed(argv: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``argv`` to its end: wall seconds, the child's CPU seconds and peak RSS (MB), exit
    code and the last line it printed (children's JSON answers come there)."""
    with tempfile.TemporaryFile() as out:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        _pid, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        out.seek(0)
        lines = out.read().decode(errors="replace").strip().splitlines()
    return {
        "wall_s": round(wall, 3),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
        "rss_mb": round(usage.ru_maxrss / 1024, 1),
        "exit": os.waitstatus_to_exitcode(status),
        "last": lines[-1] if lines else "",
    }


def _endpoint_child(location: str, path: str, params_json: str) -> None:
    """(In a child process) one endpoint, cold then warm; prints ``{"cold_s", "warm_s"}``."""
    from pyattacker_plugins.serve.api import Api

    params = json.loads(params_json)
    api = Api(location, answer_ttl_s=0.0)
    route = path.split("?", 1)[0]
    times = []
    for _ in range(2):
        t0 = time.perf_counter()
        api.call(route, params)
        times.append(round(time.perf_counter() - t0, 3))
    print(json.dumps({"cold_s": times[0], "warm_s": times[1]}))


def _resume_child(location: str, pipelines: int) -> None:
    """(In a child process) ``resume`` of run ``scale-a``: prints the run's counters."""
    from benchmarks.product_run import build_pools
    from benchmarks.scale_store import resume_specs
    from pyattacker import Runner

    with Runner(store=location, pools=build_pools(1000), concurrency=256) as runner:
        report = runner.run(resume_specs(pipelines), resume=True)
    print(json.dumps({k: report.counters.get(k) for k in ("skipped", "pipelines_done")}))


def _first_pipeline(path: Path) -> str:
    import sqlite3

    conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    try:
        return str(conn.execute("SELECT pipeline_id FROM pipeline_keys WHERE pk = 1").fetchone()[0])
    finally:
        conn.close()


def measure(path: Path, pipelines: int, only: set[str] | None = None) -> dict[str, Any]:
    """Every measurement on the store at ``path`` (``only``: those whose name starts so)."""
    store = str(path)
    a, b = RUNS[0][0], RUNS[1][0]
    commands = {
        "report": [*_pyattacker(), "report", store, "--run-id", a],
        "report --run-id all": [*_pyattacker(), "report", store, "--run-id", "all"],
        "runs": [*_pyattacker(), "runs", store],
        "compare": [*_pyattacker(), "compare", store, a, b],
        "watch (first frame)": [
            *_pyattacker(),
            "watch",
            store,
            "--run-id",
            a,
            "--iterations",
            "1",
            "--no-clear",
        ],
        "export --rows pipelines": [*_pyattacker(), "export", store, "--rows", "pipelines", os.devnull],
    }
    out: dict[str, Any] = {}
    for name, argv in commands.items():
        if only is None or any(name.startswith(o) for o in only):
            out[name] = timed(argv)
            print(f"  {name}: {out[name]}", flush=True)
    pid = _first_pipeline(path)
    for name, params in ENDPOINTS.items():
        if only is not None and not any(name.startswith(o) for o in only):
            continue
        filled = {k: v.replace("{pid}", pid) for k, v in params.items()}
        child = [
            sys.executable,
            "-m",
            "benchmarks.scale",
            "--child-endpoint",
            store,
            name,
            json.dumps(filled),
        ]
        result = timed(child)
        try:
            result.update(json.loads(result.pop("last")))
        except ValueError:
            result["error"] = "no answer (see exit)"
        out[f"GET {name}"] = result
        print(f"  GET {name}: {result}", flush=True)
    if only is None or "resume" in only:
        with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
            copy = Path(tmp) / "resume.db"
            shutil.copyfile(path, copy)
            child = [sys.executable, "-m", "benchmarks.scale", "--child-resume", str(copy), str(pipelines)]
            out["resume (nothing to do but failures)"] = timed(child)
        print(f"  resume: {out['resume (nothing to do but failures)']}", flush=True)
    return out


def _table(results: dict[str, Any]) -> str:
    rows = ["| what | wall s | CPU s | peak RSS MB | cold s | warm s |", "|---|---:|---:|---:|---:|---:|"]
    for name, r in results.items():
        cells = [r.get(k, "") for k in ("wall_s", "cpu_s", "rss_mb", "cold_s", "warm_s")]
        rows.append(f"| {name} | " + " | ".join(str(c) for c in cells) + " |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pipelines", type=int, default=1_000_000)
    parser.add_argument("--store", type=Path, help="a store built by scale_store (default: the cached one)")
    parser.add_argument("--only", help="comma-separated prefixes of the measurements to take")
    parser.add_argument(
        "--out", type=Path, help="results file (default: benchmarks/results/<date>-scale.json)"
    )
    parser.add_argument("--child-endpoint", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--child-resume", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_endpoint:
        _endpoint_child(*args.child_endpoint)
        return 0
    if args.child_resume:
        _resume_child(args.child_resume[0], int(args.child_resume[1]))
        return 0
    started = time.perf_counter()
    path = args.store or cached_scale_store(args.pipelines)
    built = time.perf_counter() - started
    print(f"store {path} ({path.stat().st_size / 1e6:.0f} MB; ready in {built:.1f} s)", flush=True)
    only = set(args.only.split(",")) if args.only else None
    results = measure(path, args.pipelines, only)
    print(_table(results))
    target = args.out or HERE / "results" / f"{date.today().isoformat()}-scale.json"
    doc = {
        "what": "issue 51 scale scenario: run-level views on a store of `pipelines` one-task pipelines",
        "how": "python -m benchmarks.scale; each measurement a fresh process (wall from outside, CPU and"
        " peak RSS of the child via wait4); endpoints via Api.call cold then warm (answer cache off)",
        "pipelines": args.pipelines,
        "store": str(path),
        "store_mb": round(path.stat().st_size / 1e6),
        "load_average": os.getloadavg(),
        "results": results,
    }
    target.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
