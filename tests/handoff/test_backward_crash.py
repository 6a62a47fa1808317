"""A process killed before, inside and after a rewind and a retry-all, then resumed: judged
from outside.

The child runs a real ``Runner`` on a SQLite file or a JSONL journal (inline or file artifact
backend) and dies with ``os._exit`` just before the store commits a batch holding a backward
move, just after, or inside the task the move re-entered. Every task body appends
``task pipeline visit`` to an audit file (plain ``open``) before doing anything; the verdict
reads that file and the store (``sqlite3``, or the journal's committed lines). A task whose
output for a visit is durable never runs again for that visit, each move is in the ledger
exactly once, and the budget (``max_handoffs: 2``, exactly the two moves) holds across resumes.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from tests.support import REPO

N = 3
CHILD = textwrap.dedent(
    """
    import os, sys
    from pyattacker import Handoff, Runner, pipeline, task
    from pyattacker_plugins.store_jsonl.store import JsonlStore
    from pyattacker_plugins.store_sqlite.store import SqliteStore

    DB, AUDIT, MODE, BACKEND = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[5]

    def note(task, i, visit):
        with open(AUDIT, "a") as f:
            f.write(f"{task} {i} {visit}\\n")
            f.flush()
            os.fsync(f.fileno())

    @task
    def ask(x, ctx):
        i = x["i"]
        note("ask", i, ctx.visit)
        if (MODE, ctx.visit) in (("inside_rewind", 1), ("inside_retry", 2)):
            os._exit(17)
        return {"i": i, "fb": x.get("fb"), "earlier": len(ctx.history())}

    @task
    def judge(d, ctx):
        note("judge", d["i"], ctx.visit)
        if MODE == "always" or ctx.visit == 0:
            return Handoff.rewind("ask", {"i": d["i"], "fb": "again"}, reason="weak")
        if ctx.visit == 1:
            return Handoff.retry_all(reason="start over")
        return d

    @task
    def report(d, ctx):
        note("report", d["i"], ctx.visit)
        return {"report": d}

    def dying(commit):
        def dying_commit(self, batch):
            ops = {h.operation for h in batch.handoffs}
            kill = (MODE in ("before_rewind", "after_rewind", "always") and "rewind" in ops) or (
                MODE in ("before_retry", "after_retry") and "retry_all" in ops
            )
            if kill and MODE.startswith("before"):
                os._exit(17)
            result = commit(self, batch)
            if kill and (MODE.startswith("after") or MODE == "always"):
                os._exit(17)
            return result
        return dying_commit

    SqliteStore.commit_behind = dying(SqliteStore.commit_behind)
    JsonlStore.commit_behind = dying(JsonlStore.commit_behind)
    control = {"rewind": {"judge": ["ask"]}, "retry_all": ["judge"], "max_handoffs": 2}
    tpl = pipeline("loop", ask, judge, report, control=control)
    opts = {}
    if BACKEND != "inline":
        opts["artifact_backend"] = {"kind": "file", "root": BACKEND, "min_bytes": 0}
    with Runner(store=DB, concurrency=1, handle_signals=False, **opts) as runner:
        report_ = runner.run(tpl.map([{"i": i} for i in range(int(sys.argv[4]))]))
    sys.exit(report_.exit_code)
    """
)


def _location(tmp: Path, store: str) -> str:
    return str(tmp / "h.db") if store == "sqlite" else f"jsonl:{tmp / 'h'}"


def _child(tmp: Path, store: str, backend: str, mode: str) -> subprocess.CompletedProcess[str]:
    script = tmp / "child.py"
    script.write_text(CHILD)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    where = "inline" if backend == "inline" else str(tmp / "blobs")
    return subprocess.run(
        [sys.executable, str(script), _location(tmp, store), str(tmp / "audit.log"), mode, str(N), where],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _audit(tmp: Path) -> list[tuple[str, int, int]]:
    out = []
    for line in (tmp / "audit.log").read_text().splitlines():
        task, i, visit = line.split()
        out.append((task, int(i), int(visit)))
    return out


def _facts(tmp: Path, store: str) -> tuple[dict[str, str], dict[str, list[str]]]:
    """``({pipeline: state}, {pipeline: ledger operations})`` as committed, read without pyattacker."""
    states: dict[str, str] = {}
    ops: dict[str, list[str]] = {}
    if store == "sqlite":
        con = sqlite3.connect(f"file:{tmp / 'h.db'}?mode=ro", uri=True)
        try:
            states = dict(con.execute("SELECT pipeline_id, state FROM pipelines"))
            for pid, op in con.execute(
                "SELECT k.pipeline_id, h.operation FROM handoffs AS h JOIN pipeline_keys AS k"
                " ON k.pk = h.pk ORDER BY h.handoff_id"
            ):
                ops.setdefault(pid, []).append(op)
        finally:
            con.close()
        return states, ops
    committed: list[tuple[str, dict]] = []
    pending: list[tuple[str, dict]] = []
    for line in (tmp / "h" / "journal.jsonl").read_bytes().splitlines():
        item = json.loads(line)
        if item[0] == "commit":
            committed, pending = committed + pending, []
        else:
            pending.append((item[0], item[1]))
    for tag, row in committed:
        if tag == "pipeline":
            states[row["pipeline_id"]] = row["state"]
        elif tag == "handoff":
            ops.setdefault(row["pipeline_id"], []).append(row["operation"])
    return states, ops


EXPECTED = sorted(
    [(t, i, v) for i in range(N) for t, v in (("ask", 0), ("judge", 0), ("ask", 1), ("judge", 1))]
    + [(t, i, v) for i in range(N) for t, v in (("ask", 2), ("judge", 2), ("report", 0))]
)


@pytest.mark.parametrize(
    ("store", "backend"), [("sqlite", "inline"), ("jsonl", "inline"), ("sqlite", "file")]
)
@pytest.mark.parametrize(
    "mode", ["before_rewind", "after_rewind", "inside_rewind", "before_retry", "after_retry", "inside_retry"]
)
def test_killed_around_a_backward_move_then_resumed(
    store: str, backend: str, mode: str, tmp_path: Path
) -> None:
    crashed = _child(tmp_path, store, backend, mode)
    assert crashed.returncode == 17, crashed.stderr
    before = _audit(tmp_path)
    resumed = _child(tmp_path, store, backend, "none")
    assert resumed.returncode == 0, resumed.stderr + resumed.stdout
    audit = _audit(tmp_path)
    states, ops = _facts(tmp_path, store)
    assert sorted(states.values()) == ["succeeded"] * N
    # each move committed exactly once (a replayed one would also exceed max_handoffs: 2)
    assert sorted(ops.values()) == [["rewind", "retry_all"]] * N
    assert sorted(set(audit)) == EXPECTED  # every visit of every task ran
    again = sorted(k for k, n in Counter(audit).items() if n > 1)
    if mode.startswith("after"):  # a committed move: nothing runs twice
        assert again == []
    elif mode.startswith("before"):  # the move was not durable: only its source may run again
        visit = 0 if mode == "before_rewind" else 1
        assert again and all(k[0] == "judge" and k[2] == visit for k in again), again
        assert all(Counter(audit)[k] == 2 and k in before for k in again)
    else:  # killed inside the re-entered task: only that task's pending visit runs again
        visit = 1 if mode == "inside_rewind" else 2
        assert len(again) == 1 and again[0][0] == "ask" and again[0][2] == visit, again
        assert Counter(audit)[again[0]] == 2


@pytest.mark.parametrize("store", ["sqlite", "jsonl"])
def test_the_budget_holds_across_resumes(store: str, tmp_path: Path) -> None:
    """The judge always rewinds; the process dies after each committed rewind. The resumes
    together allow exactly ``max_handoffs`` moves per pipeline, then the task fails."""
    runs = 0
    while True:
        runs += 1
        assert runs < 10
        done = _child(tmp_path, store, "inline", "always")
        if done.returncode != 17:
            break
    states, ops = _facts(tmp_path, store)
    assert sorted(states.values()) == ["failed"] * N
    assert sorted(ops.values()) == [["rewind", "rewind"]] * N
    audit = _audit(tmp_path)
    assert Counter(t for t, _i, _v in audit if t == "report") == Counter()
    # judge ran once at visits 0 and 1 (their moves committed: never replayed) and at visit 2,
    # where the budget refused the move (a later resume retries a failed pipeline: again refused)
    judged = Counter((i, v) for t, i, v in audit if t == "judge")
    assert {k for k in judged} == {(i, v) for i in range(N) for v in range(3)}
    assert all(judged[i, v] == 1 for i in range(N) for v in (0, 1)), judged
