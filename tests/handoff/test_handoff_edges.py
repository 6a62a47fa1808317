"""Handoff edge cases found by hunting: declarations that must be refused by field, the type a
resumed destination receives, and what the memory store pays for a pipeline's final flag."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from pyattacker import FatalError, Handoff, pipeline, task
from pyattacker.errors import PipelineBuildError
from pyattacker.flow.handoff import ControlPlan, check_control
from pyattacker.model import Batch
from pyattacker_plugins.store_memory import MemoryStore
from tests.support.handoff import CALLS, QA, reset_calls
from tests.support.runner import seeds, vrunner
from tests.support.store_contract import artifact

NAMES = ["fetch", "lookup", "ask", "judge", "report"]


# -- the declaration ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("²", "edges['²']: no task is named '²'"),  # str.isdigit() is true, int() raises
        ("٣", "edges['٣']: no task is named '٣'"),  # an Arabic-Indic 3 is no seq of a config
        ("9" * 5000, "is outside the chain's 5 tasks"),  # int() refuses more than 4300 digits
    ],
)
def test_a_source_key_of_non_ascii_or_huge_digits_is_refused_by_field(key: str, message: str) -> None:
    errors: list[str] = []
    assert check_control({"edges": {key: ["end"]}}, NAMES, "pipeline.control", errors) is None
    assert len(errors) == 1 and message in errors[0]
    assert errors[0].startswith("pipeline.control.edges[")


def test_digit_keys_with_leading_zeros_are_seqs() -> None:
    errors: list[str] = []
    plan = check_control({"edges": {"01": ["end"], "003": ["report"]}}, NAMES, "pipeline.control", errors)
    assert errors == [] and plan is not None
    assert plan.describe() == {"edges": {"lookup": ["end"], "judge": ["report"]}}


def test_a_source_given_twice_names_its_first_spelling_once_quoted() -> None:
    errors: list[str] = []
    check_control({"edges": {"1": ["end"], "lookup": ["end"]}}, NAMES, "pipeline.control", errors)
    assert errors == [
        "pipeline.control.edges['lookup']: declares seq 1 ('lookup') again, already declared as '1';"
        " give each source once"
    ]


@pytest.mark.parametrize("control", [["ask"], "edges", 3])
def test_a_control_that_is_not_a_mapping_is_a_build_error(control: Any) -> None:
    @task
    def ask(x: Any) -> Any:
        return x

    @task
    def report(x: Any) -> Any:
        return x

    with pytest.raises(PipelineBuildError, match=r"control: must be a mapping with an 'edges' key"):
        pipeline("qa", ask, report, control=control)


def test_validate_and_run_refuse_a_superscript_key_with_exit_2_and_write_nothing(tmp_path: Path) -> None:
    (tmp_path / "tasks.py").write_text(
        "from pyattacker import task\n@task\ndef a(x):\n    return x\n@task\ndef b(x):\n    return x\n"
    )
    store = tmp_path / "x.db"
    config = {
        "run": {"store": str(store)},
        "pipeline": {
            "name": "p",
            "control": {"edges": {"²": ["end"]}},
            "tasks": [{"use": "tasks:a"}, {"use": "tasks:b"}],
        },
        "source": {"kind": "range", "n": 2},
    }
    (tmp_path / "c.json").write_text(json.dumps(config))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    env["PYATTACKER_HOME"] = str(tmp_path / "home")
    for command in ("validate", "run"):
        done = subprocess.run(
            [sys.executable, "-m", "pyattacker", command, "-c", str(tmp_path / "c.json")],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 2, done.stderr
        assert "pipeline.control.edges['²']: no task is named '²'" in done.stderr
        assert "Traceback" not in done.stderr
    assert not store.exists()


# -- resume at a destination ----------------------------------------------------------------------
class Answer(msgspec.Struct):
    text: str


RECEIVED: list[Any] = []
FAIL: dict[str, bool] = {}


@task
def lookup(x: int) -> Answer | Handoff:
    return Handoff.to("report", Answer(text=f"cached {x}"), reason="cache hit")


@task
def ask(a: Answer) -> Answer:
    return a


@task
def report(a: Answer) -> str:
    RECEIVED.append(a)
    if FAIL.pop("report", False):
        raise FatalError("report is down")
    return a.text  # an attribute: a dict here would fail the task


def test_a_resumed_destination_receives_the_record_type_the_source_handed_over(tmp_path: Path) -> None:
    """The entry is decoded with the source task's return annotation, as any output is on resume:
    the destination gets the Struct the uninterrupted run would have given it, not a dict."""
    tpl = pipeline("typed", lookup, ask, report, control={"edges": {"lookup": ["report"]}})
    path = str(tmp_path / "t.db")
    RECEIVED.clear()
    FAIL["report"] = True
    with vrunner(path) as r:
        assert r.run(tpl.map(seeds(1))).failed == 1
    with vrunner(path) as r:
        rep = r.run(tpl.map(seeds(1)))
    assert rep.succeeded == 1
    assert [type(a) for a in RECEIVED] == [Answer, Answer]


# -- the memory store -----------------------------------------------------------------------------
class _NoScan(dict):  # type: ignore[type-arg]
    """Artifacts that refuse to be walked: clearing one pipeline's finals must not read them all."""

    def values(self) -> Any:
        raise AssertionError("finals_cleared walked every stored artifact")


def test_memory_store_clears_one_pipelines_finals_without_walking_every_artifact() -> None:
    store = MemoryStore()
    store._artifacts = _NoScan()
    first = Batch()
    first.artifacts += [
        artifact("p", 0, is_final=False),
        artifact("p", 1, is_final=True),
        artifact("q", 1, is_final=True),
    ]
    store.commit(first)
    again = Batch()  # the END of a later traversal of p: its entry is now the only final
    again.finals_cleared.append("p")
    again.artifacts.append(artifact("p", 5, is_final=True))
    store.commit(again)
    finals = {k for k, a in dict.items(store._artifacts) if a.is_final}
    assert finals == {"p:5", "q:1"}
    third = Batch()  # a row written again without the flag is no longer final
    third.finals_cleared.append("q")
    third.artifacts.append(artifact("q", 1, is_final=False))
    store.commit(third)
    assert {k for k, a in dict.items(store._artifacts) if a.is_final} == {"p:5"}


def test_memory_store_ledger_is_read_per_pipeline() -> None:
    tpl = pipeline("qa", lookup, ask, report, control={"edges": {"lookup": ["report"]}})
    store = MemoryStore()
    RECEIVED.clear()
    with vrunner(store) as r:
        assert r.run(tpl.map(seeds(3))).succeeded == 3
    ledgers = {p: store.handoffs(p) for p in store._pipelines}
    assert sorted(len(rows) for rows in ledgers.values()) == [1, 1, 1]
    assert all(h.pipeline_id == p for p, rows in ledgers.items() for h in rows)
    assert store.handoffs("nope") == [] and store.count_handoffs() == 3


# -- a pipeline row deleted by hand ---------------------------------------------------------------
def test_a_pipeline_row_deleted_by_hand_does_not_revive_its_old_jump(tmp_path: Path) -> None:
    """An operator deletes a failed pipeline's row to run it afresh. Its ledger stays: the new
    traversal records a restart row, so when it fails and resumes, the old jump (ask -> report
    with a cached value) is not taken for one it never made."""
    path = str(tmp_path / "d.db")
    reset_calls(route=0, report_fails=True)  # ask hands {"cached": 0} to report, which fails
    with vrunner(path) as r:
        assert r.run(QA.map(seeds(1))).failed == 1
    con = sqlite3.connect(path)
    con.execute("DELETE FROM pipelines")
    con.commit()
    con.close()
    reset_calls(route=2, report_fails=True)  # afresh: ask answers, judge runs, report fails again
    with vrunner(path) as r:
        assert r.run(QA.map(seeds(1))).failed == 1
    reset_calls(route=2)
    with vrunner(path) as r:
        assert r.run(QA.map(seeds(1))).succeeded == 1
    assert [c[0] for c in CALLS] == ["report"]
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        (final,) = [json.loads(p) for (p,) in con.execute("SELECT payload FROM artifacts WHERE is_final")]
        ledger = con.execute("SELECT operation, reason FROM handoffs ORDER BY handoff_id").fetchall()
    finally:
        con.close()
    assert final == {"report": {"judged": {"asked": 0}}}  # not {"report": {"cached": 0}}
    assert ledger == [("forward", "cache hit"), ("restart", "pipeline_row_missing")]


# -- a ledger row damaged by hand -----------------------------------------------------------------
@pytest.mark.parametrize("damage", ["to_seq = 99", "to_seq = -5", "from_seq = 3"])
def test_a_damaged_ledger_row_fails_the_pipeline_instead_of_hanging_the_run(
    damage: str, tmp_path: Path
) -> None:
    """A jump the chain does not declare (a destination past the chain left the pipeline
    admitted with nothing to run: the run never ended) fails like a cursor outside the chain;
    ``fresh_restart`` then runs it from the seed."""
    path = str(tmp_path / "c.db")
    reset_calls(route=0, report_fails=True)
    with vrunner(path) as r:
        assert r.run(QA.map(seeds(1))).failed == 1
    con = sqlite3.connect(path)
    con.execute(f"UPDATE handoffs SET {damage}")
    con.commit()
    con.close()
    reset_calls(route=0)
    with vrunner(path) as r:
        rep = r.run(QA.map(seeds(1)))
    assert rep.failed == 1 and CALLS == []
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        ((error_type, message),) = con.execute("SELECT error_type, error_message FROM pipelines").fetchall()
    finally:
        con.close()
    assert error_type == "CorruptCheckpoint" and "is no jump the pipeline declares" in message
    with vrunner(path, fresh_restart=True) as r:
        assert r.run(QA.map(seeds(1))).succeeded == 1
    assert [c[0] for c in CALLS] == ["fetch", "ask", "report"]


# -- a jump resolved at run time ------------------------------------------------------------------
def test_a_plan_resolves_each_spelling_of_a_declared_jump_and_refuses_every_other() -> None:
    """The runner resolves a jump with one lookup of the ways a declared edge can be spelled; a
    repeated name, a seq past the chain, "end" for a task named "end", an undeclared edge still
    fail as they did when every jump was resolved from the names."""
    names = ["fetch", "ask", "ask", "end", "report"]  # n = 5: seq 5 is END
    plan = ControlPlan({0: [2, 4, 5], 1: [3]}, names)
    assert plan.destination(0, Handoff.to("report")) == 4
    assert plan.destination(0, Handoff.to(4)) == 4 and plan.destination(0, Handoff.to(2)) == 2
    assert plan.destination(0, Handoff.end()) == 5 and plan.destination(0, Handoff.to("end")) == 5
    assert plan.destination(1, Handoff.to(3)) == 3  # the task named "end", by its seq
    refused = {
        (0, "ask"): "a name the chain repeats (seqs [1, 2])",
        (0, 5): "outside the chain's 5 tasks",
        (0, 3): "which pipeline.control.edges does not declare",
        (1, "end"): "handed off to end, which pipeline.control.edges does not declare",
        (1, "report"): "declared from it: [3]",
        (4, "report"): "declared from it: nothing",
        (0, "judge"): "which is no task of the pipeline",
    }
    for (source, target), message in refused.items():
        with pytest.raises(FatalError, match=re.escape(message)):
            plan.destination(source, Handoff.to(target))


def test_a_directive_takes_names_and_seqs_and_refuses_anything_else_by_what_it_got() -> None:
    class Name(str):
        pass

    for target in ("report", Name("report"), 0, 3, "end"):
        assert Handoff.to(target).target == target
    refused = [  # (pairs: "" and Name("") are one key of a dict)
        ("", "Handoff target must not be empty"),
        (Name(""), "Handoff target must not be empty"),
        (-1, "Handoff target seq must be >= 0, got -1"),
        (True, "Handoff target must be a task name, a seq or 'end', got True"),
        (1.5, "Handoff target must be a task name, a seq or 'end', got 1.5"),
        (None, "Handoff target must be a task name, a seq or 'end', got None"),
    ]
    for target, message in refused:
        with pytest.raises(FatalError, match=re.escape(message)):
            Handoff.to(target)  # type: ignore[arg-type]
    with pytest.raises(FatalError, match="Handoff reason must be a string, got int"):
        Handoff.to("report", reason=3)  # type: ignore[arg-type]
    assert Handoff.end(reason=Name("short")).reason == "short"
