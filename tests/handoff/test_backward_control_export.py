"""Where a pipeline with backward moves stands, in exports and the viewer: the ``control``
object (derived from the ledger and the rows; no separate traversal record) and the ``active``
flag of task and artifact rows. Runs the judge-loop example through the command line."""

from __future__ import annotations

import csv
import http.client
import io
import json
from pathlib import Path

from pyattacker.store.location import open_store
from pyattacker.views.export import iter_kind
from tests.handoff.test_backward_cli import _cli, _example, _jsonl, _ran
from tests.support.views import serving


def _pipelines(tmp_path: Path, store: str) -> list[dict]:
    out = _cli(tmp_path, "export", store, "-", "--rows", "pipelines", "--format", "jsonl")
    assert out.returncode == 0, out.stderr
    return _jsonl(out.stdout)


def test_a_finished_loop_exports_its_control_record_and_active_flags(tmp_path: Path) -> None:
    store = _ran(tmp_path)
    pipelines = _pipelines(tmp_path, store)
    looped = [p for p in pipelines if len(p["handoffs"]) == 2]
    assert len(looped) == 2
    for p in looped:
        pid, control = p["pipeline_id"], p["control"]
        assert control["counters"] == {"0": 0, "1": 2, "2": 2, "3": 0}
        assert control["handoffs"] == 2 and control["cursor"] == 4 and control["pending"] is None
        assert control["input"] == f"{pid}:-1"
        assert control["active"]["1"] == {"task_run_id": f"{pid}:1#2", "visit": 2, "output": f"{pid}:1"}
        assert control["active"]["0"]["task_run_id"] == f"{pid}:0"
        assert control["terminal"] == f"{pid}:3"
        assert all(t["active"] for t in p["tasks"])
        flags = {a["seq"]: a["active"] for a in p["artifacts"]}
        assert [flags[s] for s in sorted(flags) if s < -1] == [False, False]  # ask's kept answers
        assert all(flags[s] for s in flags if -1 <= s < 4)  # the seed and the chain's outputs
        # the values the two rewinds handed to ask: the second one's is ask's current input
        entries = [h["entry_seq"] for h in p["handoffs"]]
        assert [flags[s] for s in entries] == [False, True]
    # a pipeline that never moved back has no control object
    assert all("control" not in p for p in pipelines if not p["handoffs"])
    csv_out = _cli(tmp_path, "export", store, "-", "--rows", "pipelines", "--format", "csv")
    assert csv_out.returncode == 0, csv_out.stderr
    rows = list(csv.DictReader(io.StringIO(csv_out.stdout)))
    shown = [json.loads(r["control"]) for r in rows if r.get("control")]
    assert sorted(c["handoffs"] for c in shown) == [1, 1, 2, 2]
    reader = open_store(store, read_only=True)
    try:
        artifacts = list(iter_kind(reader, "artifacts"))
        tasks = list(iter_kind(reader, "tasks"))
    finally:
        reader.close()
    assert sorted(a["active"] for a in artifacts if a["seq"] < -1) == [False] * 6
    assert all(a["active"] for a in artifacts if -1 <= a["seq"] < 4) and all(t["active"] for t in tasks)
    with serving(store, "t0ken") as (port, _url):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            conn.request("GET", "/pipelines?limit=20", headers={"Authorization": "Bearer t0ken"})
            served = json.loads(conn.getresponse().read())
        finally:
            conn.close()
    by_id = {row["pipeline_id"]: row for row in served["rows"]}
    for p in looped:
        assert by_id[p["pipeline_id"]]["control"] == p["control"]
        assert by_id[p["pipeline_id"]]["cursor_kind"] == "position"
    assert sum("control" in row for row in served["rows"]) == 4


def test_a_loop_stopped_by_its_budget_exports_its_pending_visit(tmp_path: Path) -> None:
    config = _example(tmp_path)
    config.write_text(config.read_text().replace("concurrency: 4}", "concurrency: 4, max_handoffs: 1}"))
    _cli(tmp_path, "run", "-c", str(config))
    store = str(tmp_path / "runs" / "judge_loop.db")
    failed = [p for p in _pipelines(tmp_path, store) if p["state"] == "failed"]
    assert len(failed) == 2
    for p in failed:
        pid, control = p["pipeline_id"], p["control"]
        assert control["pending"] == {"seq": 2, "visit": 1, "task_run_id": f"{pid}:2#1", "input": f"{pid}:1"}
        assert control["handoffs"] == 1 and control["terminal"] is None
        assert control["counters"] == {"0": 0, "1": 1, "2": 1, "3": 0}
