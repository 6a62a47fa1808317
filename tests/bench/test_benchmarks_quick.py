"""The benchmark suite's CI smoke run: it completes and writes well-formed results.

No timing is asserted anywhere: CI machines are noisy, and the suite's numbers are read by
people (docs/performance.md), not by tests. This only guards the harness against rot.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO

REPO = REPO


@pytest.mark.timeout(600)
def test_quick_suite_writes_results(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    docs = REPO / "docs" / "performance.md"
    docs_before = docs.stat().st_mtime_ns if docs.exists() else None
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH")))),
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "--quick",
            "--scenario",
            "overhead,resume",
            "--rounds",
            "1",
            "--out",
            str(out),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=580,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(out.read_text())
    assert results["schema"] == 1 and results["quick"] is True
    assert {"generated_at", "machine", "scenarios"} <= results.keys()
    # children import compiled bytecode, as from an installed package (CI sets no-bytecode)
    assert results["machine"]["bytecode_warmed"] is True
    assert set(results["scenarios"]) == {"overhead", "resume"}
    for name, scenario in results["scenarios"].items():
        assert {
            "workload",
            "params",
            "rounds",
            "variants",
            "ratios",
            "checks",
            "errors",
        } <= scenario.keys(), name
        assert scenario["errors"] == [], scenario["errors"]
        for variant in scenario["variants"].values():
            assert len(variant["runs"]) == 1 and variant["runs"][0] is not None
            assert {"median", "min", "max"} <= variant["summary"]["wall_s"].keys()
        for ratio in scenario["ratios"]:
            assert {"name", "per_round", "median", "target", "met"} <= ratio.keys()
    product = results["scenarios"]["overhead"]["variants"]["product"]["runs"][0]
    assert {"pipelines_per_s", "wall_s", "peak_rss_mb", "store_bytes"} <= product.keys()
    assert product["pipelines_run"] == results["scenarios"]["overhead"]["params"]["n"]
    # the kernel's share of the CPU time is reported beside it (and is part of it)
    assert 0 <= product["sys_us_per_task"] <= product["cpu_us_per_task"] + 1.0
    # the loop the product ran on is recorded, and it is the one the machine info says is default
    assert product["event_loop"] == ("uvloop" if results["machine"]["uvloop"] else "asyncio")
    rerun = results["scenarios"]["resume"]["variants"]["product-rerun"]["runs"][0]
    assert (
        rerun["pipelines_run"] == 0
        and rerun["pipelines_skipped"] == results["scenarios"]["resume"]["params"]["n"]
    )
    assert (docs.stat().st_mtime_ns if docs.exists() else None) == docs_before  # --out leaves the docs alone


@pytest.mark.timeout(600)
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_instruction_counts_cancel_start_up_and_grow_with_the_work(tmp_path: Path) -> None:
    """``benchmarks.instructions`` counts with callgrind: the marginal cost of a pipeline is
    positive, and the JSON it writes carries it for each runner asked for."""
    out = tmp_path / "ins.json"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH")))),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.instructions", "--runners", "product", "--n", "40", "--base", "10",
         "--concurrency", "8", "--event-loop", "asyncio", "--out", str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=580,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(out.read_text())
    expected = {"concurrency": 8, "latency_ms": 0.0, "event_loop": "asyncio", "hash_seed": "0"}
    assert data["workload"] == expected
    assert "C=8, product loop asyncio" in proc.stdout
    product = data["results"]["product"]
    assert (product["n"], product["base"]) == (40, 10)
    # a pipeline runs 3 tasks, each checkpointed: thousands of instructions at the very least
    assert product["per_pipeline"] > 10_000 and product["per_task"] == pytest.approx(
        product["per_pipeline"] / 3
    )
    assert "instructions per pipeline" in proc.stdout


@pytest.mark.timeout(300)
def test_the_handoff_workload_jumps_once_per_pipeline_past_the_middle_task(tmp_path: Path) -> None:
    """The handoff scenario's two variants: ``product_run.py --handoff`` (t0 hands every seed to
    t2; t1 never runs) and a plain chain of two tasks; both count two tasks per pipeline."""
    from benchmarks import scenarios

    scenario = scenarios.build("handoff", quick=True, scale=1.0, baselines=None, previous={})
    assert isinstance(scenario, scenarios.Scenario)
    commands = {v.name: v.build(tmp_path)[0].argv for v in scenario.variants}
    assert commands["chain2"][-2:] == ["--tasks", "2"] and commands["handoff"][-1] == "--handoff"
    db = tmp_path / "h.db"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    script = str(REPO / "benchmarks" / "product_run.py")
    proc = subprocess.run(
        [sys.executable, script, "--n", "60", "--handoff", "--store", str(db)],
        env=env, capture_output=True, text=True, timeout=280,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout)
    assert (summary["tasks"], summary["handoff"], summary["pipelines_run"]) == (2, True, 60)
    assert summary["counters"]["handoffs"] == 60 and summary["status"] == "completed"
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        tasks = con.execute("SELECT name, state, COUNT(*) FROM tasks GROUP BY 1, 2 ORDER BY 1").fetchall()
        jumps = con.execute("SELECT from_task, to_task, COUNT(*) FROM handoffs GROUP BY 1, 2").fetchall()
        finals = con.execute("SELECT COUNT(*) FROM artifacts WHERE is_final").fetchone()[0]
    finally:
        con.close()
    assert tasks == [("t0", "handed_off", 60), ("t2", "succeeded", 60)]
    assert jumps == [("t0", "t2", 60)] and finals == 60
    refused = subprocess.run(
        [sys.executable, script, "--n", "5", "--handoff", "--tasks", "2", "--store", str(tmp_path / "x.db")],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert refused.returncode == 2 and "--handoff needs --tasks >= 3" in refused.stderr


@pytest.mark.timeout(300)
def test_row_costs_leave_out_only_the_rows_asked_for(tmp_path: Path) -> None:
    """``benchmarks.row_costs`` runs each variant as its own process; a variant's store holds
    every row but those it leaves out (what it measures is their cost), and the reference
    ``all`` is added when not asked for and runs around every variant, since each ratio is
    taken against the runs beside it."""
    out = tmp_path / "rows.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.row_costs", "--n", "150", "--rounds", "1",
         "--variants", "no-attempts,tasks-only", "--out", str(out)],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True,
        timeout=280,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    variants = json.loads(out.read_text())["variants"]
    assert list(variants) == ["all", "no-attempts", "tasks-only"]
    full = variants["all"]["rows"]
    # 150 pipelines x 3 tasks: a seed and three outputs each; the run's start and end events
    assert full == {"pipelines": 150, "tasks": 450, "artifacts": 600, "attempts": 450, "events": 152,
                    "pipeline_keys": 150}  # fmt: skip
    assert variants["no-attempts"]["rows"] == {**full, "attempts": 0}
    assert variants["tasks-only"]["rows"] == {**dict.fromkeys(full, 0), "tasks": 450, "pipeline_keys": 150}
    assert "ratio" not in variants["all"]
    # every variant between two runs of the reference: all, a, all, b, all
    assert [variants[v]["runs"] for v in variants] == [3, 1, 1]
    for name in ("no-attempts", "tasks-only"):
        ratio = variants[name]["ratio"]
        assert len(ratio["rounds"]) == 1 and ratio["median"] > 0
    assert "| no-attempts | attempts |" in proc.stdout and "| all | - | 1 (reference) |" in proc.stdout


#: a stand-in for a baseline script: checks it was asked for the overhead workload, then
#: reports the next of two rates (a counter file beside it), as the real ones print a summary
_FAKE_BASELINE = """
import argparse, json, pathlib, sys
ap = argparse.ArgumentParser()
ap.add_argument("--n", type=int); ap.add_argument("--out"); ap.add_argument("--sleep0", action="store_true")
args = ap.parse_args()
if args.n != 150 or not args.sleep0 or not args.out:
    sys.exit(3)
pathlib.Path(args.out).write_text("x")
counter = pathlib.Path(__file__).with_suffix(".count")
calls = int(counter.read_text()) if counter.exists() else 0
counter.write_text(str(calls + 1))
print(json.dumps({"pipelines_per_s": RATES[calls % 2], "elapsed_s": 1.0}))
"""


@pytest.mark.timeout(300)
def test_row_costs_read_each_variant_against_the_baselines_of_its_round(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--targets``: the floor runner and the peer run at each round's start and end, and every
    variant's rate (``all``: the mean of its runs) is taken over the mean of a baseline's two."""
    from benchmarks import row_costs

    base = tmp_path / "baselines"
    base.mkdir()
    for script, rates in (("floor_runner.py", (1000.0, 3000.0)), ("baseline_peer.py", (100.0, 300.0))):
        (base / script).write_text(f"RATES = {rates!r}\n" + _FAKE_BASELINE)
    out = tmp_path / "rows.json"
    argv = ["--n", "150", "--rounds", "1", "--variants", "none", "--targets", "--baselines", str(base)]
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        mp.setenv("PYTHONPATH", str(REPO))
        assert row_costs.main([*argv, "--out", str(out)]) == 0
    shown = capsys.readouterr().out
    variants = json.loads(out.read_text())["variants"]
    assert [(base / f"{s}.count").read_text() for s in ("floor_runner", "baseline_peer")] == ["2", "2"]
    every, none = variants["all"], variants["none"]
    assert every["runs"] == 2 and none["runs"] == 1
    # one round: the median of all's two runs is their mean, and a variant's one run is itself
    for kind, mean in (("floor", 2000.0), ("peer", 200.0)):
        for name in ("all", "none"):
            got = variants[name][f"vs_{kind}"]
            assert got["rounds"] == [pytest.approx(variants[name]["pipelines_per_s"] / mean)]
    assert "vs floor (target 0.3x) | vs peer (target 3x) |" in shown
    assert f"| {none['vs_floor']['median']:.3f}x (" in shown
    # a third floor run: the first rate again, and the file it wrote is gone
    assert row_costs.run_baseline("floor", base, 150, tmp_path) == 1000.0
    assert not list(tmp_path.glob("baseline-floor.out*"))
    # a baseline that fails says which one, and --targets without baselines stops before any run
    (base / "baseline_peer.py").write_text("import sys; sys.exit(5)\n")
    with pytest.raises(RuntimeError, match=r"baseline baseline_peer.py gave no rate \(5\)"):
        row_costs.run_baseline("peer", base, 150, tmp_path)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(row_costs, "measure", lambda *a, **k: pytest.fail("ran without baselines"))
        mp.setattr("benchmarks.scenarios.find_baselines", lambda given: None)
        assert row_costs.main(["--targets", "--baselines", str(tmp_path / "none")]) == 2
    assert "--targets: no floor_runner.py and baseline_peer.py in" in capsys.readouterr().err


@pytest.mark.timeout(300)
@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_row_costs_count_the_instructions_a_variant_leaves_out() -> None:
    """``--instructions`` counts a variant's own child under callgrind (start-up cancelled by
    two sizes): with every row left out a task costs far fewer instructions than with all."""
    from benchmarks import row_costs

    every, none = (row_costs.instructions_per_task(v, 30, 10) for v in ("all", "none"))
    # the rows are about half of a task's instructions; two counts of one variant differ by < 1 %
    assert 10_000 < none < 0.75 * every


def test_row_costs_reject_unknown_variants_and_a_store_without_the_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from benchmarks import row_costs

    bad = {
        ("--variants", "all,nope"): "unknown variant(s) nope",
        ("--child=nope", "--store", "x.db"): "--child: unknown variant 'nope'",
        ("--child=all",): "--child needs --store",
        ("--rounds", "0"): "--rounds must be >= 1",
    }
    for argv, message in bad.items():
        with pytest.raises(SystemExit) as err:
            row_costs.main(list(argv))
        assert err.value.code == 2
        assert message in capsys.readouterr().err
    # --instructions without valgrind: said at once, before any run
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(row_costs.shutil, "which", lambda _name: None)
        mp.setattr(row_costs, "measure", lambda *a, **k: pytest.fail("ran without valgrind"))
        assert row_costs.main(["--instructions"]) == 2
    # a kind the store no longer writes under that name: refused, never a run that leaves out nothing
    with pytest.raises(SystemExit, match=r"no write list entry for \['nope'\]"):
        row_costs.child(("nope",), 10, str(tmp_path / "x.db"))
    assert not (tmp_path / "x.db").exists()


def test_instruction_tool_rejects_bad_arguments() -> None:
    from benchmarks import instructions

    with pytest.raises(SystemExit) as err:
        instructions.main(["--n", "10", "--base", "10"])
    assert err.value.code == 2
    with pytest.raises(SystemExit) as err:
        instructions.main(["--runners", "product,nope"])
    assert err.value.code == 2
    with pytest.raises(SystemExit) as err:
        instructions.main(["--concurrency", "0"])
    assert err.value.code == 2
    for seed in ("-1", "x", "4294967296"):
        with pytest.raises(SystemExit) as err:
            instructions.main(["--hash-seed", seed])
        assert err.value.code == 2


def test_instructions_fix_the_hash_seed_of_the_measured_process(tmp_path: Path) -> None:
    """Counts repeat only with a fixed string hash seed: the measured process gets
    ``PYTHONHASHSEED`` (0 unless asked otherwise), whatever the caller's environment says."""
    from benchmarks import instructions

    if shutil.which("valgrind") is None:
        pytest.skip("valgrind is not installed")
    probe = [sys.executable, "-c", "import sys; sys.exit(0 if sys.flags.hash_randomization == 0 else 3)"]
    assert instructions.instructions(probe) > 0  # seed 0: hash randomization off, exit 0
    with pytest.raises(RuntimeError, match="callgrind run failed \\(3\\)"):
        instructions.instructions(probe, "random")


@pytest.mark.timeout(300)
def test_cli_runner_reports_a_sharded_run_like_the_other_runners(tmp_path: Path) -> None:
    """``benchmarks/cli_run.py`` (the shards scenario's runner) drives the real command, sharded
    or not, and prints one JSON summary with every pipeline counted once."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH")))),
    }
    for shards in (0, 2):
        proc = subprocess.run(
            [sys.executable, str(REPO / "benchmarks" / "cli_run.py"), "--n", "60", "--store",
             str(tmp_path / f"s{shards}.db"), "--shards", str(shards)],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=280,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        data = json.loads(proc.stdout.strip().splitlines()[-1])
        assert (data["pipelines_run"], data["shards"], data["status"]) == (60, shards or 1, "completed")
        assert data["pipelines_per_s"] > 0
        # the command's time around its runs: each part within the command, together no more
        assert data["start_s"] > 0 and data["tail_s"] > 0 and data["spread_s"] >= 0
        assert data["start_s"] + data["tail_s"] + data["spread_s"] < data["wall_s"]
        assert (data["spread_s"] == 0) == (shards == 0)  # one run ends when it ends
    assert {p.name for p in tmp_path.glob("s2.shard*of2.db")} == {"s2.shard0of2.db", "s2.shard1of2.db"}


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_product_runner_runs_on_the_loop_it_is_given(tmp_path: Path, loop: str) -> None:
    """``product_run.py --event-loop`` reaches the product (the instruction tool relies on it)."""
    if loop == "uvloop":
        pytest.importorskip("uvloop")
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "product_run.py"), "--n", "5", "--concurrency", "2",
         "--store", str(tmp_path / "s.db"), "--event-loop", loop],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["event_loop"] == loop and summary["pipelines_run"] == 5


def test_product_runner_passes_run_settings_to_the_runner(tmp_path: Path) -> None:
    """``product_run.py --set KEY=VALUE`` reaches the run: ``events=all`` stores an event per
    task's success, which the default does not; a value that is not JSON stays a string."""
    counts = {}
    for name, extra in (("default", []), ("all", ["--set", "events=all", "--set", "journal=full"])):
        store = tmp_path / f"{name}.db"
        proc = subprocess.run(
            [sys.executable, str(REPO / "benchmarks" / "product_run.py"), "--n", "4", "--concurrency", "2",
             "--store", str(store), *extra],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        summary = json.loads(proc.stdout.strip().splitlines()[-1])
        assert summary["settings"] == ({} if name == "default" else {"events": "all", "journal": "full"})
        with sqlite3.connect(store) as db:
            query = "SELECT count(*) FROM events_full WHERE kind = 'task.succeeded'"
            counts[name] = db.execute(query).fetchone()[0]
    assert counts == {"default": 0, "all": 12}
    bad = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "product_run.py"), "--n", "1", "--store",
         str(tmp_path / "x.db"), "--set", "events"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert bad.returncode == 2 and "expected KEY=VALUE" in bad.stderr


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_loop_ceiling_drains_every_pipeline_on_the_loop_it_is_given(loop: str) -> None:
    """``loop_ceiling.py``: the event loop alone runs n pipelines of the latency workload."""
    if loop == "uvloop":
        pytest.importorskip("uvloop")
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "loop_ceiling.py"), "--n", "40", "--concurrency", "8",
         "--latency-ms", "1", "--event-loop", loop],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["runner"] == "loop" and summary["event_loop"] == loop
    assert summary["pipelines_run"] == 40 and summary["tasks"] == 3
    # the fraction is of C / (tasks x latency): 8 / 3 ms here
    ideal = 8 / (3 * 0.001)
    assert summary["fraction_of_ideal"] == pytest.approx(summary["pipelines_per_s"] / ideal)
    # C workers, not more: 8 pipelines in flight at once at most, and at least once all 8
    assert summary["peak_in_flight"] == 8


@pytest.mark.parametrize("args", [["--n", "0"], ["--concurrency", "0"], ["--latency-ms", "0"]])
def test_loop_ceiling_refuses_an_empty_workload(args: list[str]) -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "loop_ceiling.py"), *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2 and "--latency-ms above 0" in proc.stderr


def test_loop_ceiling_refuses_a_loop_that_is_not_installed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--event-loop uvloop`` without uvloop: exit 2 naming the flag, before any run."""
    import importlib.util

    from pyattacker.engine import event_loop

    spec = importlib.util.spec_from_file_location("loop_ceiling", REPO / "benchmarks" / "loop_ceiling.py")
    assert spec is not None and spec.loader is not None
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    monkeypatch.setattr(event_loop, "_uvloop_module", lambda: None)
    monkeypatch.setattr(tool, "run", lambda *a, **k: pytest.fail("ran despite the bad flag"))
    with pytest.raises(SystemExit) as exit_info:
        tool.main(["--event-loop", "uvloop"])
    assert exit_info.value.code == 2
    assert "--event-loop uvloop: run.event_loop: 'uvloop' is not installed" in capsys.readouterr().err


def test_latency_scenario_measures_the_loop_alone_beside_the_product() -> None:
    """Each concurrency runs the loop alone on the product's workload, and the product's rate is
    also given as a fraction of it, round by round (a reference, not a target)."""
    from benchmarks import scenarios

    sc = scenarios.build("latency", quick=True, scale=1.0, baselines=None, previous={})
    assert not isinstance(sc, dict) and sc is not None
    by_name = {v.name: v for v in sc.variants}
    for c in (64, 256, 1024):
        (product,) = by_name[f"product-c{c}"].build(Path("/tmp/x"))
        (loop,) = by_name[f"loop-c{c}"].build(Path("/tmp/x"))
        assert loop.argv[1].endswith("loop_ceiling.py")
        for flag, value in (("--n", str(sc.params["n"])), ("--concurrency", str(c)), ("--latency-ms", "10")):
            assert loop.argv[loop.argv.index(flag) + 1] == value
            assert float(product.argv[product.argv.index(flag) + 1]) == float(value)
        (ratio,) = [r for r in sc.ratios if r.num == f"product-c{c}" and r.den == f"loop-c{c}"]
        assert ratio.target is None
        assert (f"loop-c{c}", "cpu_us_per_task") in sc.reported


def _documented_commands() -> list[tuple[str, list[str]]]:
    """Every ``python -m benchmarks...`` and ``python benchmarks/X.py`` line of
    docs/performance.md: (module, arguments)."""
    text = (REPO / "docs" / "performance.md").read_text()
    found = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if words[:2] == ["python", "-m"] and words[2].startswith("benchmarks"):
                found.append((words[2], words[3:]))
            elif words[:1] == ["python"] and words[1].startswith("benchmarks/"):
                found.append((words[1].removesuffix(".py").replace("/", "."), words[2:]))
    return found


DOCUMENTED = _documented_commands()


@pytest.mark.parametrize(("module", "args"), DOCUMENTED, ids=[" ".join([m, *a]) for m, a in DOCUMENTED])
def test_documented_benchmark_commands_parse(module: str, args: list[str]) -> None:
    """The commands docs/performance.md shows are accepted by the tools they name."""
    import importlib

    tool = importlib.import_module("benchmarks.harness" if module == "benchmarks" else module)
    tool.build_parser().parse_args(args)  # an unknown flag or a bad value exits with code 2


def test_the_docs_show_benchmark_commands() -> None:
    tools = {
        "benchmarks",
        "benchmarks.instructions",
        "benchmarks.profile_overhead",
        "benchmarks.row_costs",
        "benchmarks.product_run",
    }
    assert {m for m, _ in DOCUMENTED} >= tools


def test_short_noisy_scenarios_run_more_rounds_unless_told() -> None:
    sys.path.insert(0, str(REPO))
    try:
        from benchmarks import scenarios
        from benchmarks.harness import Scenario, scenario_rounds
    finally:
        sys.path.remove(str(REPO))

    def build(name: str) -> Scenario:
        sc = scenarios.build(name, quick=False, scale=1.0, baselines=None, previous={})
        assert isinstance(sc, Scenario)
        return sc

    resume, overhead, shards = build("resume"), build("overhead"), build("shards")
    assert scenario_rounds(resume, 3, explicit=False) == 7  # the default of 3 is raised
    assert scenario_rounds(shards, 3, explicit=False) == 5
    assert scenario_rounds(shards, 1, explicit=True) == 1
    assert scenario_rounds(overhead, 3, explicit=False) == 3
    assert scenario_rounds(resume, 2, explicit=True) == 2  # --rounds (or --quick) decides
    assert scenario_rounds(resume, 9, explicit=False) == 9


def test_docs_table_keeps_the_latest_of_every_scenario(tmp_path: Path) -> None:
    """A scenario re-run after midnight starts a new day's results file; the generated table
    still shows every scenario, each from the newest per-day file that has it, and says so."""
    sys.path.insert(0, str(REPO))
    try:
        from benchmarks.harness import SCHEMA, latest_scenarios, render_markdown
    finally:
        sys.path.remove(str(REPO))

    def scenario(tag: str) -> dict[str, object]:
        return {"workload": f"work {tag}", "params": {}, "variants": {}, "ratios": [], "checks": []}

    def day(name: str, quick: bool = False, schema: int = SCHEMA, **scenarios: object) -> None:
        doc = {"schema": schema, "quick": quick, "scenarios": scenarios}
        (tmp_path / name).write_text(json.dumps(doc))

    day("2026-11-28.json", overhead=scenario("old"), demo=scenario("old demo"))
    day("2026-11-29.json", overhead=scenario("newer"), latency=scenario("29"))
    day("2026-11-29-resume-7-rounds.json", resume=scenario("hand-named copy"))  # not a day file
    day("2026-11-30.json", quick=True, memory=scenario("a quick smoke run"))
    day("2026-11-27.json", schema=SCHEMA + 1, store=scenario("another schema"))
    now = {**scenario("now"), "measured_at": "T"}
    today = {"schema": SCHEMA, "quick": False, "scenarios": {"shards": now}}
    shown = latest_scenarios(tmp_path, today)["scenarios"]
    assert {name: sc["workload"] for name, sc in shown.items()} == {
        "shards": "work now",
        "overhead": "work newer",
        "latency": "work 29",
        "demo": "work old demo",
    }
    assert "from_file" not in shown["shards"] and shown["demo"]["from_file"] == "2026-11-28.json"
    text = render_markdown({**today, "scenarios": shown})
    assert "- **demo**: work old demo (). [from `benchmarks/results/2026-11-28.json`]" in text
    assert "- **shards**: work now (). [measured T]" in text


def test_variants_table_shows_the_kernels_share_of_the_cpu_when_reported() -> None:
    """The CPU column carries the system time in parentheses for runs that report it (the
    product) and the CPU time alone for older results that do not."""
    sys.path.insert(0, str(REPO))
    try:
        from benchmarks.harness import render_markdown
    finally:
        sys.path.remove(str(REPO))

    def variant(**summary: float) -> dict[str, object]:
        stats = {k: {"median": v, "min": v, "max": v} for k, v in summary.items()}
        return {"summary": stats, "runs": [summary]}

    sc = {
        "workload": "w",
        "params": {},
        "rounds": 1,
        "ratios": [],
        "checks": [],
        "variants": {
            "product": variant(pipelines_per_s=100.0, cpu_us_per_task=22.7, sys_us_per_task=5.8),
            "older": variant(pipelines_per_s=90.0, cpu_us_per_task=30.1),
        },
    }
    text = render_markdown({"schema": 1, "quick": False, "scenarios": {"overhead": sc}})
    rows = {line.split(" | ")[1]: line for line in text.splitlines() if line.startswith("| overhead | ")}
    assert " | 22.7 (5.8) | " in rows["product"]
    assert " | 30.1 | " in rows["older"] and "(" not in rows["older"].split(" | ")[6]


def test_a_reported_metric_is_shown_once_in_the_generated_tables() -> None:
    """A reported metric that the Variants table has a column for (CPU, wall time, bytes) is
    not repeated as a Targets row; the others (a command's start, a share of the cores) are
    listed under the Targets table, one line per scenario, and never as a Targets row."""
    sys.path.insert(0, str(REPO))
    try:
        from benchmarks.harness import render_markdown
    finally:
        sys.path.remove(str(REPO))

    def rep(variant: str, metric: str, median: float) -> dict[str, object]:
        return {"variant": variant, "metric": metric, "median": median, "min": median, "max": median}

    def scenario(*reported: dict[str, object]) -> dict[str, object]:
        return {
            "workload": "w",
            "params": {},
            "ratios": [],
            "checks": [],
            "variants": {},
            "reported": list(reported),
        }

    text = render_markdown(
        {
            "schema": 1,
            "quick": False,
            "scenarios": {
                "overhead": scenario(
                    rep("product", "cpu_us_per_task", 22.4), rep("product", "bytes_per_pipeline", 1780.0)
                ),
                "shards": scenario(
                    rep("two", "start_s", 0.12), rep("two", "tail_s", 0.07), rep("one", "run_share", 0.51)
                ),
                "demo": scenario(rep("demo", "wall_s", 1.37)),
            },
        }
    )
    assert "(reported)" not in text and "cpu_us_per_task" not in text and "wall_s" not in text
    assert (
        "- shards, reported (medians): two start_s 0.12, tail_s 0.07; one run_share 0.51" in text.splitlines()
    )
    assert text.index("### Targets") < text.index("- shards, reported") < text.index("### Variants")


@pytest.mark.parametrize("keep", [False, True])
def test_each_run_starts_settled_and_leaves_no_store_behind_unless_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keep: bool
) -> None:
    """A run must not pay for the pages earlier runs left dirty: the harness writes them back
    before each run's clock starts, and removes a run's files once it has read them (``--keep-tmp``
    keeps them)."""
    sys.path.insert(0, str(REPO))
    try:
        from benchmarks import harness
    finally:
        sys.path.remove(str(REPO))
    calls: list[str] = []
    monkeypatch.setattr(harness, "settle", lambda: calls.append("settle"))
    real_run_cmds = harness.run_cmds

    def run_cmds(*args: object, **kwargs: object) -> object:
        calls.append("run")
        return real_run_cmds(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(harness, "run_cmds", run_cmds)
    child = (
        "import json, sys; open(sys.argv[1], 'wb').write(b'x' * 65536);"
        " print(json.dumps({'pipelines_per_s': 1.0}))"
    )

    def build(tmp: Path) -> list[harness.Cmd]:
        return [harness.Cmd([sys.executable, "-c", child, str(tmp / "store.db")])]

    sc = harness.Scenario(
        "s", "a child that writes a store", {}, [harness.Variant("a", build), harness.Variant("b", build)]
    )
    result = harness.run_scenario(sc, 2, tmp_path, 60.0, lambda _msg: None, keep=keep)
    assert not result["errors"]
    assert calls == ["settle", "run"] * 4  # two variants, two rounds
    stores = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("store.db"))
    expected = [f"s/round{r}/{v}/store.db" for r in range(2) for v in "ab"]
    assert stores == (expected if keep else [])


def test_the_machine_is_read_at_both_ends_of_a_suite_and_shown_with_the_tables(tmp_path: Path) -> None:
    """A real reading (a CPU loop, real syncs of a file in ``tmp_path``) is summarized as
    fractions and milliseconds; the generated header shows the start and end readings, and
    results without them (quick runs, older files) show no such line."""
    sys.path.insert(0, str(REPO))
    try:
        from benchmarks.harness import render_markdown
        from benchmarks.machine import calibrate, describe
    finally:
        sys.path.remove(str(REPO))

    reading = calibrate(tmp_path)
    assert reading["loop_mips"] > 0 and 0 < reading["loop_slowest"] <= reading["loop_p10"] <= 1
    assert 0 < reading["sync_ms"] <= reading["sync_p90_ms"]
    assert list(tmp_path.iterdir()) == []  # the probe file is gone
    later = {**reading, "loop_slowest": 0.5}
    text = render_markdown(
        {
            "schema": 1,
            "quick": False,
            "machine": {"calibration_start": reading, "calibration_end": later},
            "scenarios": {},
        }
    )
    line = next(x for x in text.splitlines() if x.startswith("Machine at the start: "))
    assert f"Machine at the end: {describe(later)}." in line and "slowest 50 ms window 0.50 of" in line
    bare = render_markdown({"schema": 1, "quick": True, "machine": {}, "scenarios": {}})
    assert "Machine at" not in bare


def test_instruction_counts_never_depend_on_a_kept_plugin_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    """The two processes whose counts are subtracted run side by side: with the kept entry-point
    scan, whichever started first would scan and the other not (about 50 million instructions,
    more than the pipelines between them). Every measured process reads the metadata itself."""
    from benchmarks import instructions

    seen: list[dict[str, str]] = []

    class Done:
        returncode = 0
        stderr = "==1== I   refs:      1,234"

    def run(cmd: list[str], **kwargs: object) -> Done:
        seen.append(dict(kwargs["env"]))  # type: ignore[call-overload]
        return Done()

    monkeypatch.setenv("PYATTACKER_PLUGIN_CACHE", "1")
    monkeypatch.setattr(instructions.subprocess, "run", run)
    assert instructions.instructions([sys.executable, "-c", "pass"]) == 1234
    assert seen and seen[0]["PYATTACKER_PLUGIN_CACHE"] == "0" and seen[0]["PYTHONHASHSEED"] == "0"


def test_a_runs_share_of_the_cores_splits_their_time_four_ways(tmp_path: Path) -> None:
    """``machine.core_shares`` splits the cores' time between two readings into the run's own
    processes, everything else, the hypervisor and nothing; a child that keeps a core busy has
    a larger share than one that sleeps (real children, real ``/proc/stat``)."""
    sys.path.insert(0, str(REPO))
    try:
        from benchmarks.machine import CoreTimes, core_shares, core_times
    finally:
        sys.path.remove(str(REPO))

    before = CoreTimes(busy=100.0, idle=50.0, steal=5.0, children=10.0)
    after = CoreTimes(busy=106.0, idle=52.0, steal=7.0, children=13.0)
    assert core_shares(before, after) == {
        "run_cpu_s": 3.0,
        "run_share": 0.3,
        "other_share": 0.3,
        "steal_share": 0.2,
        "idle_share": 0.2,
    }
    # rusage and the kernel's ticks round differently: the run never takes more than was busy
    assert core_shares(before, after._replace(children=20.0))["other_share"] == 0.0
    assert core_shares(None, after) == {} and core_shares(before, before) == {}
    if core_times() is None:
        pytest.skip("no /proc/stat here")

    def share(code: str) -> dict[str, float]:
        first = core_times()
        subprocess.run([sys.executable, "-c", code], check=True)
        return core_shares(first, core_times())

    busy = share("import time\nend = time.process_time() + 0.4\nwhile time.process_time() < end: pass")
    asleep = share("import time; time.sleep(0.4)")
    for shares in (busy, asleep):
        parts = {k: v for k, v in shares.items() if k != "run_cpu_s"}
        assert set(parts) == {"run_share", "other_share", "steal_share", "idle_share"}
        assert all(0 <= v <= 1 for v in parts.values()) and abs(sum(parts.values()) - 1) < 1e-9
    assert busy["run_share"] > asleep["run_share"] and busy["run_cpu_s"] > asleep["run_cpu_s"]


def test_every_run_of_a_scenario_carries_its_share_of_the_cores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The harness reads the cores' time just before a variant's commands start and just after
    the last one is reaped, and stores the shares with that run (and its summary)."""
    sys.path.insert(0, str(REPO))
    try:
        from benchmarks import harness
        from benchmarks.machine import CoreTimes
    finally:
        sys.path.remove(str(REPO))
    readings = iter(
        [
            *(CoreTimes(0.0, 0.0, 0.0, 0.0), CoreTimes(8.0, 1.0, 1.0, 6.0)),  # round 1
            *(CoreTimes(8.0, 1.0, 1.0, 6.0), CoreTimes(10.0, 8.0, 2.0, 7.0)),  # round 2
        ]
    )
    events: list[str] = []
    monkeypatch.setattr(harness, "settle", lambda: events.append("settle"))

    def reading() -> CoreTimes:
        events.append("read")
        return next(readings)

    monkeypatch.setattr(harness, "core_times", reading)
    real_run_cmds = harness.run_cmds

    def run_cmds(*args: object, **kwargs: object) -> object:
        events.append("run")
        return real_run_cmds(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(harness, "run_cmds", run_cmds)
    child = "import json; print(json.dumps({'pipelines_per_s': 1.0}))"
    sc = harness.Scenario(
        "s", "a child", {}, [harness.Variant("a", lambda tmp: [harness.Cmd([sys.executable, "-c", child])])]
    )
    result = harness.run_scenario(sc, 2, tmp_path, 60.0, lambda _msg: None)
    assert not result["errors"] and events == ["settle", "read", "run", "read"] * 2
    runs = result["variants"]["a"]["runs"]
    assert [run["run_share"] for run in runs] == [0.6, 0.1]
    assert [run["run_cpu_s"] for run in runs] == [6.0, 1.0]
    assert [run["idle_share"] for run in runs] == [0.1, 0.7]
    assert result["variants"]["a"]["summary"]["steal_share"]["median"] == 0.1


def test_the_shards_scenario_compares_the_cpu_of_the_same_work_on_one_core_and_two() -> None:
    """Besides the rates, the shards scenario gives the CPU the same work took with both cores
    busy over one (per round, for the command and for the SDK processes) and shows where the
    two cores' time went in the runs of two processes."""
    sys.path.insert(0, str(REPO))
    try:
        from benchmarks import scenarios
        from benchmarks.harness import Scenario
    finally:
        sys.path.remove(str(REPO))
    sc = scenarios.build("shards", quick=True, scale=1.0, baselines=None, previous={})
    assert isinstance(sc, Scenario)
    cpu = {(r.num, r.den) for r in sc.ratios if r.metric == "run_cpu_s" and r.target is None}
    assert cpu == {("product-2shards", "product-1proc"), ("sdk-2proc", "sdk-1proc")}
    shares = {"run_share", "other_share", "steal_share", "idle_share"}
    for variant in ("product-2shards", "sdk-2proc"):
        assert shares <= {metric for name, metric in sc.reported if name == variant}


def test_rate_limits_reach_the_keys_combined_limit_with_no_429() -> None:
    """``rate_limits.py``: with each key's rpm on its resource, the provider never refuses and
    the ok requests per minute reach the keys' combined limit (capacity caps alone get 429s)."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "rate_limits.py"), "--minutes", "5", "--workers", "64"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["rate_limits"]["refused_429"] == 0
    assert summary["rate_limits"]["of_combined_limit"] >= 0.95
    assert summary["capacity_only"]["refused_429"] > 0


def test_the_scale_scenario_times_every_view_on_a_small_store(tmp_path: Path) -> None:
    """``benchmarks.scale`` end to end on 200 pipelines: every measurement ran and exited 0."""
    out = tmp_path / "scale.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.scale", "--pipelines", "200", "--out", str(out)],
        cwd=REPO,
        env={**os.environ, "PYATTACKER_BENCH_CACHE": str(tmp_path / "cache")},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(out.read_text())["results"]
    assert {"report", "runs", "compare", "GET /stats", "GET /pipelines", "GET /timeline"} <= set(results)
    assert all(r["exit"] == 0 for r in results.values()), results
    resumed = json.loads(results["resume (nothing to do but failures)"]["last"])
    assert resumed["skipped"] > resumed["pipelines_done"]  # the finished ones are not run again
