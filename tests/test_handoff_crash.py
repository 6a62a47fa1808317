"""A process killed on either side of a handoff's commit, then resumed: judged from outside.

The child runs a real ``Runner`` on a SQLite file and dies with ``os._exit`` just before the
store commits a batch holding a handoff, just after, or inside the destination task. Every
task body appends a line to an audit file (plain ``open``, not the library), and the verdict
reads that file and the store with ``sqlite3``: a source task whose handoff was committed never
runs again, skipped tasks never run, each pipeline ends with exactly one final artifact holding
what the jump handed over, and the ledger holds exactly one jump per pipeline.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
N = 4
CHILD = textwrap.dedent(
    """
    import os, sys
    from pyattacker.handoff import Handoff
    from pyattacker.pipeline import pipeline
    from pyattacker.runner import Runner
    from pyattacker.task import task
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

    commit = SqliteStore.commit

    def dying_commit(self, batch):
        if batch.handoffs and MODE == "before_commit":
            os._exit(17)
        commit(self, batch)
        if batch.handoffs and MODE == "after_commit":
            os._exit(17)

    SqliteStore.commit = dying_commit
    tpl = pipeline("qa", fetch, ask, judge, report, control={"edges": {"ask": ["report", "end"]}})
    with Runner(store=DB, concurrency=1, handle_signals=False) as runner:
        report_ = runner.run(tpl.map(range(int(sys.argv[4]))))
    sys.exit(report_.exit_code)
    """
)


def _child(tmp: Path, mode: str) -> subprocess.CompletedProcess[str]:
    script = tmp / "child.py"
    script.write_text(CHILD)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run(
        [sys.executable, str(script), str(tmp / "h.db"), str(tmp / "audit.log"), mode, str(N)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _audit(tmp: Path) -> list[tuple[str, int]]:
    lines = (tmp / "audit.log").read_text().split()
    return [(lines[i], int(lines[i + 1])) for i in range(0, len(lines), 2)]


@pytest.mark.parametrize("mode", ["before_commit", "after_commit", "in_destination"])
def test_killed_around_a_handoff_then_resumed(mode: str, tmp_path: Path) -> None:
    crashed = _child(tmp_path, mode)
    assert crashed.returncode == 17, crashed.stderr
    con = sqlite3.connect(f"file:{tmp_path / 'h.db'}?mode=ro", uri=True)
    committed = con.execute("SELECT COUNT(*) FROM handoffs").fetchone()[0]
    con.close()
    assert committed == (0 if mode == "before_commit" else 1)
    before = _audit(tmp_path)

    resumed = _child(tmp_path, "none")
    assert resumed.returncode == 0, resumed.stderr
    audit = _audit(tmp_path)
    con = sqlite3.connect(f"file:{tmp_path / 'h.db'}?mode=ro", uri=True)
    try:
        states = [s for (s,) in con.execute("SELECT state FROM pipelines")]
        assert states == ["succeeded"] * N
        jumps = con.execute(
            "SELECT k.pipeline_id, COUNT(*) FROM handoffs AS h JOIN pipeline_keys AS k ON k.pk = h.pk"
            " WHERE h.operation = 'forward' GROUP BY k.pipeline_id"
        ).fetchall()
        assert sorted(n for _, n in jumps) == [1] * N  # no jump recorded twice
        finals = con.execute(
            "SELECT k.pipeline_id, a.payload FROM artifacts AS a JOIN pipeline_keys AS k ON k.pk = a.pk"
            " WHERE a.is_final"
        ).fetchall()
    finally:
        con.close()
    assert len(finals) == N and len({pid for pid, _ in finals}) == N
    assert sorted(json.dumps(json.loads(p), sort_keys=True) for _, p in finals) == sorted(
        [json.dumps({"report": 0}), json.dumps({"i": 1}), json.dumps({"report": 2}), json.dumps({"i": 3})]
    )
    assert not [a for a in audit if a[0] == "judge"]  # a skipped task never ran
    assert sorted(i for t, i in audit if t == "fetch") == list(range(N))  # checkpoints held
    asks = sorted(i for t, i in audit if t == "ask")
    if mode == "before_commit":  # the jump was not durable: its source may run once more
        assert asks == [0, 0, 1, 2, 3]
    else:  # a committed jump is never taken again
        assert asks == list(range(N))
    assert ("ask", 0) in before
