"""Real runs into ``s3://`` through the command line: run, report, export; SIGKILL and resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from pyattacker_store_s3.store import S3Store

from pyattacker.errors import ConfigError
from pyattacker.plugins.api import iter_rows
from pyattacker.testing.audit import LEDGER_ENV, read_ledger

from .conftest import BUCKET, PLUGIN

HERE = Path(__file__).parent
AUDITED = "    - { use: pyattacker.testing.audit:step }\n"


def _env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYATTACKER_ONLY_PLUGINS": PLUGIN, "PYTHONPATH": path, **extra}


def _cli(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pyattacker", *args]
    return subprocess.run(cmd, cwd=tmp_path, env=_env(**env), capture_output=True, text=True, timeout=300)


def _config(tmp_path: Path, rows: int, tasks: str) -> None:
    data = "".join(
        json.dumps({"id": f"r{i:03d}", "text": f"row {i} " + "x" * 64}) + "\n" for i in range(rows)
    )
    (tmp_path / "data.jsonl").write_text(data)
    (tmp_path / "cfg.yaml").write_text(
        f"pipeline:\n  name: s3_cli\n  tasks:\n{tasks}"
        "source: { kind: jsonl, path: data.jsonl, key_field: id }\n"
    )


def test_run_report_export_through_the_cli(tmp_path: Path) -> None:
    _config(tmp_path, 6, "    - { use: pyattacker.tasks:echo }\n    - { use: pyattacker.tasks:echo }\n")
    store = f"s3://{BUCKET}/cli-{tmp_path.name}/run"
    backend = json.dumps({"kind": "s3", "bucket": BUCKET, "prefix": f"blobs-{tmp_path.name}", "min_bytes": 0})
    done = _cli(tmp_path, "run", "-c", "cfg.yaml", "--store", store, "--artifact-backend", backend)
    assert done.returncode == 0, done.stderr

    report = _cli(tmp_path, "report", store, "--json")
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["pipelines"]["by_state"] == {"succeeded": 6}

    watched = _cli(tmp_path, "watch", store, "--iterations", "1", "--no-clear")
    assert watched.returncode == 0, watched.stderr
    assert "6" in watched.stdout

    exported = _cli(tmp_path, "export", store, "out.jsonl", "--rows", "results")
    assert exported.returncode == 0, exported.stderr
    rows = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert len(rows) == 6
    # the results were kept in S3 blobs (min_bytes 0) and read back through the recorded backend
    assert all(r.get("artifact_available", True) is not False for r in rows), rows[0]
    assert all(r.get("result_encoding") != "absent" for r in rows), rows[0]
    reader = S3Store(store, read_only=True)
    arts = list(iter_rows(reader, "artifacts"))
    assert arts and all(
        a.payload is None and (a.blob_ref or "").startswith("s3://") for a in arts if a.seq >= 0
    )
    [run] = reader.runs()
    text = json.dumps(run.config)
    assert "testing-secret" not in text and "AWS_SECRET" not in text  # no credential in the run record


def test_sigkill_mid_run_then_resume_replays_no_durable_task(tmp_path: Path) -> None:
    _config(tmp_path, 40, AUDITED * 2)
    ledger = tmp_path / "ledger.tsv"
    store = f"s3://{BUCKET}/crash-{tmp_path.name}/run"
    cmd = [
        sys.executable,
        "-m",
        "pyattacker",
        "run",
        "-c",
        "cfg.yaml",
        "--store",
        store,
        "--concurrency",
        "2",
    ]
    proc = subprocess.Popen(
        cmd,
        cwd=tmp_path,
        env=_env(**{LEDGER_ENV: str(ledger)}),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        reader = None
        while time.monotonic() < deadline:  # a reader beside the running writer
            if proc.poll() is not None:
                raise AssertionError(f"the run ended before the kill: {proc.stderr.read().decode()}")  # type: ignore[union-attr]
            try:
                reader = reader or S3Store(store, read_only=True)
            except ConfigError:  # the writer has not created the store yet
                time.sleep(0.05)
                continue
            if sum(1 for a in iter_rows(reader, "artifacts") if a.seq >= 0) >= 10:
                break
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    reader = S3Store(store, read_only=True)
    durable = {(a.pipeline_id, a.seq) for a in iter_rows(reader, "artifacts") if a.seq >= 0}
    crash_mark = len(read_ledger(ledger))
    assert durable, "nothing was durable at the kill"
    assert len(durable) < 80, "the run finished before the kill"

    # the killed writer's lease is left behind; resume takes it over (its pid is gone)
    resumed = _cli(tmp_path, "resume", "-c", "cfg.yaml", "--store", store, **{LEDGER_ENV: str(ledger)})
    assert resumed.returncode == 0, resumed.stderr
    after = [(e.pipeline_id, e.seq) for e in read_ledger(ledger)[crash_mark:]]
    replays = [ran for ran in after if ran in durable]
    assert replays == [], f"{len(replays)} durable task(s) ran again after the kill"
    assert after, "resume ran nothing: the test proves nothing"
    final = S3Store(store, read_only=True)
    assert {p.state for p in iter_rows(final, "pipelines")} == {"succeeded"}
    assert final.count_rows("pipelines") == 40


def test_listed_under_its_distribution(tmp_path: Path) -> None:
    listed = _cli(tmp_path, "plugins", "--json")
    assert listed.returncode == 0, listed.stderr
    [ours] = [p for p in json.loads(listed.stdout)["plugins"] if p["dist"] == PLUGIN]
    assert ours["status"] == "active" and ours["contract"] == 2
    assert ours["provides"] == {"artifact_backends": ["s3"], "stores": ["s3"]}


def test_the_artifact_backend_as_a_url(tmp_path: Path) -> None:
    """``--artifact-backend s3://bucket/prefix``: the spec names the kind by its scheme."""
    from pyattacker.plugins.manager import get_plugins
    from pyattacker.store.backends import resolve_backend

    backend = resolve_backend(f"s3://{BUCKET}/url-{tmp_path.name}", get_plugins().artifact_backends)
    assert backend.describe() == {
        "kind": "s3",
        "bucket": BUCKET,
        "prefix": f"url-{tmp_path.name}",
        "min_bytes": 4096,
    }
