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
    python -m benchmarks.row_costs --variants tasks-only,none --targets   # against the targets

``--targets`` also runs the floor runner and the baseline peer at the start and at the end of
every round (found as the suite finds them, or in ``--baselines DIR``) and gives each variant's
rate over their mean in that round: the overhead targets (0.30x the floor, 3x the peer) read
against stores that write fewer rows, in the same minutes (the suite's own ratios are for
``all``).
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
    from pyattacker_plugins.store_sqlite import commit as sqlite_commit

    unknown = set(without) - {attr for attr, _ in sqlite_commit._WRITES}
    if unknown:  # the store no longer writes what this tool filters: say so, never measure nothing
        raise SystemExit(f"row_costs: the SQLite store has no write list entry for {sorted(unknown)}")
    sqlite_commit._WRITES = tuple((a, s) for a, s in sqlite_commit._WRITES if a not in without)
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


#: the overhead targets as ``--targets`` reads them: baseline script -> (label, target ratio)
BASELINES = {"floor": ("floor_runner.py", 0.30), "peer": ("baseline_peer.py", 3.0)}


def run_baseline(kind: str, base: Path, n: int, tmp: Path) -> float:
    """Pipelines/s of one fresh run of a baseline (``floor`` or ``peer``) on the overhead
    workload (``--sleep0``, C=64), started settled like the variants; its files removed."""
    from benchmarks.harness import _normalise, _parse, settle

    script = BASELINES[kind][0]
    out = tmp / f"baseline-{kind}.out"
    settle()
    cmd = [sys.executable, str(base / script), "--n", str(n), "--sleep0", "--out", str(out)]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    for path in tmp.glob(f"{out.name}*"):
        path.unlink()
    data = _parse(proc.stdout)
    rate = _normalise(data).get("pipelines_per_s") if proc.returncode == 0 and data else None
    if not isinstance(rate, int | float) or rate <= 0:
        raise RuntimeError(f"baseline {script} gave no rate ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return float(rate)


def instructions_per_task(name: str, n: int, base: int) -> float:
    """Marginal instructions per task of ``name`` under callgrind (``n`` minus ``base``)."""
    from benchmarks.instructions import marginal

    return marginal(lambda size, tmp: _child_cmd(name, size, tmp / "rows.db"), n, base) / 3


def measure(
    names: list[str],
    n: int,
    rounds: int,
    log: Callable[[str], None] = print,
    baselines: Path | None = None,
) -> dict[str, Any]:
    """``rounds`` rounds; in each, every variant runs between two runs of "all" (``all, a, all,
    b, ..., all``; the variants' order rotated from round to round), and its ratio is to the mean
    of those two: on a machine whose speed drifts within a minute, a variant is compared with
    what ran just before and just after it, not with one reference somewhere in the round.
    With ``baselines``, the floor runner and the peer also run first and last in every round,
    and every variant's rate (``all``: the mean of its runs in the round) is taken over the
    mean of each baseline's two runs (``vs_floor``, ``vs_peer``)."""
    from benchmarks.harness import summary

    variants = [name for name in names if name != "all"]
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in ["all", *variants]}
    ratios: dict[str, list[float]] = {name: [] for name in variants}
    against: dict[str, dict[str, list[float]]] = {kind: {name: [] for name in runs} for kind in BASELINES}
    with tempfile.TemporaryDirectory(prefix="pyattacker-rows-") as tmp:
        for r in range(rounds):
            shift = r % len(variants) if variants else 0
            order = variants[shift:] + variants[:shift]
            first = {k: run_baseline(k, baselines, n, Path(tmp)) for k in BASELINES} if baselines else {}
            before = run_variant("all", n, Path(tmp))
            runs["all"].append(before)
            rates = {"all": [before["pipelines_per_s"]]}
            line = [f"all {before['pipelines_per_s']:,.0f}/s"]
            for name in order:
                got = run_variant(name, n, Path(tmp))
                after = run_variant("all", n, Path(tmp))
                runs[name].append(got)
                runs["all"].append(after)
                rates[name] = [got["pipelines_per_s"]]
                rates["all"].append(after["pipelines_per_s"])
                reference = (before["pipelines_per_s"] + after["pipelines_per_s"]) / 2
                ratios[name].append(got["pipelines_per_s"] / reference)
                line += [f"{name} {got['pipelines_per_s']:,.0f}/s", f"all {after['pipelines_per_s']:,.0f}/s"]
                before = after
            if baselines is not None:
                for kind, rate in first.items():
                    last = run_baseline(kind, baselines, n, Path(tmp))
                    line.append(f"{kind} {rate:,.0f} / {last:,.0f}/s")
                    for name, got_rates in rates.items():
                        against[kind][name].append(statistics.fmean(got_rates) / ((rate + last) / 2))
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
        for kind, per_variant in against.items():
            if per_variant[name]:
                out[name][f"vs_{kind}"] = {**(summary(per_variant[name]) or {}), "rounds": per_variant[name]}
    return out


def _median_written(rs: list[dict[str, Any]], n: int) -> float | None:
    mb = [x["write_mb"] for x in rs if x.get("write_mb") is not None]
    return statistics.median(mb) * 1024 / n if mb else None


def render(results: dict[str, Any], n: int, rounds: int, ins: dict[str, float] | None) -> str:
    kinds = [k for k in BASELINES if any(f"vs_{k}" in r for r in results.values())]
    head = (
        "| variant | left out | pipelines/s vs all (min-max) | CPU µs/task (sys)"
        " | KB written / pipeline | bytes / pipeline |"
    )
    head += "".join(f" vs {k} (target {BASELINES[k][1]:g}x) |" for k in kinds)
    lines = [
        f"overhead workload, N={n:,}, C=64, {rounds} rounds (medians; a variant's ratio is to the"
        " mean of the runs of all just before and after it"
        + ("; against a baseline, to the mean of its runs at the round's start and end)" if kinds else ")"),
        "",
        head + (" instructions / task |" if ins else ""),
        "|---|---|---:|---:|---:|---:|" + "---:|" * len(kinds) + ("---:|" if ins else ""),
    ]
    for name, r in results.items():
        ratio = r.get("ratio")
        written = f"{r['written_kb_per_pipeline']:.1f}" if r["written_kb_per_pipeline"] is not None else "-"
        row = (
            f"| {name} | {', '.join(r['without']) or '-'} | {_span(ratio) if ratio else '1 (reference)'} "
            f"| {r['cpu_us_per_task']:.1f} ({r['sys_us_per_task']:.1f}) | {written} "
            f"| {r['bytes_per_pipeline']:,.0f} |"
        )
        row += "".join(f" {_span(r.get(f'vs_{k}'), 3)} |" for k in kinds)
        if ins:
            row += f" {ins[name]:,.0f} |"
        lines.append(row)
    return "\n".join(lines)


def _span(ratio: dict[str, Any] | None, digits: int = 2) -> str:
    """``median x (min-max)`` of a summarised ratio; ``-`` when there is none."""
    if not ratio:
        return "-"
    return f"{ratio['median']:.{digits}f}x ({ratio['min']:.{digits}f}-{ratio['max']:.{digits}f})"


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
    ap.add_argument(
        "--targets",
        action="store_true",
        help="also run the floor runner and the baseline peer in every round: each variant against them",
    )
    ap.add_argument(
        "--baselines", type=Path, default=None, help="folder with floor_runner.py and baseline_peer.py"
    )
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
    baselines = None
    if args.targets:
        from benchmarks.scenarios import find_baselines

        baselines = find_baselines(args.baselines)
        if baselines is None:  # said before minutes of runs, as for valgrind
            where = args.baselines or "$PYATTACKER_BASELINES, benchmarks/baselines or the shared folder"
            print(f"--targets: no floor_runner.py and baseline_peer.py in {where}", file=sys.stderr)
            return 2
    if "all" not in names:
        names.insert(0, "all")  # every ratio is to the runs of the full store beside it
    from benchmarks.harness import warm_bytecode

    warm_bytecode()  # the children import compiled modules, as from an install
    log = lambda s: print(s, file=sys.stderr)  # noqa: E731  (the rounds' progress on stderr)
    results = measure(names, args.n, args.rounds, log=log, baselines=baselines)
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
