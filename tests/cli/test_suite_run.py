"""``run``/``resume`` of an experiment suite, through the real console entry point on real
SQLite files: one process and one admission budget across members, pools shared by binding
and private otherwise, selection leaving the other members' rows alone, SIGKILL then resume
with no task replayed in any member, and the suite flags' refusals."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pyattacker.store.suite_dir import experiment_prefix
from tests.faults.harness import snapshot
from tests.support import REPO
from tests.support.cli import cli, cli_env
from tests.support.suites import member, read_ledger, write_suite

TWO = """
suite: {id: s1}
run: {concurrency: CONC}
output: {root: out, layout: LAYOUT}
experiments:
  a: {config: a.yaml, label: first}
  b: {config: b.yaml, label: second}
"""


@pytest.fixture
def env(tmp_path: Path, _isolated_home: Path) -> dict[str, str]:
    return cli_env(_isolated_home, tmp_path, SUITE_LEDGER=str(tmp_path / "ledger.tsv"))


def _body(conc: int, layout: str = "combined") -> str:
    return TWO.replace("CONC", str(conc)).replace("LAYOUT", layout)


def _two(tmp_path: Path, n: int = 6, conc: int = 4, layout: str = "combined", **kw: Any) -> Path:
    source = f"{{kind: range, n: {n}}}"
    return write_suite(tmp_path, _body(conc, layout), {"a": member(source, **kw), "b": member(source, **kw)})


def _rows(tmp_path: Path, env: dict[str, str], *extra: str) -> list[dict[str, Any]]:
    result = cli(["export", str(tmp_path / "out"), "-", "--rows", "results", *extra], env)
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_a_suite_runs_every_member_into_one_root_with_suite_identity(
    env: dict[str, str], tmp_path: Path
) -> None:
    suite = _two(tmp_path)
    result = cli(["run", "-c", str(suite), "--summary-format", "json"], env)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["counters"]["pipelines_succeeded"] == 12
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["version"] == 1 and manifest["suite_id"] == "s1" and manifest["layout"] == "combined"
    assert list(manifest["experiments"]) == ["a", "b"]
    rows = _rows(tmp_path, env)
    assert len(rows) == 12
    for exp in ("a", "b"):
        mine = [r for r in rows if r["experiment_id"] == exp]
        assert len(mine) == 6 and {r["suite_id"] for r in mine} == {"s1"}
        prefix = manifest["experiments"][exp]["prefix"]
        assert all(r["pipeline_id"].startswith(prefix) and r["key"] == r["pipeline_id"] for r in mine)
    # the same seed in two experiments is two pipelines, with the same local (standalone) key
    assert {r["local_key"] for r in rows if r["experiment_id"] == "a"} == {
        r["local_key"] for r in rows if r["experiment_id"] == "b"
    }
    standalone = cli(["run", "-c", str(tmp_path / "a.yaml"), "--store", str(tmp_path / "alone.db")], env)
    assert standalone.returncode == 0, standalone.stderr
    alone = cli(["export", str(tmp_path / "alone.db"), "-", "--rows", "results"], env)
    assert {json.loads(line)["key"] for line in alone.stdout.splitlines()} == {
        r["local_key"] for r in rows if r["experiment_id"] == "a"
    }


@pytest.mark.parametrize("layout", ["combined", "by_experiment"])
def test_the_shared_budget_is_never_exceeded_across_members(
    env: dict[str, str], tmp_path: Path, layout: str
) -> None:
    """concurrency 3 is the suite's: with two members of 30 pipelines each and private pools
    of capacity 8, the task bodies running at once (counted across members) never pass 3,
    whether the members share one store or each has its own."""
    suite = _two(tmp_path, n=30, conc=3, pool="model", layout=layout)
    result = cli(["run", "-c", str(suite)], env)
    assert result.returncode == 0, result.stderr
    peak = int((tmp_path / "ledger.tsv.peak").read_text())
    assert 1 <= peak <= 3
    assert len(read_ledger(tmp_path / "ledger.tsv")) == 2 * 30 * 2


def test_pools_are_private_unless_bound_to_a_shared_pool(env: dict[str, str], tmp_path: Path) -> None:
    body = """
suite: {id: s1}
output: {root: out}
pools: {shared: {resources: [{id: only, capacity: 1}]}}
experiments:
  a: {config: a.yaml, pool_bindings: {model: shared}}
  b: {config: b.yaml}
"""
    source = "{kind: range, n: 3}"
    suite = write_suite(
        tmp_path, body, {"a": member(source, pool="model"), "b": member(source, pool="model")}
    )
    result = cli(["run", "-c", str(suite)], env)
    assert result.returncode == 0, result.stderr
    tasks = cli(["export", str(tmp_path / "out"), "-", "--rows", "tasks"], env)
    by_pipeline = {}
    for line in tasks.stdout.splitlines():
        row = json.loads(line)
        by_pipeline.setdefault(row["pipeline_id"], set()).add(row["resource"])
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    prefix = {e: v["prefix"] for e, v in manifest["experiments"].items()}
    assert {r for p, rs in by_pipeline.items() if p.startswith(prefix["a"]) for r in rs} == {"shared"}
    assert {r for p, rs in by_pipeline.items() if p.startswith(prefix["b"]) for r in rs} == {
        "experiment:b:model"
    }


def test_an_explicit_acquire_by_the_members_pool_name_follows_its_binding(
    env: dict[str, str], tmp_path: Path
) -> None:
    """`ctx.acquire("model")` in a task: the bound member gets the shared pool, the unbound one
    its private `experiment:b:model` (neither pool is named `model` in the suite's run)."""
    body = """
suite: {id: s1}
output: {root: out}
pools: {shared: {resources: [{id: only, capacity: 2}]}}
experiments:
  a: {config: a.yaml, pool_bindings: {model: shared}}
  b: {config: b.yaml}
"""
    text = (
        "pools:\n  model: {resources: [{id: r1, capacity: 2}]}\n"
        "pipeline: {name: p, tasks: [{use: 'suite_tasks:named'}]}\nsource: {kind: range, n: 3}\n"
    )
    suite = write_suite(tmp_path, body, {"a": text, "b": text})
    result = cli(["run", "-c", str(suite), "--summary-format", "json"], env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["counters"]["pipelines_succeeded"] == 6
    attempts = cli(["export", str(tmp_path / "out"), "-", "--rows", "attempts"], env).stdout
    pools = {lease["pool"] for line in attempts.splitlines() for lease in json.loads(line)["leases"]}
    assert pools == {"shared", "experiment:b:model"}


def test_member_limits_and_the_total_limit(env: dict[str, str], tmp_path: Path) -> None:
    body = _body(2).replace("a: {config: a.yaml, label: first}", "a: {config: a.yaml, limit: 2}")
    source = "{kind: range, n: 6}"
    suite = write_suite(tmp_path, body, {"a": member(source), "b": member(source)})
    result = cli(["run", "-c", str(suite)], env)
    assert result.returncode == 0, result.stderr
    assert sorted(r["experiment_id"] for r in _rows(tmp_path, env)) == ["a"] * 2 + ["b"] * 6
    capped = cli(["run", "-c", str(suite), "--limit", "3", "--output-root", "capped"], env, cwd=tmp_path)
    assert capped.returncode == 0, capped.stderr
    rows = cli(["export", str(tmp_path / "capped"), "-", "--rows", "results"], env).stdout.splitlines()
    assert sorted(json.loads(x)["experiment_id"] for x in rows) == ["a", "a", "b"]  # taken in turn


def test_selected_members_leave_the_others_rows_untouched(env: dict[str, str], tmp_path: Path) -> None:
    suite = _two(tmp_path)
    assert cli(["run", "-c", str(suite), "--experiment", "a"], env).returncode == 0
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert list(manifest["experiments"]) == ["a"]
    before = cli(
        ["export", str(tmp_path / "out"), "-", "--rows", "attempts", "--experiment", "a"], env
    ).stdout
    assert before.count("\n") == 12
    result = cli(["run", "-c", str(suite), "--experiment", "b", "--summary-format", "json"], env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["counters"]["pipelines_succeeded"] == 6  # a's did not run again
    after = cli(["export", str(tmp_path / "out"), "-", "--rows", "attempts", "--experiment", "a"], env).stdout
    assert after == before
    assert [r["experiment_id"] for r in _rows(tmp_path, env, "--experiment", "b")] == ["b"] * 6
    unknown = cli(["run", "-c", str(suite), "--experiment", "zz"], env)
    assert unknown.returncode == 2 and "--experiment: no experiment 'zz' in suite 's1'" in unknown.stderr


@pytest.mark.parametrize("layout", ["combined", "by_experiment"])
def test_a_task_failure_in_one_member_never_stops_the_others(
    env: dict[str, str], tmp_path: Path, layout: str
) -> None:
    (tmp_path / "seeds.jsonl").write_text(
        "".join(json.dumps({"id": f"k{i}", "fail": i % 2}) + "\n" for i in range(6))
    )
    source = "{kind: jsonl, path: seeds.jsonl, key_field: id}"
    suite = write_suite(tmp_path, _body(2, layout), {"a": member(source), "b": member("{kind: range, n: 6}")})
    result = cli(["run", "-c", str(suite), "--summary-format", "json"], env)
    assert result.returncode == 1, result.stderr
    counters = json.loads(result.stdout)["counters"]
    assert counters["pipelines_failed"] == 3 and counters["pipelines_succeeded"] == 9


def test_a_member_whose_source_fails_is_reported_and_the_others_finish(
    env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "bad.jsonl").write_text('{"id": "k0"}\n{"id": "k1"}\nnot json\n')
    source = "{kind: jsonl, path: bad.jsonl, key_field: id}"
    suite = write_suite(tmp_path, _body(2), {"a": member(source), "b": member("{kind: range, n: 6}")})
    result = cli(["run", "-c", str(suite), "--summary-format", "json"], env)
    assert result.returncode == 1, result.stderr
    assert "experiment a: its source failed" in result.stderr and "invalid JSON line" in result.stderr
    assert json.loads(result.stdout)["counters"]["pipelines_succeeded"] == 8  # 2 of a, 6 of b
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert "invalid JSON line" in manifest["experiments"]["a"]["source_error"]
    assert "source_error" not in manifest["experiments"]["b"]


@pytest.mark.parametrize("layout", ["combined", "by_experiment"])
def test_sigkill_then_resume_replays_no_task_in_any_member(
    env: dict[str, str], tmp_path: Path, layout: str
) -> None:
    """The audit-ledger method of tests/faults: every (pipeline, task) whose artifact was
    durable when the process was killed is never executed by the resume, in either member
    (with ``by_experiment``, durable in the member's own store)."""
    suite = _two(tmp_path, n=40, conc=4, tasks=3, layout=layout)
    ledger = tmp_path / "ledger.tsv"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pyattacker", "run", "-c", str(suite)],
        env={**env, "SUITE_PAUSE": "0.02"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and proc.poll() is None and len(read_ledger(ledger)) < 60:
            time.sleep(0.02)
        assert proc.poll() is None, "the run ended before it could be killed"
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stores = [tmp_path / "out" / "state.db"]
    if layout == "by_experiment":
        stores = [tmp_path / "out" / "experiments" / exp / "state.db" for exp in ("a", "b")]
        assert all(store.exists() for store in stores) and not (tmp_path / "out" / "state.db").exists()
    durable = {
        (pid, seq)
        for store in stores
        for pid, seqs in snapshot("sqlite", store).artifact_slots.items()
        for seq in seqs
    }
    assert {pid[:23] for pid, _seq in durable} == {  # both members had durable work when killed
        experiment_prefix("s1", "a"),
        experiment_prefix("s1", "b"),
    }
    first = len(read_ledger(ledger))
    assert first < 2 * 40 * 3
    resumed = cli(["resume", "-c", str(suite), "--summary-format", "json"], env)
    assert resumed.returncode == 0, resumed.stderr
    replayed = [entry for entry in read_ledger(ledger)[first:] if entry in durable]
    assert replayed == []
    rows = _rows(tmp_path, env)
    assert len(rows) == 80 and {r["state"] for r in rows} == {"succeeded"}
    assert {r["experiment_id"] for r in rows} == {"a", "b"}


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--store", "x.db"], "--store: not allowed with a suite"),
        (["--shards", "2"], "--shards: not allowed with a suite"),
        (["--shard", "0/2"], "--shard: not allowed with a suite"),
    ],
)
def test_store_and_sharding_flags_are_refused_with_a_suite(
    env: dict[str, str], tmp_path: Path, flags: list[str], expected: str
) -> None:
    suite = _two(tmp_path)
    result = cli(["run", "-c", str(suite), *flags], env, cwd=tmp_path)
    assert result.returncode == 2 and expected in result.stderr
    assert "output root" in result.stderr or "one process" in result.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "x.db").exists()


def test_output_root_and_the_roots_it_refuses(env: dict[str, str], tmp_path: Path) -> None:
    suite = _two(tmp_path, n=2)
    moved = cli(["run", "-c", str(suite), "--output-root", "elsewhere"], env, cwd=tmp_path)
    assert moved.returncode == 0, moved.stderr
    assert (tmp_path / "elsewhere" / "manifest.json").exists() and not (tmp_path / "out").exists()
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "file.txt").write_text("not a suite")
    busy = cli(["run", "-c", str(suite), "--output-root", "busy"], env, cwd=tmp_path)
    assert busy.returncode == 2 and "output.root:" in busy.stderr and "not a suite directory" in busy.stderr
    other = suite.read_text().replace("id: s1", "id: s2")
    (tmp_path / "other.yaml").write_text(other)
    foreign = cli(
        ["run", "-c", str(tmp_path / "other.yaml"), "--output-root", "elsewhere"], env, cwd=tmp_path
    )
    assert foreign.returncode == 2 and "holds suite 's1', not 's2'" in foreign.stderr
    changed = suite.read_text().replace("a: {config: a.yaml, label: first}", "a: {config: a.yaml, limit: 1}")
    (tmp_path / "changed.yaml").write_text(changed)
    refused = cli(
        ["run", "-c", str(tmp_path / "changed.yaml"), "--output-root", "elsewhere"], env, cwd=tmp_path
    )
    assert refused.returncode == 2 and "experiments.a: its definition changed" in refused.stderr


def test_the_example_suite_runs(env: dict[str, str], tmp_path: Path) -> None:
    """examples/suite: two experiments over one dataset; `flaky` fails more often."""
    suite = REPO / "examples" / "suite" / "suite.yaml"
    result = cli(["run", "-c", str(suite), "--output-root", str(tmp_path / "cmp")], env)
    assert result.returncode == 1, result.stderr  # the flaky model fails some pipelines
    report = cli(["report", str(tmp_path / "cmp"), "--json"], env)
    rows = {r["experiment_id"]: r for r in json.loads(report.stdout)["experiments"]}
    assert rows["steady"]["total"] == rows["flaky"]["total"] == 20
    assert rows["flaky"]["failed"] > rows["steady"]["failed"]
