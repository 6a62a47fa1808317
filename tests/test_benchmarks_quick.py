"""The benchmark suite's CI smoke run: it completes and writes well-formed results.

No timing is asserted anywhere: CI machines are noisy, and the suite's numbers are read by
people (docs/performance.md), not by tests. This only guards the harness against rot.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


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
    rerun = results["scenarios"]["resume"]["variants"]["product-rerun"]["runs"][0]
    assert (
        rerun["pipelines_run"] == 0
        and rerun["pipelines_skipped"] == results["scenarios"]["resume"]["params"]["n"]
    )
    assert (docs.stat().st_mtime_ns if docs.exists() else None) == docs_before  # --out leaves the docs alone
