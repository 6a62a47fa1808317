"""A process killed on either side of a handoff's commit, then resumed: judged from outside.

The child runs a real ``Runner`` on a SQLite file or a JSONL journal and dies with
``os._exit`` just before the store commits a batch holding a handoff, just after, or inside the
destination task. Every task body appends a line to an audit file (plain ``open``, not the
library), and the verdict reads that file and the store with ``sqlite3`` or by parsing the
journal's committed lines: a source task whose handoff was committed never runs again, skipped
tasks never run, each pipeline ends with exactly one final artifact holding what the jump
handed over, and the ledger holds exactly one jump per pipeline.
"""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.support import REPO

REPO = REPO
N = 4
CHILD = textwrap.dedent(
    """
    import os, sys
    from pyattacker import Handoff
    from pyattacker import pipeline
    from pyattacker import Runner
    from pyattacker import task
    from pyattacker_plugins.store_jsonl.store import JsonlStore
    from pyattacker_plugins.store_sqlite.store import SqliteStore

    DB, AUDIT, MODE = sys.argv[1], sys.argv[2], sys.argv[3]

    def note(task, i):
        with open(AUDIT, "a") as f:
            f.write(f"{task} {i}\\n")

    @task
    def fetch(x):
        note("fetch", x)
        return {"i": x}

    @task
    def ask(d):
        note("ask", d["i"])
        if d["i"] % 2:
            return Handoff.end(reason="short")
        return Handoff.to("report", {"cached": d["i"]}, reason="cache")

    @task
    def judge(d):
        note("judge", -1)
        return d

    @task
    def report(d):
        note("report", d["cached"])
        if MODE == "in_destination":
            os._exit(17)
        return {"report": d["cached"]}

    def dying(commit):
        def dying_commit(self, batch):
            if batch.handoffs and MODE == "before_commit":
                os._exit(17)
            result = commit(self, batch)
            if batch.handoffs and MODE == "after_commit":
                os._exit(17)
            return result
        return dying_commit

    # every commit of both stores goes through commit_behind (commit calls it, then waits)
    SqliteStore.commit_behind = dying(SqliteStore.commit_behind)
    JsonlStore.commit_behind = dying(JsonlStore.commit_behind)
    tpl = pipeline("qa", fetch, ask, judge, report, control={"edges": {"ask": ["report", "end"]}})
    with Runner(store=DB, concurrency=1, handle_signals=False) as runner:
        report_ = runner.run(tpl.map(range(int(sys.argv[4]))))
    sys.exit(report_.exit_code)
    """
)


def _location(tmp: Path, store: str) -> str:
    return str(tmp / "h.db") if store == "sqlite" else f"jsonl:{tmp / 'h'}"


def _child(tmp: Path, store: str, mode: str) -> subprocess.CompletedProcess[str]:
    script = tmp / "child.py"
    script.write_text(CHILD)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run(
        [sys.executable, str(script), _location(tmp, store), str(tmp / "audit.log"), mode, str(N)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _audit(tmp: Path) -> list[tuple[str, int]]:
    lines = (tmp / "audit.log").read_text().split()
    return [(lines[i], int(lines[i + 1])) for i in range(0, len(lines), 2)]


class Facts:
    """What the store holds, read without pyattacker: ``sqlite3``, or the journal's committed lines."""

    def __init__(self, tmp: Path, store: str) -> None:
        self.states: dict[str, str] = {}
        self.jumps: dict[str, int] = {}
        self.finals: dict[str, list[Any]] = {}
        if store == "sqlite":
            self._sqlite(tmp / "h.db")
        else:
            self._journal(tmp / "h" / "journal.jsonl")

    def _sqlite(self, path: Path) -> None:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            self.states = dict(con.execute("SELECT pipeline_id, state FROM pipelines"))
            self.jumps = dict(
                con.execute(
                    "SELECT k.pipeline_id, COUNT(*) FROM handoffs AS h JOIN pipeline_keys AS k"
                    " ON k.pk = h.pk WHERE h.operation = 'forward' GROUP BY k.pipeline_id"
                )
            )
            for pid, payload in con.execute(
                "SELECT k.pipeline_id, a.payload FROM artifacts AS a JOIN pipeline_keys AS k"
                " ON k.pk = a.pk WHERE a.is_final"
            ):
                self.finals.setdefault(pid, []).append(json.loads(payload))
        finally:
            con.close()

    def _journal(self, path: Path) -> None:
        committed: list[tuple[str, dict[str, Any]]] = []
        pending: list[tuple[str, dict[str, Any]]] = []
        for line in path.read_bytes().splitlines():
            item = json.loads(line)
            if item[0] == "commit":
                committed, pending = committed + pending, []
            else:
                pending.append((item[0], item[1]))
        final: dict[str, dict[str, Any]] = {}
        for tag, row in committed:
            if tag == "pipeline":
                self.states[row["pipeline_id"]] = row["state"]
            elif tag == "handoff" and row["operation"] == "forward":
                self.jumps[row["pipeline_id"]] = self.jumps.get(row["pipeline_id"], 0) + 1
            elif tag == "unfinal":
                final.pop(row["pipeline_id"], None)
            elif tag == "artifact" and row.get("is_final"):
                final.setdefault(row["pipeline_id"], {})[row["artifact_id"]] = row["payload"]
        for pid, by_id in final.items():
            self.finals[pid] = [json.loads(base64.b64decode(p)) for p in by_id.values()]


@pytest.mark.parametrize("store", ["sqlite", "jsonl"])
@pytest.mark.parametrize("mode", ["before_commit", "after_commit", "in_destination"])
def test_killed_around_a_handoff_then_resumed(store: str, mode: str, tmp_path: Path) -> None:
    crashed = _child(tmp_path, store, mode)
    assert crashed.returncode == 17, crashed.stderr
    jumped = sum(Facts(tmp_path, store).jumps.values())
    # a worker does not wait for a jump's commit: another pipeline's jump may share it
    assert jumped == 0 if mode == "before_commit" else 1 <= jumped <= N, jumped
    before = _audit(tmp_path)

    resumed = _child(tmp_path, store, "none")
    assert resumed.returncode == 0, resumed.stderr
    audit = _audit(tmp_path)
    facts = Facts(tmp_path, store)
    assert sorted(facts.states.values()) == ["succeeded"] * N
    assert sorted(facts.jumps.values()) == [1] * N  # no jump recorded twice
    assert sorted(len(v) for v in facts.finals.values()) == [1] * N  # exactly one final each
    results = sorted(json.dumps(v[0], sort_keys=True) for v in facts.finals.values())
    assert results == sorted(json.dumps(r) for r in ({"report": 0}, {"i": 1}, {"report": 2}, {"i": 3}))
    assert not [a for a in audit if a[0] == "judge"]  # a skipped task never ran
    assert sorted(i for t, i in audit if t == "fetch") == list(range(N))  # checkpoints held
    asks = sorted(i for t, i in audit if t == "ask")
    # (which pipeline jumps first is the scheduler's: one worker runs other pipelines' tasks
    # while a checkpoint waits for its commit, and the JSONL store acknowledges after a sync)
    if mode == "before_commit":  # the jump was not durable: its source may run once more
        again = [i for i in sorted(set(asks)) if asks.count(i) > 1]
        assert sorted(set(asks)) == list(range(N)) and again, asks
        assert all(asks.count(i) == 2 and ("ask", i) in before for i in again), (asks, before)
    else:  # a committed jump is never taken again
        assert asks == list(range(N))
    if mode == "in_destination":  # it died in the destination of a committed jump
        (dest,) = [i for t, i in before if t == "report"]
        assert ("ask", dest) in before
    else:
        assert any(t == "ask" for t, _i in before)
