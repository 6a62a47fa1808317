"""The restart reset through the command line, as users run it: ``run`` once with ``judge``
handing off to ``report``, again with ``--retry-succeeded`` (and ``--fresh-restart``) where
``judge`` ends the pipeline; ``report``, ``export``, ``watch`` and ``serve`` then count only the
tasks of the current traversal. What ``judge`` does comes from the environment, so the chain's
identity (its code) is the same in both runs."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import cli
from tests.support.views import serving

TASKS = """
import os
from pyattacker import Handoff
from pyattacker import task

@task
def fetch(seed):
    return {"i": seed["i"]}

@task
def ask(q):
    return {**q, "answer": f"answer {q['i']}"}

@task
def judge(a):
    if os.environ["ROUTE"] == "report":
        return Handoff.to("report", {**a, "cached": True}, reason="cache hit")
    return Handoff.end({**a, "short": True}, reason="short")

@task
def polish(a):
    return {**a, "polished": True}

@task
def report(a):
    return {"report": a}
"""
#: ``events: all``: each jump is also an event (with ``standard`` the ledger row alone records it)
CONFIG = """
run: {concurrency: 2, events: all}
pipeline:
  name: qa
  control: {edges: {judge: [report, end]}}
  tasks:
    - {use: "qa_tasks:fetch"}
    - {use: "qa_tasks:ask"}
    - {use: "qa_tasks:judge"}
    - {use: "qa_tasks:polish"}
    - {use: "qa_tasks:report"}
source: {kind: range, n: 3}
"""


def _cli(tmp: Path, route: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp), os.environ.get("PYTHONPATH", "")]))
    env.update(PYATTACKER_HOME=str(tmp / "home"), ROUTE=route)
    done = cli(list(args), env)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done


def _view(*args: str) -> str:
    """A read-only command (report, watch, export) in this process: the same command line
    without a new interpreter for each of the many reads (the runs above are real processes)."""
    from click.testing import CliRunner

    from pyattacker.cli.main import cli as command

    done = CliRunner().invoke(command, list(args))
    assert done.exit_code == 0, (args, done.output, done.exception)
    return done.stdout


def _lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines()]


@pytest.mark.parametrize("store", ["sqlite", "jsonl"])
@pytest.mark.parametrize("again", [["--retry-succeeded"], ["--retry-succeeded", "--fresh-restart"]])
def test_a_second_run_that_ends_early_shows_no_task_the_first_one_ran(
    tmp_path: Path, store: str, again: list[str]
) -> None:
    (tmp_path / "qa_tasks.py").write_text(TASKS)
    (tmp_path / "config.yaml").write_text(CONFIG)
    location = str(tmp_path / "qa.db") if store == "sqlite" else f"jsonl:{tmp_path / 'qa'}"
    config = str(tmp_path / "config.yaml")
    _cli(tmp_path, "report", "run", "-c", config, "--store", location)
    first = _view("report", location)
    assert "task report: succeeded=3" in first and "task judge: handed_off=3" in first
    _cli(tmp_path, "end", "run", "-c", config, "--store", location, "--resume", *again)

    for run_id in ([], ["--run-id", "all"]):
        shown = _view("report", location, *run_id)
        assert "task judge: handed_off=3" in shown and "task fetch: succeeded=3" in shown
        assert "task report:" not in shown and "task polish:" not in shown, shown
    watched = _view("watch", location, "--iterations", "1")
    assert "task judge: handed_off=3" in watched and "task report:" not in watched, watched

    tasks = _lines(_view("export", location, "-", "--rows", "tasks", "--format", "jsonl"))
    assert sorted({str(t["name"]) for t in tasks}) == ["ask", "fetch", "judge"]
    results = _view("export", location, "-", "--rows", "results", "--format", "jsonl")
    assert sorted((r["result"] or {}).get("i") for r in _lines(results)) == [0, 1, 2]
    assert all(r["result"]["short"] and "report" not in r["result"] for r in _lines(results))
    pipelines = _lines(_view("export", location, "-", "--rows", "pipelines", "--format", "jsonl"))
    for row in pipelines:
        assert [h["operation"] for h in row["handoffs"]] == ["forward", "restart", "forward"]
        assert sorted(str(t["name"]) for t in row["tasks"]) == ["ask", "fetch", "judge"]
    # run 1's attempts and events are history: still there
    attempts = _lines(_view("export", location, "-", "--rows", "attempts", "--format", "jsonl"))
    assert sorted(str(a["task_name"]) for a in attempts).count("report") == 3
    assert len({a["run_id"] for a in attempts}) == 2
    events = _lines(_view("export", location, "-", "--rows", "events", "--format", "jsonl"))
    jumps = [e["data"]["to_task"] for e in events if e["kind"] == "pipeline.handoff"]
    assert sorted(map(str, jumps)) == ["None"] * 3 + ["report"] * 3
    # and in the ledger, whatever the events setting: both traversals' jumps, the restart between
    ledgers = [row["handoffs"] for row in pipelines]
    assert [[str(h["to_task"]) for h in rows] for rows in ledgers] == [["report", "fetch", "None"]] * 3

    with serving(location, "t0ken") as (port, _url):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            conn.request("GET", "/stats", headers={"Authorization": "Bearer t0ken"})
            stats = json.loads(conn.getresponse().read())
        finally:
            conn.close()
    assert set(stats["tasks"]["by_name"]) == {"fetch", "ask", "judge"}, stats["tasks"]
