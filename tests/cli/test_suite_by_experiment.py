"""The ``by_experiment`` suite layout on real SQLite files: a catalog (``suite.db``) and one
store (and artifacts folder) per experiment, run by one runner; ``--experiment`` leaving the
other members' files byte-identical (not written, not migrated); a member's missing store
refused; a storage failure in one member's store stopping the suite. Budget, SIGKILL/resume,
task failures and the views are run over both layouts in test_suite_run / test_suite_views."""

from __future__ import annotations

import errno
import hashlib
import json
import sqlite3
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from pyattacker.config.build import load_config
from pyattacker.config.suite import check_suite
from pyattacker.config.suite_build import build_suite
from pyattacker.engine.runner import Runner
from pyattacker.errors import StoreUnavailable
from pyattacker.model import Batch
from pyattacker.plugins.store_base import StoreBase
from pyattacker.store.location import open_store
from pyattacker.store.suite_dir import experiment_prefix
from pyattacker.store.suite_store import SuiteStore
from tests.support.cli import cli, cli_env
from tests.support.sqlite_downgrades import downgrade_to_v7
from tests.support.suites import member, write_suite

SUITE = """
suite: {id: s1}
run: {concurrency: 3}
output: {root: out, layout: by_experiment}
experiments:
  a: {config: a.yaml, label: first}
  b: {config: b.yaml, label: second}
"""


@pytest.fixture
def env(tmp_path: Path, _isolated_home: Path) -> dict[str, str]:
    return cli_env(_isolated_home, tmp_path, SUITE_LEDGER=str(tmp_path / "ledger.tsv"))


def _suite(tmp_path: Path, n: int = 4) -> Path:
    source = f"{{kind: range, n: {n}}}"
    files = "pipeline: {name: p, tasks: [{use: 'suite_tasks:files'}, {use: 'suite_tasks:step', name: s1}]}\n"
    return write_suite(tmp_path, SUITE, {"a": files + f"source: {source}\n", "b": member(source)})


def _results(location: Path, env: dict[str, str], *extra: str) -> list[dict[str, Any]]:
    result = cli(["export", str(location), "-", "--rows", "results", *extra], env)
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def _hashes(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (lock and journal files included) and its SHA-256."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _schema(path: Path) -> int:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


def test_each_experiment_has_its_own_store_and_artifacts_folder(env: dict[str, str], tmp_path: Path) -> None:
    suite = _suite(tmp_path)
    result = cli(["run", "-c", str(suite), "--summary-format", "json"], env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["counters"]["pipelines_succeeded"] == 8
    out = tmp_path / "out"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["layout"] == "by_experiment" and manifest["catalog"] == "suite.db"
    assert manifest["experiments"]["a"]["store"] == "experiments/a/state.db"
    assert (out / "suite.db").is_file() and not (out / "state.db").exists()
    for exp in ("a", "b"):  # each member's store is an ordinary store holding its rows only
        rows = _results(out / "experiments" / exp / "state.db", env)
        assert len(rows) == 4 and {r["experiment_id"] for r in rows} == {exp}
        assert all(r["pipeline_id"].startswith(experiment_prefix("s1", exp)) for r in rows)
    assert _results(out / "suite.db", env) == []  # the catalog: runs and pools, no pipeline
    # the directory reads as one store: identity on every row, attempts numbered uniquely
    rows = _results(out, env)
    assert sorted(r["experiment_id"] for r in rows) == ["a"] * 4 + ["b"] * 4
    assert {r["suite_id"] for r in rows} == {"s1"} and all(r["local_key"] for r in rows)
    attempts = cli(["export", str(out), "-", "--rows", "attempts"], env).stdout.splitlines()
    ids = [json.loads(line)["attempt_id"] for line in attempts]
    assert len(ids) == 16 and len(set(ids)) == 16 and ids == sorted(ids)
    # a task's own files (ctx.artifact_dir) are under its experiment's folder
    written = sorted((out / "experiments" / "a" / "artifacts").rglob("out.txt"))
    assert len(written) == 4 and not (out / "artifacts").exists()
    assert {p.read_text() for p in written} == {r["pipeline_id"] for r in rows if r["experiment_id"] == "a"}
    combined = suite.read_text().replace("layout: by_experiment", "layout: combined")
    (tmp_path / "combined.yaml").write_text(combined)
    refused = cli(["run", "-c", str(tmp_path / "combined.yaml")], env)
    assert refused.returncode == 2 and "was written with layout 'by_experiment'" in refused.stderr


def test_selection_leaves_the_other_members_files_byte_identical(env: dict[str, str], tmp_path: Path) -> None:
    """`a` ran, and its store is put back at schema 7 (a file an older version wrote). Runs and
    resumes that select `b` neither write nor migrate any of `a`'s files; selecting `a` does."""
    suite = _suite(tmp_path)
    assert cli(["run", "-c", str(suite), "--experiment", "a"], env).returncode == 0
    a_folder = tmp_path / "out" / "experiments" / "a"
    a_store = a_folder / "state.db"
    downgrade_to_v7(a_store)
    assert _schema(a_store) == 7
    before = _hashes(a_folder)
    assert "state.db" in before and len(before) >= 2
    first = cli(["run", "-c", str(suite), "--experiment", "b", "--summary-format", "json"], env)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["counters"]["pipelines_succeeded"] == 4
    resumed = cli(["resume", "-c", str(suite), "--experiment", "b"], env)
    assert resumed.returncode == 0, resumed.stderr
    assert _hashes(a_folder) == before and _schema(a_store) == 7
    assert (
        sorted(r["experiment_id"] for r in _results(tmp_path / "out", env, "--experiment", "b")) == ["b"] * 4
    )
    again = cli(["resume", "-c", str(suite), "--experiment", "a", "--summary-format", "json"], env)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["counters"]["pipelines_succeeded"] == 0  # done already: skipped
    assert _schema(a_store) > 7  # the writer of a selected member migrates it


def test_a_members_missing_store_is_refused_not_recreated(env: dict[str, str], tmp_path: Path) -> None:
    suite = _suite(tmp_path, n=2)
    assert cli(["run", "-c", str(suite)], env).returncode == 0
    folder = tmp_path / "out" / "experiments" / "b"
    for path in folder.glob("state.db*"):
        path.unlink()
    result = cli(["resume", "-c", str(suite)], env)
    assert result.returncode == 2 and "experiments.b: its store" in result.stderr
    assert "is missing" in result.stderr and not (folder / "state.db").exists()
    view = cli(["report", str(tmp_path / "out")], env)
    assert view.returncode == 2 and "experiment 'b'" in view.stderr
    # a store the manifest never saw created (a run that could not open it) is no lost store
    manifest_path = tmp_path / "out" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    del manifest["experiments"]["b"]["store"]
    manifest_path.write_text(json.dumps(manifest))
    fresh = cli(["resume", "-c", str(suite), "--summary-format", "json"], env)
    assert fresh.returncode == 0, fresh.stderr
    assert json.loads(fresh.stdout)["counters"]["pipelines_succeeded"] == 2  # b's, from nothing


def _full_after(store: StoreBase, commits: int) -> StoreBase:
    """``store`` (real) whose commits fail once ``commits`` of them went through (a full disk)."""
    real = store.commit_behind
    left = [commits]

    def commit_behind(batch: Batch) -> Future[None] | None:
        left[0] -= 1
        if left[0] < 0:
            raise OSError(errno.ENOSPC, "No space left on device (injected)")
        return real(batch)

    store.commit_behind = commit_behind  # type: ignore[method-assign]
    return store


def test_a_storage_failure_in_one_members_store_stops_the_suite(
    env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Member b's disk fills up after a few commits: the run stops with a storage error
    instead of running a on alone (task failures, by contrast, stay in their member)."""
    source = "{kind: range, n: 40}"
    path = write_suite(tmp_path, SUITE, {"a": member(source), "b": member(source)})
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("SUITE_LEDGER", str(tmp_path / "ledger.tsv"))
    built = build_suite(check_suite(load_config(path)), {})

    def opener(location: str, read_only: bool) -> StoreBase:
        store = open_store(location, read_only=read_only)
        return _full_after(store, 3) if Path(location).parent.name == "b" else store

    store = SuiteStore(built.root, built.manifest, experiments=["a", "b"], read_only=False, opener=opener)
    runner = Runner(store, config=built.config, pools=built.pools)
    with runner, pytest.raises(StoreUnavailable, match="No space left on device"):
        runner.run(built.specs())
    rows = _results(built.root / "experiments" / "a" / "state.db", env)
    assert len([r for r in rows if r["state"] == "succeeded"]) < 40  # a stopped with the suite
