"""Views over a suite directory, through the real command line: ``report`` side by side,
``export`` with identity and ``--by-experiment``, ``watch``, and ``serve``'s experiments view
(a real server process on a loopback port; the dashboard in a real browser when installed).
Every test runs over both layouts: one ``state.db`` (``combined``) and one store per
experiment (``by_experiment``) read the same."""

from __future__ import annotations

import csv
import http.client
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.support.browser import render
from tests.support.cli import cli, cli_env
from tests.support.suites import member, write_suite
from tests.support.views import serving

SUITE = """
suite: {id: cmp}
run: {concurrency: 4}
output: {root: out, layout: LAYOUT}
experiments:
  good: {config: good.yaml, label: the good one}
  bad: {config: bad.yaml, label: the bad one}
"""
TOKEN = "suite-token"


@pytest.fixture(scope="module", params=["combined", "by_experiment"])
def suite_dir(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> tuple[Path, dict[str, str]]:
    """A finished suite: `good` (4 pipelines, score 1.0) and `bad` (4 pipelines, 2 failing,
    score 0.5 for the others); each task reports tokens 10 (a pipeline's metric: its latest
    value), summed per experiment."""
    folder = tmp_path_factory.mktemp("suite")
    env = cli_env(tmp_path_factory.mktemp("home"), folder, SUITE_LEDGER=str(folder / "ledger.tsv"))
    rows = "".join(json.dumps({"id": f"k{i}", "fail": i < 2, "score": 0.5}) + "\n" for i in range(4))
    (folder / "bad.jsonl").write_text(rows)
    members = {
        "good": member("{kind: range, n: 4}"),
        "bad": member("{kind: jsonl, path: bad.jsonl, key_field: id}"),
    }
    path = write_suite(folder, SUITE.replace("LAYOUT", request.param), members)
    result = cli(["run", "-c", str(path)], env)
    assert result.returncode == 1, result.stderr
    return folder / "out", env


def test_report_puts_the_experiments_side_by_side(suite_dir: tuple[Path, dict[str, str]]) -> None:
    root, env = suite_dir
    result = cli(["report", str(root)], env)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "suite cmp (2 experiment(s))"
    assert lines[1].split() == [
        "experiment",
        "total",
        "succeeded",
        "failed",
        "p50",
        "p95",
        "score",
        "tokens",
        "label",
    ]
    good, bad = (line.split() for line in lines[2:4])
    assert good[:4] == ["good", "4", "4", "0"] and good[6:8] == ["1", "40"]
    assert bad[:4] == ["bad", "4", "2", "2"] and bad[6:8] == ["0.5", "20"]
    doc = json.loads(cli(["report", str(root), "--json", "--experiment", "bad"], env).stdout)
    assert doc["suite_id"] == "cmp" and [r["experiment_id"] for r in doc["experiments"]] == ["bad"]
    row = doc["experiments"][0]
    assert row["by_state"] == {"failed": 2, "succeeded": 2} and row["metrics"] == {"score": 0.5, "tokens": 20}
    assert row["p50_ms"] is not None and row["label"] == "the bad one"
    unknown = cli(["report", str(root), "--experiment", "nope"], env)
    assert unknown.returncode == 2 and "no experiment 'nope'" in unknown.stderr


def test_export_carries_identity_and_splits_by_experiment(
    suite_dir: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    root, env = suite_dir
    result = cli(["export", str(root), str(tmp_path / "split"), "--rows", "results", "--by-experiment"], env)
    assert result.returncode == 0, result.stderr
    for exp, keys in (("good", None), ("bad", {"k0", "k1", "k2", "k3"})):
        rows = [json.loads(x) for x in (tmp_path / "split" / exp / "results.jsonl").read_text().splitlines()]
        assert len(rows) == 4 and {r["experiment_id"] for r in rows} == {exp}
        assert {r["suite_id"] for r in rows} == {"cmp"}
        if keys is not None:
            assert {r["local_key"] for r in rows} == keys
    as_csv = cli(
        ["export", str(root), str(tmp_path / "csv"), "--rows", "tasks", "--by-experiment", "--format", "csv"],
        env,
    )
    assert as_csv.returncode == 0, as_csv.stderr
    with open(tmp_path / "csv" / "bad" / "tasks.csv", newline="") as fh:
        assert len(list(csv.DictReader(fh))) == 2 * 2 + 2  # two tasks of each success, one of each failure
    one = cli(["export", str(root), "-", "--rows", "pipelines", "--experiment", "good"], env)
    pipes = [json.loads(x) for x in one.stdout.splitlines()]
    assert len(pipes) == 4 and {p["tags"]["experiment_id"] for p in pipes} == {"good"}


def test_watch_shows_the_suite(suite_dir: tuple[Path, dict[str, str]]) -> None:
    root, env = suite_dir
    result = cli(["watch", str(root), "--iterations", "1", "--no-clear", "--run-id", "all"], env)
    assert result.returncode == 0, result.stderr
    assert "8" in result.stdout  # every pipeline of both experiments


def _get(port: int, path: str) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("GET", path, headers={"Host": f"127.0.0.1:{port}", "Authorization": f"Bearer {TOKEN}"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read())
    finally:
        conn.close()


def test_serve_has_an_experiments_view(suite_dir: tuple[Path, dict[str, str]]) -> None:
    root, _env = suite_dir
    with serving(str(root), TOKEN) as (port, url):
        status, doc = _get(port, "/experiments")
        assert status == 200 and doc["suite_id"] == "cmp"
        assert {r["experiment_id"]: r["failed"] for r in doc["experiments"]} == {"good": 0, "bad": 2}
        status, one = _get(port, "/experiments?experiment=good")
        assert status == 200 and [r["experiment_id"] for r in one["experiments"]] == ["good"]
        status, stats = _get(port, "/stats?run_id=all")
        assert status == 200 and stats["pipelines"]["total"] == 8
        dom = render(url, budget_ms=3000)
        table = re.search(r'<table id="experiments">(.*?)</table>', dom, re.S)
        assert table is not None, dom[:2000]
        cells = re.findall(r"<td[^>]*>(.*?)</td>", table.group(1))
        assert cells[:5] == ["good", "the good one", "4", "4", "0"]


def test_a_plain_store_has_no_experiments_view(suite_dir: tuple[Path, dict[str, str]]) -> None:
    root, _env = suite_dir
    plain = root / "state.db"
    if not plain.exists():  # by_experiment: each experiment's store is a plain store
        plain = root / "experiments" / "good" / "state.db"
    with serving(str(plain), TOKEN) as (port, _url):
        status, doc = _get(port, "/experiments")
        assert status == 404 and "/experiments" not in doc.get("paths", [])
