"""The backward tier: ``Handoff.rewind`` / ``Handoff.retry_all``, visits, history and the budget,
on every built-in store."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from pyattacker import FatalError, Handoff, pipeline, task
from pyattacker.errors import PipelineBuildError
from pyattacker.flow.visits import visit_numbers
from tests.support.handoff import Where, final_values, ledger_of
from tests.support.runner import rows, seeds

LOG: list[tuple[str, int, int]] = []
MODE: dict[str, Any] = {}


@task
def ask(x: Any, ctx: Any) -> dict[str, Any]:
    LOG.append(("ask", ctx.visit, ctx.attempt))
    feedback = x.get("feedback") if isinstance(x, dict) else None
    return {"answer": f"try {ctx.visit}", "feedback": feedback, "earlier": ctx.history()}


@task
def judge(d: dict[str, Any], ctx: Any) -> Any:
    LOG.append(("judge", ctx.visit, ctx.attempt))
    if MODE.get("retry_all") and ctx.visit < MODE["retry_all"]:
        return Handoff.retry_all(reason="start over")
    if ctx.visit < MODE.get("rewinds", 0):
        return Handoff.rewind("ask", {"feedback": f"bad {ctx.visit}"}, reason="wrong")
    return {"verdict": "ok", "answer": d["answer"], "feedback": d["feedback"], "earlier": d["earlier"]}


@task
def report(d: dict[str, Any], ctx: Any) -> dict[str, Any]:
    LOG.append(("report", ctx.visit, ctx.attempt))
    return {"report": d}


CONTROL = {"rewind": {"judge": ["ask"]}, "retry_all": ["judge"], "max_handoffs": 5}
LOOP = pipeline("loop", ask, judge, report, control=CONTROL)


def _reset(**mode: Any) -> None:
    LOG.clear()
    MODE.clear()
    MODE.update(mode)


def test_rewind_reruns_the_target_with_the_value_and_a_new_visit(where: Where) -> None:
    _reset(rewinds=2)
    with where.runner() as r:
        rep = r.run(LOOP.map(seeds(1)))
    assert rep.succeeded == 1 and rep.counters["handoffs"] == 2
    assert LOG == [
        ("ask", 0, 1), ("judge", 0, 1), ("ask", 1, 1), ("judge", 1, 1),
        ("ask", 2, 1), ("judge", 2, 1), ("report", 0, 1),
    ]  # fmt: skip
    store = where.read()
    (final,) = next(iter(final_values(store).values()))
    got = final["report"]
    assert got["answer"] == "try 2" and got["feedback"] == "bad 1"
    # history: what the earlier visits of ask produced, oldest first
    assert [h["answer"] for h in got["earlier"]] == ["try 0", "try 1"]
    (pid,) = {p.pipeline_id for p in rows(store, "pipelines")}
    ledger = ledger_of(store, pid)
    assert [(h.operation, h.from_seq, h.to_seq, h.reason) for h in ledger] == [("rewind", 1, 0, "wrong")] * 2
    assert visit_numbers(ledger, 3) == [(0, 1), (1, 2)]
    # the effective rows are the last visit's; attempts of revisits carry the visit in their id
    tasks = {t.seq: t.state for t in rows(store, "tasks", pipeline_id=pid)}
    assert tasks == {0: "succeeded", 1: "succeeded", 2: "succeeded"}
    ids = sorted(a.task_run_id for a in rows(store, "attempts", pipeline_id=pid))
    assert ids == sorted(
        [f"{pid}:0", f"{pid}:0#1", f"{pid}:0#2", f"{pid}:1", f"{pid}:1#1", f"{pid}:1#2", f"{pid}:2"]
    )
    assert store.get_artifact(pid, 0) is not None and store.get_artifact(pid, 0).is_final is False


def test_retry_all_starts_from_the_seed_and_keeps_the_budget(where: Where) -> None:
    _reset(retry_all=1)
    with where.runner() as r:
        rep = r.run(LOOP.map(seeds(1)))
    assert rep.succeeded == 1
    assert [e[:2] for e in LOG] == [("ask", 0), ("judge", 0), ("ask", 1), ("judge", 1), ("report", 0)]
    store = where.read()
    (pid,) = {p.pipeline_id for p in rows(store, "pipelines")}
    (h,) = ledger_of(store, pid)
    assert (h.operation, h.to_seq, h.entry_seq, h.entry_reused) == ("retry_all", 0, -1, True)
    (final,) = next(iter(final_values(store).values()))
    assert final["report"]["feedback"] is None  # the seed again, not the judge's value


def test_an_exhausted_budget_fails_the_task_naming_it(where: Where) -> None:
    _reset(rewinds=10)
    with where.runner() as r:
        rep = r.run(LOOP.map(seeds(1)))
    assert rep.failed == 1
    store = where.read()
    (p,) = rows(store, "pipelines")
    assert p.error_type == "FatalError" and "control budget exhausted" in (p.error_message or "")
    assert "all 5 handoffs" in (p.error_message or "")
    assert len(ledger_of(store, p.pipeline_id)) == 5  # N permits exactly N
    assert [e[:2] for e in LOG].count(("judge", 5)) == 1  # the sixth move was refused, never retried


def test_the_run_budget_caps_the_pipeline_budget(where: Where) -> None:
    _reset(rewinds=10)
    with where.runner(max_handoffs=2) as r:
        rep = r.run(LOOP.map(seeds(1)))
    assert rep.failed == 1
    store = where.read()
    (p,) = rows(store, "pipelines")
    assert "all 2 handoffs" in (p.error_message or "")


def test_an_undeclared_rewind_fails_naming_the_edge() -> None:
    @task
    def back(d: Any) -> Any:
        return Handoff.rewind("report", None)

    from pyattacker_plugins.store_memory import MemoryStore
    from tests.support.runner import vrunner

    plan = pipeline("p", ask, back, report, control={"rewind": {"report": ["ask"]}, "max_handoffs": 3})
    store = MemoryStore()
    with vrunner(store) as r:
        rep = r.run(plan.map(seeds(1)))
    assert rep.failed == 1
    (p,) = rows(store, "pipelines")
    assert "rewound to 'report' (seq 2), which pipeline.control.rewind does not declare" in (
        p.error_message or ""
    )


@pytest.mark.parametrize(
    ("control", "message"),
    [
        ({"rewind": {"judge": ["ask"]}}, "control.max_handoffs: required once rewind or retry_all"),
        (
            {"retry_all": ["judge"], "max_handoffs": 0},
            "control.max_handoffs: must be a positive integer, got 0",
        ),
        ({"retry_all": ["judge"], "max_handoffs": True}, "got True"),
        ({"retry_all": ["judge"], "max_handoffs": 3.0}, "got 3.0"),
        ({"retry_all": ["judge"], "max_handoffs": "3"}, "got '3'"),
        (
            {"rewind": {"judge": ["report"]}, "max_handoffs": 3},
            "control.rewind['judge'][0]: target 'report' (seq 2) is not earlier",
        ),
        ({"rewind": {"judge": ["judge"]}, "max_handoffs": 3}, "is not earlier than the source"),
        ({"rewind": {"judge": ["end"]}, "max_handoffs": 3}, "'end' is no rewind target"),
        ({"rewind": {"judge": ["ask"], 1: ["ask"]}, "max_handoffs": 3}, "declares seq 1 ('judge') again"),
        ({"retry_all": ["nope"], "max_handoffs": 3}, "control.retry_all[0]: no task is named 'nope'"),
        ({"rewind": [], "max_handoffs": 3}, "control.rewind: must be a non-empty mapping"),
    ],
)
def test_backward_declaration_errors_name_the_field(control: Any, message: str) -> None:
    with pytest.raises(PipelineBuildError) as info:
        pipeline("bad", ask, judge, report, control=control)
    assert message in str(info.value)


def test_declarations_are_described_and_join_the_identity() -> None:
    plan = LOOP.control
    assert plan is not None and plan.backward
    assert plan.describe() == {"rewind": {"judge": ["ask"]}, "retry_all": ["judge"], "max_handoffs": 5}
    other = pipeline("loop", ask, judge, report, control={**CONTROL, "max_handoffs": 6})
    assert other.spec_digest != LOOP.spec_digest


def test_handoff_constructors() -> None:
    assert Handoff.rewind("ask", None).value is None and Handoff.rewind("ask", None).operation == "rewind"
    assert Handoff.retry_all("r").operation == "retry_all" and Handoff.retry_all().reuses_input
    assert repr(Handoff.rewind(0, 1, "x")) == "Handoff.rewind(0, <value>, reason='x')"
    with pytest.raises(FatalError, match="not 'end'"):
        Handoff.rewind("end", 1)
    assert msgspec.json.encode(Handoff.retry_all().reason) == b'""'


def test_fresh_restart_resets_the_budget_and_keeps_history(where: Where) -> None:
    _reset(rewinds=4)
    with where.runner() as r:
        assert r.run(LOOP.map(seeds(1))).succeeded == 1
    # a new traversal: every task gets its next visit (5), and three more rewinds are allowed
    # although the first traversal used four of the five
    _reset(rewinds=8)
    with where.runner(fresh_restart=True, retry_succeeded=True) as r:
        rep = r.run(LOOP.map(seeds(1)))
    assert rep.succeeded == 1, rep.summary()
    assert [v for t, v, _a in LOG if t == "ask"] == [5, 6, 7, 8]
    store = where.read()
    (final,) = next(iter(final_values(store).values()))
    kept = [h["answer"] for h in final["report"]["earlier"]]
    assert kept == [f"try {v}" for v in (0, 1, 2, 3, 5, 6, 7)]  # both traversals' history
    (pid,) = {p.pipeline_id for p in rows(store, "pipelines")}
    ops = [h.operation for h in ledger_of(store, pid)]
    assert ops == ["rewind"] * 4 + ["restart"] + ["rewind"] * 3
