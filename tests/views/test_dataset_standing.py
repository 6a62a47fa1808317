"""After a resume, the views still say where the whole dataset stands.

``report``, ``watch`` and the viewer show the latest run by default; a resume's run owns only
the pipelines it ran again. Each also shows every pipeline's current state across all runs on
its own line, and labels one run's counts as its share when they differ. ``report runs/x.db``
after ``run --shards 2`` into ``runs/x.db`` reads the shard stores, as ``resume`` finds them.
"""

from __future__ import annotations

import http.client
import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import cli, cli_env
from tests.support.views import serving

N = 40
TOKEN = "standing-43"


def _config(root: Path, store: str) -> Path:
    config = {
        "run": {"store": store},
        "source": {"kind": "range", "n": N},
        "pipeline": {
            "name": "standing",
            "tasks": [
                {
                    "use": "simulate_llm",
                    "kwargs": {"latency_ms": 0, "fail_rate": 0.3},
                    "retry": {"max_attempts": 1},
                }
            ],
        },
    }
    path = root / f"{Path(store).stem}.json"
    path.write_text(json.dumps(config))
    return path


@pytest.fixture(scope="module")
def resumed(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, str]]:
    """A store whose first run failed some pipelines and whose resume ran those again. Each
    attempt draws from a generator seeded by its attempt number, which a resume never reuses,
    so some of them succeed this time and (with these seeds) at least one fails again."""
    root = tmp_path_factory.mktemp("standing")
    env = cli_env(root / "home", root)
    store = str(root / "x.db")
    config = _config(root, store)
    assert cli(["run", "-c", str(config)], env).returncode == 1
    assert cli(["resume", "-c", str(config)], env).returncode == 1
    return store, env


def _counts(line: str) -> dict[str, int]:
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", line)}


def test_report_labels_the_latest_runs_share_and_shows_the_dataset(
    resumed: tuple[str, dict[str, str]],
) -> None:
    store, env = resumed
    done = cli(["report", store], env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    (share,) = [line for line in lines if line.startswith("pipelines")]
    assert share.startswith("pipelines (latest run's share): total=")
    (standing,) = [line for line in lines if line.startswith("dataset (all runs): ")]
    whole, part = _counts(standing), _counts(share)
    assert whole["total"] == N and whole["succeeded"] + whole["failed"] == N
    assert 0 < part["total"] < N and part["succeeded"] + part["failed"] == part["total"]
    assert 0 < part["failed"] == whole["failed"]  # only the resume's pipelines can still be failed


def test_report_json_carries_the_dataset(resumed: tuple[str, dict[str, str]]) -> None:
    store, env = resumed
    doc = json.loads(cli(["report", store, "--json"], env).stdout)
    assert doc["dataset"]["total"] == N
    assert sum(doc["dataset"]["by_state"].values()) == N
    assert doc["pipelines"]["total"] < N


def test_report_of_every_run_is_the_dataset_itself(resumed: tuple[str, dict[str, str]]) -> None:
    store, env = resumed
    done = cli(["report", store, "--run-id", "all"], env)
    assert f"pipelines: total={N} " in done.stdout
    assert "dataset (all runs)" not in done.stdout and "share" not in done.stdout


def test_watch_shows_the_share_and_the_dataset(resumed: tuple[str, dict[str, str]]) -> None:
    store, env = resumed
    done = cli(["watch", store, "--iterations", "1", "--no-clear"], env)
    assert done.returncode == 0, done.stderr
    assert "pipelines (latest run's share) " in done.stdout
    (standing,) = [line for line in done.stdout.splitlines() if line.startswith("dataset (all runs)")]
    assert _counts(standing)["total"] == N


def test_the_viewer_stats_carry_the_dataset(resumed: tuple[str, dict[str, str]]) -> None:
    store, _env = resumed
    with serving(store, TOKEN) as (port, _url):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            conn.request(
                "GET", "/stats", headers={"Host": f"127.0.0.1:{port}", "Authorization": f"Bearer {TOKEN}"}
            )
            resp = conn.getresponse()
            stats: dict[str, Any] = json.loads(resp.read())
        finally:
            conn.close()
    assert resp.status == 200
    assert stats["dataset"]["total"] == N and stats["pipelines"]["total"] < N


def test_report_of_a_sharded_runs_store_reads_its_shard_stores(tmp_path: Path) -> None:
    env = cli_env(tmp_path / "home", tmp_path)
    store = str(tmp_path / "runs" / "x.db")
    assert cli(["run", "-c", str(_config(tmp_path, store)), "--shards", "2"], env).returncode == 1
    done = cli(["report", store], env)
    assert done.returncode == 0, done.stderr
    assert "x.shard0of2.db" in done.stdout and "x.shard1of2.db" in done.stdout
    assert f"pipelines: total={N} " in done.stdout
    exported = cli(["export", store, "-", "--rows", "results"], env)
    assert len(exported.stdout.splitlines()) == N


def test_shard_stores_of_two_counts_are_named_not_guessed(tmp_path: Path) -> None:
    env = cli_env(tmp_path / "home", tmp_path)
    store = str(tmp_path / "x.db")
    config = str(_config(tmp_path, store))
    for n in ("2", "3"):
        assert cli(["run", "-c", config, "--shards", n], env).returncode == 1
    done = cli(["report", store], env)
    assert done.returncode == 2
    assert "--shards 2 and --shards 3" in done.stderr and "x.shard*of3.db" in done.stderr
