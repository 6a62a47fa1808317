"""What each kind of row the SQLite store writes costs a run: the overhead workload with one kind
left out at a time, against the same workload with every row, run just before and just after it.

A task's checkpoint writes several rows (its task row, its output, its attempt, shares of its
pipeline's row and events); profiles spread their cost over SQLite's binding, B-tree and log
code, where no single function stands out. Leaving a kind out shows what the whole of it costs:
the Python that builds its parameters, SQLite's work for the row and its indexes, and the pages
it adds to every group commit's log and checkpoint, which instruction counts do not see.

A variant's store is **not a valid store** (the rows left out are missing): this measures the
bound a schema change could reach, never the product. The product is not changed to allow it:
the child process filters the SQLite store's write list (``store._WRITES``) before its run,
and reports the rows each table holds afterwards, so that a filter that stopped working shows.

    python -m benchmarks.row_costs                          # every variant, 5 rounds, N=20,000
    python -m benchmarks.row_costs --variants all,no-attempts,tasks-only --rounds 7
    python -m benchmarks.row_costs --instructions           # also instructions per task (callgrind)
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
#: row kinds a variant may leave out (``Batch`` attributes; ``pipelines`` includes the cursor
#: advances, which the store applies together with the pipeline rows)
KINDS = ("pipelines", "tasks", "artifacts", "attempts", "events")
#: variant name -> the kinds it leaves out; "all" is the reference every ratio is taken against
VARIANTS: dict[str, tuple[str, ...]] = {
    "all": (),
    **{f"no-{kind}": (kind,) for kind in KINDS},
    # one row per task: the bound of a schema whose task row carries its attempt and output
    "tasks-only": tuple(k for k in KINDS if k != "tasks"),
    # no rows at all: the runner, the keys, the run's own rows and the commits themselves
    "none": KINDS,
}
#: tables counted after each run (``no-pipelines`` leaves the key table as it is)
_TABLES = ("pipelines", "tasks", "artifacts", "attempts", "events", "pipeline_keys")


def child(without: tuple[str, ...], n: int, store: str) -> dict[str, Any]:
    """Run the overhead workload with the store's writes of ``without`` filtered out; the
    summary of ``product_run`` plus ``rows``, the rows each table holds afterwards."""
    if str(REPO) not in sys.path:  # (run as a script, by path: see ``_child_cmd``)
        sys.path.insert(0, str(REPO))
    from benchmarks import product_run
    from pyattacker_plugins.store_sqlite import store as sqlite_store

    unknown = set(without) - {attr for attr, _ in sqlite_store._WRITES}
    if unknown:  # the store no longer writes what this tool filters: say so, never measure nothing
        raise SystemExit(f"row_costs: the SQLite store has no write list entry for {sorted(unknown)}")
    sqlite_store._WRITES = tuple((a, s) for a, s in sqlite_store._WRITES if a not in without)
    summary = product_run.run(store, n)
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as conn:
        summary["rows"] = {t: conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in _TABLES}
    conn.close()
    summary["without"] = list(without)
    return summary


def _child_cmd(name: str, n: int, store: Path) -> list[str]:
    """The child of a variant, by path, so that it runs from any directory and under callgrind."""
    return [
        sys.executable,
        str(Path(__file__).resolve()),
        f"--child={name}",
        "--n",
        str(n),
        "--store",
        str(store),
    ]


def run_variant(name: str, n: int, tmp: Path) -> dict[str, Any]:
    """One fresh process of ``name`` on a fresh store (started settled, as the suite's runs)."""
    from benchmarks.harness import settle

    store = tmp / f"{name}.db"
    settle()
    proc = subprocess.run(_child_cmd(name, n, store), capture_output=True, text=True, check=False)
    for path in tmp.glob(f"{store.name}*"):
        path.unlink()
    if proc.returncode != 0:
        raise RuntimeError(f"variant {name} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def instructions_per_task(name: str, n: int, base: int) -> float:
    """Marginal instructions per task of ``name`` under callgrind (``n`` minus ``base``)."""
    from benchmarks.instructions import marginal

    return marginal(lambda size, tmp: _child_cmd(name, size, tmp / "rows.db"), n, base) / 3


def measure(names: list[str], n: int, rounds: int, log: Callable[[str], None] = print) -> dict[str, Any]:
    """``rounds`` rounds; in each, every variant runs between two runs of "all" (``all, a, all,
    b, ..., all``; the variants' order rotated from round to round), and its ratio is to the mean
    of those two: on a machine whose speed drifts within a minute, a variant is compared with
    what ran just before and just after it, not with one reference somewhere in the round."""
    from benchmarks.harness import summary

    variants = [name for name in names if name != "all"]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in ["all", *variants]}
    ratios: dict[str, list[float]] = {name: [] for name in variants}
    with tempfile.TemporaryDirectory(prefix="pyattacker-rows-") as tmp:
        for r in range(rounds):
            shift = r % len(variants) if variants else 0
            order = variants[shift:] + variants[:shift]
            before = run_variant("all", n, Path(tmp))
            runs["all"].append(before)
            line = [f"all {before['pipelines_per_s']:,.0f}/s"]
            for name in order:
                got = run_variant(name, n, Path(tmp))
                after = run_variant("all", n, Path(tmp))
                runs[name].append(got)
                runs["all"].append(after)
                reference = (before["pipelines_per_s"] + after["pipelines_per_s"]) / 2
                ratios[name].append(got["pipelines_per_s"] / reference)
                line += [f"{name} {got['pipelines_per_s']:,.0f}/s", f"all {after['pipelines_per_s']:,.0f}/s"]
                before = after
            log(f"round {r + 1}/{rounds}: " + ", ".join(line))
    out: dict[str, Any] = {}
    for name, rs in runs.items():
        out[name] = {
            "without": list(VARIANTS[name]),
            "runs": len(rs),
            "pipelines_per_s": statistics.median(x["pipelines_per_s"] for x in rs),
            "cpu_us_per_task": statistics.median(x["cpu_us_per_task"] for x in rs),
            "sys_us_per_task": statistics.median(x["sys_us_per_task"] for x in rs),
            "written_kb_per_pipeline": _median_written(rs, n),
            "bytes_per_pipeline": statistics.median(x["bytes_per_pipeline"] for x in rs),
            "rows": rs[-1]["rows"],
        }
        if name in ratios:
            out[name]["ratio"] = {**(summary(ratios[name]) or {}), "rounds": ratios[name]}
    return out


def _median_written(rs: list[dict[str, Any]], n: int) -> float | None:
    mb = [x["write_mb"] for x in rs if x.get("write_mb") is not None]
    return statistics.median(mb) * 1024 / n if mb else None


def render(results: dict[str, Any], n: int, rounds: int, ins: dict[str, float] | None) -> str:
    head = (
        "| variant | left out | pipelines/s vs all (min-max) | CPU µs/task (sys)"
        " | KB written / pipeline | bytes / pipeline |"
    )
    lines = [
        f"overhead workload, N={n:,}, C=64, {rounds} rounds (medians; a variant's ratio is to the"
        " mean of the runs of all just before and after it)",
        "",
        head + (" instructions / task |" if ins else ""),
        "|---|---|---:|---:|---:|---:|" + ("---:|" if ins else ""),
    ]
    for name, r in results.items():
        ratio = r.get("ratio")
        cell = f"{ratio['median']:.2f}x ({ratio['min']:.2f}-{ratio['max']:.2f})" if ratio else "1 (reference)"
        written = f"{r['written_kb_per_pipeline']:.1f}" if r["written_kb_per_pipeline"] is not None else "-"
        row = (
            f"| {name} | {', '.join(r['without']) or '-'} | {cell} | {r['cpu_us_per_task']:.1f} "
            f"({r['sys_us_per_task']:.1f}) | {written} | {r['bytes_per_pipeline']:,.0f} |"
        )
        if ins:
            row += f" {ins[name]:,.0f} |"
        lines.append(row)
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """The command line (the docs' example commands are parsed with it by a test)."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.row_costs", description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--variants", default=",".join(VARIANTS), help=f"comma-separated, of: {', '.join(VARIANTS)}"
    )
    ap.add_argument("--n", type=int, default=20_000, help="pipelines per run (x 3 tasks)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--instructions", action="store_true", help="also count instructions per task (valgrind)")
    ap.add_argument("--ins-n", type=int, default=1500, help="pipelines in the larger callgrind run")
    ap.add_argument("--ins-base", type=int, default=300, help="pipelines in the smaller callgrind run")
    ap.add_argument("--out", type=Path, default=None, help="also write the results as JSON here")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--store", default=None, help=argparse.SUPPRESS)
    return ap


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.child is not None:
        if args.child not in VARIANTS:
            ap.error(f"--child: unknown variant {args.child!r}; choose from {', '.join(VARIANTS)}")
        if not args.store:
            ap.error("--child needs --store (the path of the variant's store)")
        print(json.dumps(child(VARIANTS[args.child], args.n, args.store)))
        return 0
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        ap.error(f"unknown variant(s) {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")
    if args.n < 1 or args.rounds < 1 or args.ins_n <= args.ins_base:
        ap.error("--n and --rounds must be >= 1, and --ins-n larger than --ins-base")
    if args.instructions and shutil.which("valgrind") is None:  # said before minutes of runs
        print("--instructions: valgrind is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    if "all" not in names:
        names.insert(0, "all")  # every ratio is to the runs of the full store beside it
    from benchmarks.harness import warm_bytecode

    warm_bytecode()  # the children import compiled modules, as from an install
    results = measure(names, args.n, args.rounds, log=lambda s: print(s, file=sys.stderr))
    ins = None
    if args.instructions:
        ins = {name: instructions_per_task(name, args.ins_n, args.ins_base) for name in names}
        for name in names:
            results[name]["instructions_per_task"] = ins[name]
    print(render(results, args.n, args.rounds, ins))
    if args.out is not None:
        args.out.write_text(
            json.dumps({"n": args.n, "rounds": args.rounds, "variants": results}, indent=1) + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
