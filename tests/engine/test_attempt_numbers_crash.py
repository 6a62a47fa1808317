"""Attempt numbers are reserved before task code runs: a process SIGKILLed inside an attempt
never gets that number (nor its ``ctx.seed``) back on resume. Gaps possible, reuse impossible.

The child runs a real ``Runner`` on a SQLite file or a JSONL journal; its task appends
``task pipeline visit attempt seed`` to an audit file (plain ``open``, fsynced) first thing and
then, in the modes that say so, sends itself SIGKILL while still inside the attempt. The child
runs again until it exits normally; the verdict reads the audit file only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from tests.support import REPO

CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from pyattacker import Handoff, RetryableError, Retrying, Runner, pipeline, task

    DB, AUDIT, MODE = sys.argv[1], sys.argv[2], sys.argv[3]

    def note(task, i, ctx):
        with open(AUDIT, "a") as f:
            f.write(f"{task} {i} {ctx.visit} {ctx.attempt} {ctx.seed}\\n")
            f.flush()
            os.fsync(f.fileno())
        with open(AUDIT) as f:
            return sum(1 for line in f if line.split()[:3] == [task, str(i), str(ctx.visit)])

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    @task
    def first(x, ctx):
        note("first", x, ctx)
        return x

    @task(retry=Retrying(max_attempts=5, base=0, retry_unknown=True))
    def work(x, ctx):
        seen = note("work", x, ctx)
        if x == 1:
            return x  # the other pipeline runs undisturbed
        if MODE == "inside" and seen <= 2:
            die()  # killed inside its attempt, twice in a row
        if MODE == "retry":
            if seen == 1:
                raise RetryableError("flaky")  # attempt recorded; the retry is then killed
            if seen == 2:
                die()
        return x

    @task
    def ask(x, ctx):
        i = x if isinstance(x, int) else x["i"]
        seen = note("ask", i, ctx)
        if i == 0 and ctx.visit == 1 and seen == 1:
            die()  # killed inside the revisit a rewind opened
        return {"i": i}

    @task
    def judge(d, ctx):
        note("judge", d["i"], ctx)
        return Handoff.rewind("ask", d, reason="again") if ctx.visit == 0 else d

    if MODE == "rewind":
        control = {"rewind": {"judge": ["ask"]}, "max_handoffs": 3}
        tpl = pipeline("loop", ask, judge, control=control)
    else:
        tpl = pipeline("plain", first, work)
    with Runner(store=DB, concurrency=1, handle_signals=False) as runner:
        report = runner.run(tpl.map([0, 1]))
    sys.exit(report.exit_code)
    """
)


def _runs(tmp: Path, store: str, mode: str) -> list[int]:
    script = tmp / "child.py"
    script.write_text(CHILD)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    location = str(tmp / "a.db") if store == "sqlite" else f"jsonl:{tmp / 'a'}"
    codes = []
    for _ in range(6):
        proc = subprocess.run(
            [sys.executable, str(script), location, str(tmp / "audit.log"), mode],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        codes.append(proc.returncode)
        if proc.returncode != -signal.SIGKILL:
            assert proc.returncode == 0, proc.stderr
            return codes
    raise AssertionError(f"the child never finished: {codes}")


def _audit(tmp: Path) -> list[tuple[str, int, int, int, int]]:
    rows = []
    for line in (tmp / "audit.log").read_text().splitlines():
        task, i, visit, attempt, seed = line.split()
        rows.append((task, int(i), int(visit), int(attempt), int(seed)))
    return rows


@pytest.mark.parametrize("store", ["sqlite", "jsonl"])
@pytest.mark.parametrize(
    ("mode", "task", "kills", "numbers"),
    [
        # attempt 1 killed, then the resumed attempt 2 killed: 3 after two resumes
        ("inside", "work", 2, [1, 2, 3]),
        # attempt 1 fails (recorded), retry 2 killed: the resume runs 3
        ("retry", "work", 1, [1, 2, 3]),
        # the revisit of ask (visit 1) killed in its attempt 1: resumed as attempt 2 of visit 1
        ("rewind", "ask", 1, None),
    ],
)
def test_sigkill_inside_an_attempt_never_reuses_its_number(
    tmp_path: Path, store: str, mode: str, task: str, kills: int, numbers: list[int] | None
) -> None:
    codes = _runs(tmp_path, store, mode)
    assert codes.count(-signal.SIGKILL) == kills
    rows = _audit(tmp_path)
    keys = Counter((t, i, visit, attempt) for t, i, visit, attempt, _ in rows)
    assert all(n == 1 for n in keys.values()), f"an attempt number ran twice: {keys}"
    seeds = Counter(seed for t, _, _, _, seed in rows if t == task)
    assert all(n == 1 for n in seeds.values()), f"a ctx.seed was drawn twice: {rows}"
    if numbers is not None:
        assert [a for t, i, _, a, _ in rows if t == task and i == 0] == numbers
    else:  # the killed revisit came back with the next number (and a new seed)
        assert [(v, a) for t, i, v, a, _ in rows if t == task and i == 0] == [(0, 1), (1, 1), (1, 2)]
