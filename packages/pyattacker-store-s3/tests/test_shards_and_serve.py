"""``--shards`` and ``serve`` on ``s3://`` stores, through the command line on a real S3 server.

Each shard writes its own prefix (``s3://b/run.shard{i}ofN``); ``report``, ``export`` and
``resume`` find them from the base location through the opener's ``list_stores``; ``serve``
answers its JSON API from an S3 store over real HTTP.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import boto3

from .conftest import BUCKET
from .test_runs import _cli, _config, _env


def _sharded_run(tmp_path: Path, name: str) -> str:
    _config(tmp_path, 24, "    - { use: pyattacker.tasks:echo }\n")
    base = f"s3://{BUCKET}/{name}-{tmp_path.name}/run"
    done = _cli(tmp_path, "run", "-c", "cfg.yaml", "--store", base, "--shards", "2")
    assert done.returncode == 0, done.stderr
    return base


def test_each_shard_writes_its_own_prefix_and_the_views_find_them(tmp_path: Path) -> None:
    base = _sharded_run(tmp_path, "shards")
    prefix = base.removeprefix(f"s3://{BUCKET}/")
    keys = boto3.client("s3").list_objects_v2(Bucket=BUCKET, Prefix=prefix)["Contents"]
    markers = sorted(k["Key"] for k in keys if k["Key"].endswith("/store.json"))
    assert markers == [f"{prefix}.shard0of2/store.json", f"{prefix}.shard1of2/store.json"]

    report = _cli(tmp_path, "report", base, "--json")
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["pipelines"]["by_state"] == {"succeeded": 24}

    exported = _cli(tmp_path, "export", base, "out.jsonl", "--rows", "results")
    assert exported.returncode == 0, exported.stderr
    keys_out = sorted(json.loads(line)["key"] for line in (tmp_path / "out.jsonl").read_text().splitlines())
    assert keys_out == sorted(f"r{i:03d}" for i in range(24))

    again = _cli(tmp_path, "resume", "-c", "cfg.yaml", "--store", base, "--shards", "2")
    assert again.returncode == 0, again.stderr
    assert "attempts 0" in again.stdout + again.stderr, again.stdout  # nothing left to run


def test_resume_with_another_shard_count_is_refused_by_name(tmp_path: Path) -> None:
    base = _sharded_run(tmp_path, "count")
    # a folder that shares the name but holds no store marker is not a store of a 3-shard run
    prefix = base.removeprefix(f"s3://{BUCKET}/")
    boto3.client("s3").put_object(Bucket=BUCKET, Key=f"{prefix}.shard0of3/notes.txt", Body=b"not a store")
    wrong = _cli(tmp_path, "resume", "-c", "cfg.yaml", "--store", base, "--shards", "3")
    assert wrong.returncode == 2, wrong.stdout + wrong.stderr
    assert f"{base}.shard*of2" in wrong.stderr, wrong.stderr
    assert "--shards 2" in wrong.stderr


def test_serve_answers_from_an_s3_store(tmp_path: Path) -> None:
    _config(tmp_path, 5, "    - { use: pyattacker.tasks:echo }\n")
    store = f"s3://{BUCKET}/serve-{tmp_path.name}/run"
    done = _cli(tmp_path, "run", "-c", "cfg.yaml", "--store", store)
    assert done.returncode == 0, done.stderr
    argv = [sys.executable, "-m", "pyattacker", "serve", store, "--port", "0", "--token", "s3-token"]
    proc = subprocess.Popen(
        argv, cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert match, (line, proc.stderr.read() if proc.poll() is not None and proc.stderr else "")
        url = f"http://127.0.0.1:{match.group(1)}"

        def get(path: str, token: str | None = "s3-token") -> tuple[int, dict]:
            request = urllib.request.Request(url + path)
            if token:
                request.add_header("Authorization", f"Bearer {token}")
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    return response.status, json.loads(response.read())
            except urllib.error.HTTPError as exc:
                return exc.code, {}

        status, stats = get("/stats")
        assert status == 200
        assert stats["run"]["status"] == "completed"
        assert "succeeded" in json.dumps(stats) and "5" in json.dumps(stats)
        status, pipelines = get("/pipelines")
        assert status == 200
        assert sorted(r["key"] for r in pipelines["rows"]) == [f"r{i:03d}" for i in range(5)]
        assert {r["state"] for r in pipelines["rows"]} == {"succeeded"}
        assert get("/stats", token=None)[0] == 401  # the token still guards an S3 store
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
