"""The judge-loop example (examples/judge_loop) through the command line: validate, run, and
every view showing the backward moves with their visits."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import subprocess
from pathlib import Path

from pyattacker.store.location import open_store
from pyattacker.views.export import iter_kind
from tests.support import REPO
from tests.support.cli import cli
from tests.support.views import serving

EXAMPLE = REPO / "examples" / "judge_loop"


def _example(tmp_path: Path, control: str | None = None) -> Path:
    shutil.copy(EXAMPLE / "judge_loop.py", tmp_path / "judge_loop.py")
    text = (EXAMPLE / "config.yaml").read_text()
    if control is not None:
        text = text.replace("judge: [ask]", control)
    (tmp_path / "config.yaml").write_text(text)
    return tmp_path / "config.yaml"


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    env["PYATTACKER_HOME"] = str(tmp_path / "home")
    return cli(list(args), env)


def _jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def _ran(tmp_path: Path) -> str:
    """The example run once: its store."""
    config = _example(tmp_path)
    ran = _cli(tmp_path, "run", "-c", str(config))
    assert ran.returncode == 0, ran.stderr
    # seeds 0..5 need i % 3 rewinds: 0+1+2+0+1+2
    assert "handoffs 6 (rewind 6)" in ran.stdout
    return str(tmp_path / "runs" / "judge_loop.db")


def test_the_judge_loop_runs_and_the_summaries_count_the_rewinds(tmp_path: Path) -> None:
    checked = _cli(tmp_path, "validate", "-c", str(_example(tmp_path)))
    assert checked.returncode == 0, checked.stderr
    assert 'control: {"rewind": {"judge": ["ask"]}, "max_handoffs": 2}' in checked.stdout
    store = _ran(tmp_path)
    shown = _cli(tmp_path, "report", store)
    assert "handoffs=6 (rewind=6)" in shown.stdout and "task ask: succeeded=6" in shown.stdout
    watched = _cli(tmp_path, "watch", store, "--iterations", "1")
    assert "handoffs=6 (rewind=6)" in watched.stdout
    results = _jsonl(_cli(tmp_path, "export", store, "-", "--rows", "results", "--format", "jsonl").stdout)
    assert sorted(r["result"]["tries"] for r in results) == [1, 1, 2, 2, 3, 3]


def test_exports_and_the_viewer_show_visits(tmp_path: Path) -> None:
    store = _ran(tmp_path)
    pipelines = _jsonl(
        _cli(tmp_path, "export", store, "-", "--rows", "pipelines", "--format", "jsonl").stdout
    )
    looped = [p for p in pipelines if len(p["handoffs"]) == 2]
    assert len(looped) == 2
    for p in looped:
        hops = [(h["operation"], h["from_visit"], h["to_visit"]) for h in p["handoffs"]]
        assert hops == [("rewind", 0, 1), ("rewind", 1, 2)]
        assert {t["name"]: t["visit"] for t in p["tasks"]} == {"fetch": 0, "ask": 2, "judge": 2, "report": 0}
        kept = sorted(a["visit"] for a in p["artifacts"] if a["seq"] < -1)
        assert kept == [0, 1]  # ask's answers of its first two visits, kept as history
    reader = open_store(store, read_only=True)
    try:  # the other row kinds in process (the command writes what ``iter_kind`` yields)
        tasks = list(iter_kind(reader, "tasks"))
        attempts = list(iter_kind(reader, "attempts"))
        artifacts = list(iter_kind(reader, "artifacts"))
    finally:
        reader.close()
    assert sorted(t["visit"] for t in tasks if t["name"] == "ask") == [0, 0, 1, 1, 2, 2]
    assert sorted(a["visit"] for a in attempts if a["task_name"] == "judge") == [0] * 6 + [1] * 4 + [2] * 2
    assert sorted(a["visit"] for a in artifacts if a["seq"] < -1) == [0, 0, 0, 0, 1, 1]
    with serving(store, "t0ken") as (port, _url):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            conn.request("GET", "/pipelines?limit=20", headers={"Authorization": "Bearer t0ken"})
            served = json.loads(conn.getresponse().read())
        finally:
            conn.close()
    visits = sorted((h["from_visit"], h["to_visit"]) for row in served["rows"] for h in row["handoffs"])
    assert visits == [(0, 1)] * 4 + [(1, 2)] * 2


def test_backward_declaration_errors_name_the_field_in_validate_and_run(tmp_path: Path) -> None:
    config = _example(tmp_path, "judge: [report]")
    for command in ("validate", "run"):
        result = _cli(tmp_path, command, "-c", str(config))
        assert result.returncode == 2, result.stderr
        assert (
            "pipeline.control.rewind['judge'][0]: target 'report' (seq 3) is not earlier than the"
            " source 'judge' (seq 2)" in result.stderr
        )
    text = config.read_text().replace("judge: [report]", "judge: [ask]").replace("    max_handoffs: 2", "")
    config.write_text(text)
    result = _cli(tmp_path, "validate", "-c", str(config))
    assert result.returncode == 2 and "pipeline.control.max_handoffs: required" in result.stderr
    assert not (tmp_path / "runs").exists()


def test_the_run_ceiling_caps_the_loop(tmp_path: Path) -> None:
    config = _example(tmp_path)
    config.write_text(config.read_text().replace("concurrency: 4}", "concurrency: 4, max_handoffs: 1}"))
    ran = _cli(tmp_path, "run", "-c", str(config))
    assert ran.returncode != 0
    store = str(tmp_path / "runs" / "judge_loop.db")
    pipelines = _jsonl(
        _cli(tmp_path, "export", store, "-", "--rows", "pipelines", "--format", "jsonl").stdout
    )
    failed = [p for p in pipelines if p["state"] == "failed"]
    assert len(failed) == 2  # the two seeds that need a second rewind
    assert all("control budget exhausted" in p["error_message"] for p in failed)
