"""The log-normal latency scenario (issue 51): one-task pipelines whose latencies are drawn once
per seed, and the zero-overhead makespan the product's run is measured against."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from benchmarks import scenarios
from benchmarks.product_run import ideal_makespan, lognormal_latencies

from tests.support import REPO


def test_ideal_makespan_is_list_scheduling_in_seed_order() -> None:
    # two slots: 1 and 2 start at 0; 3 follows 1 (ends 4), 4 follows 2 (ends 6)
    assert ideal_makespan([1.0, 2.0, 3.0, 4.0], 4, 1, 2) == 6.0
    # two tasks per pipeline run back to back in one slot
    assert ideal_makespan([1.0, 1.0, 2.0, 2.0], 2, 2, 1) == 6.0
    # more slots than pipelines: the longest pipeline
    assert ideal_makespan([0.5, 0.25], 2, 1, 4096) == 0.5


def test_latencies_are_the_same_in_every_process() -> None:
    first = lognormal_latencies(100, 1, 0.2, 0.8)
    assert first == lognormal_latencies(100, 1, 0.2, 0.8)
    assert sorted(first)[50] < 0.3 < max(first)  # median near 200 ms, a long tail


def test_the_scenario_runs_every_concurrency_with_and_without_a_pool_of_four() -> None:
    sc = scenarios.build("lognormal", quick=True, scale=1.0, baselines=None, previous={})
    assert isinstance(sc, scenarios.Scenario)
    argv = {v.name: v.build(Path("/tmp"))[0].argv for v in sc.variants}
    assert set(argv) == {"product-c64", "product-c1024", "product-c4096", "product-c4096-pool4"}
    assert all("--sigma" in a and a[a.index("--tasks") + 1] == "1" for a in argv.values())
    assert argv["product-c4096-pool4"][-2:] == ["--resources", "4"]
    assert {c.metric for c in sc.checks} == {"fraction_of_ideal"}


def test_product_run_reports_the_fraction_of_the_ideal(tmp_path: Path) -> None:
    store = tmp_path / "p.db"
    out = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "product_run.py"), "--n", "40", "--tasks", "1",
         "--concurrency", "8", "--latency-ms", "5", "--sigma", "0.8", "--resources", "4",
         "--store", str(store)],
        capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    summary = json.loads(out.stdout)
    assert summary["status"] == "completed" and summary["pipelines_run"] == 40
    assert summary["ideal_makespan_s"] > 0 and summary["fraction_of_ideal"] > 0
    con = sqlite3.connect(store)
    try:
        held = {r for (r,) in con.execute("SELECT resource_id FROM resources")}
    finally:
        con.close()
    assert held == {"api-1", "api-2", "api-3", "api-4"}
