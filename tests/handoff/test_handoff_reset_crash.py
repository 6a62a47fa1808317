"""A process killed on either side of the commit that resets a pipeline, judged from outside.

Run A: ``judge`` hands off to ``report``. Run B (``retry_succeeded``): ``judge`` ends the
pipeline, and the child dies with ``os._exit`` just before or just after the store commits the
first batch that carries a reset (it notes that batch's rows first). Run C finishes the job.
The verdict reads the store with ``sqlite3`` or by replaying the journal's committed lines (the
reset's meaning written out here, not taken from the library) and an audit file the tasks
append to: before the commit nothing changed; after it, a reset pipeline holds exactly the
rows of the new traversal that came in that batch, never half of the old ones; in the end no
slot the last traversal skipped has a row, and run A's history is intact.
"""

from __future__ import annotations

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
N = 4  # pipelines
SLOTS = 5  # fetch ask judge polish report
CHILD = textwrap.dedent(
    """
    import json, os, sys
    from pyattacker import Handoff
    from pyattacker import pipeline
    from pyattacker import Runner
    from pyattacker import task
    from pyattacker_plugins.store_jsonl.store import JsonlStore
    from pyattacker_plugins.store_sqlite.store import SqliteStore

    DB, AUDIT, NOTE, ROUTE, MODE = sys.argv[1:6]

    def audit(name, i):
        with open(AUDIT, "a") as f:
            f.write(f"{name} {i}\\n")

    @task
    def fetch(x):
        audit("fetch", x)
        return {"i": x}

    @task
    def ask(d):
        audit("ask", d["i"])
        return {**d, "asked": True}

    @task
    def judge(d):
        audit("judge", d["i"])
        if ROUTE == "report":
            return Handoff.to("report", {**d, "cached": True}, reason="cache hit")
        return Handoff.end({**d, "short": True}, reason="short")

    @task
    def polish(d):
        audit("polish", d["i"])
        return d

    @task
    def report(d):
        audit("report", d["i"])
        return {"report": d}

    def note(batch):
        rows = {
            "resets": [[r.pipeline_id, r.slots] for r in batch.resets],
            "tasks": [[t.pipeline_id, t.seq, t.state] for t in batch.tasks],
            "artifacts": [[a.pipeline_id, a.seq, a.is_final] for a in batch.artifacts],
            "handoffs": [[h.pipeline_id, h.operation] for h in batch.handoffs],
        }
        with open(NOTE, "w") as f:
            json.dump(rows, f)

    def dying(commit):
        def dying_commit(self, batch):
            if batch.resets and MODE == "before_reset":
                note(batch)
                os._exit(17)
            result = commit(self, batch)
            if batch.resets and MODE == "after_reset":
                note(batch)
                os._exit(17)
            return result
        return dying_commit

    # every commit of both stores goes through commit_behind (commit calls it, then waits)
    SqliteStore.commit_behind = dying(SqliteStore.commit_behind)
    JsonlStore.commit_behind = dying(JsonlStore.commit_behind)
    tpl = pipeline("qa", fetch, ask, judge, polish, report, control={"edges": {"judge": ["report", "end"]}})
    again = ROUTE != "report"
    with Runner(store=DB, concurrency=1, handle_signals=False, retry_succeeded=again) as runner:
        sys.exit(runner.run(tpl.map(range(int(sys.argv[6])))).exit_code)
    """
)


def _location(tmp: Path, store: str) -> str:
    return str(tmp / "h.db") if store == "sqlite" else f"jsonl:{tmp / 'h'}"


def _child(tmp: Path, store: str, route: str, mode: str) -> subprocess.CompletedProcess[str]:
    script = tmp / "child.py"
    script.write_text(CHILD)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    argv = [_location(tmp, store), str(tmp / "audit.log"), str(tmp / "note.json"), route, mode, str(N)]
    return subprocess.run(
        [sys.executable, str(script), *argv], env=env, capture_output=True, text=True, timeout=120
    )


class Facts:
    """What the store holds, read without pyattacker: per pipeline its task rows
    ``{seq: (state, run_id)}``, artifacts ``{seq: is_final}``, ledger operations and row; the
    runs in order, and how many attempts and events each run wrote."""

    def __init__(self, tmp: Path, store: str) -> None:
        self.tasks: dict[str, dict[int, tuple[str, str]]] = {}
        self.artifacts: dict[str, dict[int, bool]] = {}
        self.ledger: dict[str, list[str]] = {}
        self.rows: dict[str, tuple[str, str]] = {}
        self.runs: list[str] = []
        self.history: dict[str, tuple[int, int]] = {}
        if store == "sqlite":
            self._sqlite(tmp / "h.db")
        else:
            self._journal(tmp / "h" / "journal.jsonl")

    def per_pipeline(self, pid: str) -> tuple[Any, ...]:
        return (self.tasks.get(pid, {}), self.artifacts.get(pid, {}), self.ledger.get(pid, []))

    def _sqlite(self, path: Path) -> None:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            join = "JOIN pipeline_keys AS k ON k.pk = t.pk"
            for pid, seq, state, run_id in con.execute(
                f"SELECT k.pipeline_id, seq, state, run_id FROM tasks AS t {join}"
            ):
                self.tasks.setdefault(pid, {})[seq] = (state, run_id)
            for pid, seq, final in con.execute(
                f"SELECT k.pipeline_id, seq, is_final FROM artifacts AS t {join}"
            ):
                self.artifacts.setdefault(pid, {})[seq] = bool(final)
            for pid, op in con.execute(
                f"SELECT k.pipeline_id, operation FROM handoffs AS t {join} ORDER BY handoff_id"
            ):
                self.ledger.setdefault(pid, []).append(op)
            self.rows = {
                pid: (state, run_id)
                for pid, state, run_id in con.execute("SELECT pipeline_id, state, run_id FROM pipelines")
            }
            self.runs = [r for (r,) in con.execute("SELECT run_id FROM runs ORDER BY started_at, run_id")]
            for run_id in self.runs:
                attempts = con.execute(
                    "SELECT COUNT(*) FROM attempts WHERE run_id = ?", (run_id,)
                ).fetchone()[0]
                events = con.execute("SELECT COUNT(*) FROM events WHERE run_id = ?", (run_id,)).fetchone()[0]
                self.history[run_id] = (attempts, events)
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
        counts: dict[str, list[int]] = {}
        for tag, row in committed:
            pid = row.get("pipeline_id")
            if tag == "run":
                if row["run_id"] not in self.runs:
                    self.runs.append(row["run_id"])
            elif tag == "pipeline":
                self.rows[pid] = (row["state"], row["run_id"])
            elif tag == "task":
                self.tasks.setdefault(pid, {})[row["seq"]] = (row["state"], row["run_id"])
            elif tag == "artifact":
                self.artifacts.setdefault(pid, {})[row["seq"]] = bool(row.get("is_final"))
            elif tag == "unfinal":
                self.artifacts[pid] = dict.fromkeys(self.artifacts.get(pid, {}), False)
            elif tag == "reset":  # the pipeline's task rows and artifacts at seq 0..slots-1 go
                for seq in range(row["slots"]):
                    self.tasks.get(pid, {}).pop(seq, None)
                    self.artifacts.get(pid, {}).pop(seq, None)
            elif tag == "handoff":
                self.ledger.setdefault(pid, []).append(row["operation"])
            elif tag in ("attempt", "event"):
                counts.setdefault(row["run_id"], [0, 0])[tag == "event"] += 1
        self.history = {r: (c[0], c[1]) for r, c in counts.items()}


def _audit(tmp: Path) -> list[tuple[str, int]]:
    words = (tmp / "audit.log").read_text().split()
    return [(words[i], int(words[i + 1])) for i in range(0, len(words), 2)]


@pytest.mark.parametrize("store", ["sqlite", "jsonl"])
@pytest.mark.parametrize("mode", ["before_reset", "after_reset"])
def test_killed_around_the_reset_commit_then_finished(store: str, mode: str, tmp_path: Path) -> None:
    first = _child(tmp_path, store, "report", "none")
    assert first.returncode == 0, first.stderr
    done = Facts(tmp_path, store)
    (run_a,) = done.runs
    pids = sorted(done.rows)
    assert len(pids) == N and all(done.tasks[p][4] == ("succeeded", run_a) for p in pids)

    crashed = _child(tmp_path, store, "end", mode)
    assert crashed.returncode == 17, crashed.stderr
    batch = json.loads((tmp_path / "note.json").read_text())
    reset = {pid for pid, slots in batch["resets"]}
    assert reset and all(slots == SLOTS for _, slots in batch["resets"])
    now = Facts(tmp_path, store)
    assert now.history[run_a] == done.history[run_a]  # run A's attempts and events
    for pid in pids:
        if mode == "before_reset" or pid not in reset:  # nothing of it was committed
            assert now.per_pipeline(pid) == done.per_pipeline(pid)
            continue
        # exactly the new traversal's rows that came in the batch, and the rows that survive
        # a reset (the seed, run A's entry at seq 5), with no final flag left over
        assert now.tasks.get(pid, {}) == {
            seq: (state, now.runs[-1]) for p, seq, state in batch["tasks"] if p == pid
        }
        kept = {-1: False, 5: False}
        kept.update({seq: final for p, seq, final in batch["artifacts"] if p == pid})
        assert now.artifacts[pid] == kept
        assert now.ledger[pid] == ["forward", "restart"]
        assert now.rows[pid] == ("running", now.runs[-1])

    finished = _child(tmp_path, store, "end", "none")
    assert finished.returncode == 0, finished.stderr
    end = Facts(tmp_path, store)
    assert end.history[run_a] == done.history[run_a]
    for pid in pids:
        assert end.rows[pid][0] == "succeeded"
        assert {seq: state for seq, (state, _) in end.tasks[pid].items()} == {
            0: "succeeded",
            1: "succeeded",
            2: "handed_off",
        }
        assert run_a not in {run_id for _, run_id in end.tasks[pid].values()}
        # seed, fetch's and ask's outputs, run A's entry, and the END's entry (the only final)
        assert end.artifacts[pid] == {-1: False, 0: False, 1: False, 5: False, 7: True}
        assert end.ledger[pid] == ["forward", "restart", "forward"]
    audit = _audit(tmp_path)
    assert sorted(i for t, i in audit if t == "report") == list(range(N))  # run A's only
    assert not [a for a in audit if a[0] == "polish"]
