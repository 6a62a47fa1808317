"""Configs and scripts written for the reference implementation, run unchanged (issue 52).

Each test drives the real console entry point (``python -m pyattacker``) in a subprocess with
the reference's own form of a config or command, as a user coming from it would, on real
SQLite files; docs/configuration.md ("Coming from the reference") lists each form.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import cli, cli_env


@pytest.fixture
def env(tmp_path: Path, _isolated_home: Path) -> dict[str, str]:
    out = cli_env(_isolated_home, tmp_path)
    out.pop("PYATACKER_SHARD", None)
    return out


def _config(tmp_path: Path, body: str, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(body)
    return path


def _summary(result: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def _effective(cfg: Path, env: dict[str, str]) -> dict[str, Any]:
    result = cli(["validate", "-c", str(cfg), "--format", "json"], env)
    assert result.returncode == 0, result.stderr
    return _summary(result)


# -- 1. pool-level capacity ------------------------------------------------------------------
POOL_CAPACITY = """
run: {store: runs/p.db}
pools:
  apis:
    kind: llm
    capacity: 2
    resources: [{id: a}, {id: b, capacity: 5}]
  solo: {capacity: 3}
pipeline:
  name: qa
  tasks:
    - {use: simulate_llm, resource: apis, kwargs: {latency_ms: 1}}
    - {use: simulate_llm, resource: solo, kwargs: {latency_ms: 1}}
source: {kind: range, n: 6}
"""


def test_pool_level_capacity_is_each_resources_default_and_alone_declares_one(
    env: dict[str, str], tmp_path: Path
) -> None:
    cfg = _config(tmp_path, POOL_CAPACITY)
    pools = _effective(cfg, env)["pools"]
    assert [(r["id"], r["capacity"]) for r in pools["apis"]["resources"]] == [("a", 2), ("b", 5)]
    assert [(r["id"], r["capacity"]) for r in pools["solo"]["resources"]] == [("solo-1", 3)]
    result = cli(["run", "-c", str(cfg), "--summary-format", "json"], env)
    assert result.returncode == 0, result.stderr
    assert _summary(result)["counters"]["pipelines_succeeded"] == 6
    with sqlite3.connect(tmp_path / "runs" / "p.db") as con:
        rows = con.execute("SELECT pool, resource_id, spec_json FROM resources ORDER BY 1, 2").fetchall()
    assert [(p, r, json.loads(s)["capacity"]) for p, r, s in rows] == [
        ("apis", "a", 2),
        ("apis", "b", 5),
        ("solo", "solo-1", 3),
    ]
    # the spec's validation table: `pools.apis.capacity: 0` is a range error, reported once
    bad = _config(tmp_path, POOL_CAPACITY.replace("capacity: 2", "capacity: 0"), name="bad.yaml")
    refused = cli(["run", "-c", str(bad)], env)
    assert refused.returncode == 2
    problems = [line.strip() for line in refused.stderr.splitlines()[1:]]
    assert problems == ["pools.apis.capacity: Expected `int` >= 1, got 0"], refused.stderr


# -- 2. no source: section -------------------------------------------------------------------
def test_a_config_without_source_runs_one_pipeline_and_says_so(env: dict[str, str], tmp_path: Path) -> None:
    cfg = _config(tmp_path, "run: {store: runs/s.db}\npipeline: {name: p, tasks: [{use: echo}]}\n")
    result = cli(["run", "-c", str(cfg), "--summary-format", "json"], env)
    assert result.returncode == 0, result.stderr
    assert _summary(result)["counters"]["pipelines_succeeded"] == 1
    assert "no source: section: one pipeline runs" in result.stderr
    effective = _effective(cfg, env)
    assert effective["source"] == {"kind": "range", "repeats": 1, "n": 1, "limit": None}
    assert effective["source_is_default"] is True
    text = cli(["validate", "-c", str(cfg)], env)
    assert "# the default: the file has no source: section" in text.stdout


# -- 3. args: on a task entry ----------------------------------------------------------------
ARGS = """
pipeline:
  name: p
  tasks:
    - {use: flaky, args: [1]}
    - {use: simulate_llm, args: {latency_ms: 1, tokens: 8}}
source: {kind: range, n: 3}
"""


def test_args_are_factory_arguments_positional_or_named(env: dict[str, str], tmp_path: Path) -> None:
    cfg = _config(tmp_path, ARGS)
    same = _config(
        tmp_path,
        ARGS.replace("args: [1]", "kwargs: {fail_times: 1}").replace("args: {lat", "kwargs: {lat"),
        name="kwargs.yaml",
    )
    # one task, however its arguments are written: the same identity, so the same checkpoints
    assert _effective(cfg, env)["pipeline"]["spec_digest"] == _effective(same, env)["pipeline"]["spec_digest"]
    result = cli(["run", "-c", str(cfg), "--store", str(tmp_path / "a.db"), "--summary-format", "json"], env)
    assert result.returncode == 0, result.stderr
    counters = _summary(result)["counters"]
    assert counters["pipelines_succeeded"] == 3 and counters["retries"] == 3  # flaky failed once each
    bad = _config(
        tmp_path,
        ARGS.replace("args: [1]", "args: [1, retryable, m, extra]").replace("latency_ms: 1", "latncy_ms: 1"),
        name="bad.yaml",
    )
    refused = cli(["validate", "-c", str(bad)], env)
    assert refused.returncode == 2
    assert "pipeline.tasks[0].args: flaky takes at most 3 (fail_times, error, message)" in refused.stderr
    assert "pipeline.tasks[1].args.latncy_ms: unknown argument (did you mean latency_ms?)" in refused.stderr


# -- 4. the reference's built-in tasks -------------------------------------------------------
BUILTINS = """
run: {store: runs/b.db, concurrency: 4}
pools:
  apis: {capacity: 2}
pipeline:
  name: tour
  tasks:
    - {use: flaky, kwargs: {fail_times: 1}}
    - {use: delay, kwargs: {seconds: 0.001}}
    - use: fanout
      kwargs: {tasks: [echo, {use: delay, name: slow, kwargs: {seconds: 0}}]}
    - {use: leaky, kwargs: {pool: apis}}
    - {use: write_jsonl, kwargs: {path: out/rows.jsonl}}
source: {kind: range, n: 4}
"""


def test_the_reference_builtin_tasks_run_from_a_config(env: dict[str, str], tmp_path: Path) -> None:
    cfg = _config(tmp_path, BUILTINS)
    result = cli(["run", "-c", str(cfg), "--summary-format", "json"], env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    counters = _summary(result)["counters"]
    assert counters["pipelines_succeeded"] == 4 and counters["retries"] == 4
    assert counters["leases_leaked"] == 4  # leaky leaks on purpose; each one is reclaimed
    rows = [json.loads(line) for line in (tmp_path / "out" / "rows.jsonl").read_text().splitlines()]
    assert rows == [{"leaked": "apis-1"}] * 4
    strict = cli(["run", "-c", str(cfg), "--store", str(tmp_path / "strict.db"), "--strict-leases"], env)
    assert strict.returncode == 1  # with --strict-leases the leak fails the task

    boom = _config(
        tmp_path, "pipeline: {name: b, tasks: [{use: boom, kwargs: {message: kaput}}]}\n", "b.yaml"
    )
    failed = cli(["run", "-c", str(boom), "--store", str(tmp_path / "boom.db")], env)
    assert failed.returncode == 1
    report = cli(["report", str(tmp_path / "boom.db"), "--errors", "5"], env)
    assert "kaput" in report.stdout


# -- 5. what scripts parse -------------------------------------------------------------------
BROKEN_PLUGIN = "raise RuntimeError('broken at import')\n"


def test_script_facing_shapes_match_the_reference(env: dict[str, str], tmp_path: Path) -> None:
    bad = _config(tmp_path, "run: {concurency: 2}\npipeline: {tasks: [{use: echo}]}\n")
    for command in (["validate", "-c", str(bad)], ["run", "-c", str(bad)]):
        refused = cli(command, env)
        assert refused.returncode == 2
        assert refused.stderr.startswith(f"Config error: {bad}: invalid config\n"), refused.stderr

    (tmp_path / "broken_plugin_mod.py").write_text(BROKEN_PLUGIN)
    info = tmp_path / "broken_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pyattacker.plugins]\nbroken = broken_plugin_mod\n")
    listed = cli(["plugins", "--json"], {**env, "PYATTACKER_ONLY_PLUGINS": "pyattacker,broken-plugin"})
    assert listed.returncode == 0, listed.stderr
    document = json.loads(listed.stdout)
    assert set(document) == {"plugins", "errors"}
    assert "broken at import" in document["errors"]["broken"]
    assert {row["name"] for row in document["plugins"]} >= {"broken", "task-echo", "task-flaky"}

    export = tmp_path / "demo.jsonl"
    demo = cli(["demo", "--pipelines", "5", "--store", str(tmp_path / "d.db"), "--export", str(export)], env)
    assert demo.returncode == 0, demo.stderr
    rows = [json.loads(line) for line in export.read_text().splitlines()]
    assert len(rows) == 5 and {row["name"] for row in rows} == {"demo.qa"}


# -- 6. shards -------------------------------------------------------------------------------
def test_each_shard_expands_its_own_shard_variable(env: dict[str, str], tmp_path: Path) -> None:
    body = 'run: {store: runs/sh.db, label: "part ${PYATACKER_SHARD}"}\npipeline: {tasks: [{use: echo}]}\n'
    cfg = _config(tmp_path, body + "source: {kind: range, n: 8}\n")
    result = cli(["run", "-c", str(cfg), "--shards", "2", "--strict-env"], env)
    assert result.returncode == 0, result.stderr
    labels = []
    for i in range(2):
        with sqlite3.connect(tmp_path / "runs" / f"sh.shard{i}of2.db") as con:
            labels += [row[0] for row in con.execute("SELECT label FROM runs")]
    assert labels == ["part 0/2", "part 1/2"]
    one = cli(
        ["run", "-c", str(cfg), "--shard", "1/2", "--store", str(tmp_path / "one.db"), "--strict-env"], env
    )
    assert one.returncode == 0, one.stderr
    with sqlite3.connect(tmp_path / "one.db") as con:
        assert [row[0] for row in con.execute("SELECT label FROM runs")] == ["part 1/2"]


def test_one_shard_without_any_store_is_refused(
    env: dict[str, str], tmp_path: Path, _isolated_home: Path
) -> None:
    cfg = _config(tmp_path, "pipeline: {tasks: [{use: echo}]}\nsource: {kind: range, n: 4}\n")
    refused = cli(["run", "-c", str(cfg), "--shard", "0/2"], env)
    assert refused.returncode == 2
    assert refused.stderr.startswith("Config error: --shard: no store is set"), refused.stderr
    assert "--store PATH" in refused.stderr and "run.store" in refused.stderr
    assert not (_isolated_home / "runs").exists()  # no default store was made


# -- 7. one rule each: source.limit, watch --interval ----------------------------------------
def test_source_limit_and_watch_interval_rules(env: dict[str, str], tmp_path: Path) -> None:
    cfg = _config(tmp_path, "pipeline: {tasks: [{use: echo}]}\nsource: {kind: range, n: 10, limit: 3}\n")
    store = tmp_path / "l.db"
    result = cli(["run", "-c", str(cfg), "--store", str(store), "--summary-format", "json"], env)
    assert result.returncode == 0, result.stderr
    assert _summary(result)["counters"]["pipelines_succeeded"] == 3  # the first 3 of the range
    for limit in ("0", "-1", "2.5", "true"):
        bad = _config(
            tmp_path, f"pipeline: {{tasks: [{{use: echo}}]}}\nsource: {{kind: range, n: 3, limit: {limit}}}\n"
        )
        refused = cli(["validate", "-c", str(bad)], env)
        assert refused.returncode == 2 and "  source.limit: " in refused.stderr, (limit, refused.stderr)
    watched = cli(["watch", str(store), "--interval", "0", "--iterations", "2", "--no-clear"], env)
    assert watched.returncode == 0, watched.stderr
    assert watched.stdout.count("succeeded") >= 2
    negative = cli(["watch", str(store), "--interval", "-1", "--iterations", "1"], env)
    assert negative.returncode == 2 and "--interval" in negative.stderr


# -- 8. bench --json into a folder that does not exist ---------------------------------------
def test_bench_json_creates_its_folder(env: dict[str, str], tmp_path: Path) -> None:
    target = tmp_path / "results" / "nightly" / "bench.json"
    args = ["bench", "--jobs", "10", "--seeds", "1", "--algorithms", "wait", "--quiet", "--json", str(target)]
    result = cli(args, env)
    assert result.returncode == 0, result.stderr
    assert json.loads(target.read_text())["algorithms"]["wait"]["runs"][0]["metrics"]["jobs_done"] == 10
