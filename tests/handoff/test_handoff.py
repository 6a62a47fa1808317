"""Forward handoffs: the declaration, the jump's commit, what views show, and resume rules."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import msgspec
import pytest

from pyattacker import FatalError, Handoff, pipeline, task
from pyattacker.errors import PipelineBuildError, StoreFeatureUnsupported
from pyattacker.store.location import open_store
from pyattacker.views.export import iter_kind
from pyattacker_plugins.store_memory import MemoryStore
from tests.support import REPO
from tests.support.cli import cli
from tests.support.handoff import (
    CALLS,
    EDGES,
    QA,
    Where,
    ask,
    fetch,
    final_values,
    judge,
    ledger_of,
    publish,
    report,
    reset_calls,
)
from tests.support.runner import RecordingStore, events, rows, seeds, vrunner
from tests.support.views import serving


# -- the jump -------------------------------------------------------------------------------------
def test_forward_end_and_plain_routes(where: Where) -> None:
    reset_calls()
    with where.runner() as r:
        rep = r.run(QA.map(seeds(3)))
    store = where.read()
    assert rep.succeeded == 3 and rep.counters["handoffs"] == 2
    assert "handoffs=2" in rep.summary()
    by_seed = {p.pipeline_id: p for p in rows(store, "pipelines")}
    finals = final_values(store)
    results = sorted(str(v) for vs in finals.values() for v in vs)
    assert results == sorted(
        [
            str({"report": {"cached": 0}}),  # the value ask handed over reached report
            str({"i": 1}),  # END with its own input: fetch's output is the final artifact
            str({"report": {"judged": {"asked": 2}}}),  # the plain chain
        ]
    )
    assert all(len(v) == 1 for v in finals.values())
    assert ("judge", 0) in CALLS and sum(1 for c in CALLS if c[0] == "judge") == 1
    for pid, p in by_seed.items():
        assert p.state == "succeeded" and p.cursor == 4  # a position: END and report both end at n
        tasks = {t.seq: t.state for t in rows(store, "tasks", pipeline_id=pid)}
        ledger = ledger_of(store, pid)
        if not ledger:
            assert tasks == dict.fromkeys(range(4), "succeeded")
            continue
        (h,) = ledger
        assert tasks[1] == "handed_off" and 2 not in tasks  # judge skipped: no row at all
        assert h.operation == "forward" and h.from_task == "ask" and h.from_seq == 1
        if h.to_seq is None:
            assert h.entry_reused and h.entry_seq == 0 and 3 not in tasks
        else:
            assert (h.to_seq, h.to_task, h.entry_seq, h.entry_reused) == (3, "report", 4, False)
            entry = store.get_artifact(pid, 4)
            assert entry.task_name == "ask" and msgspec.json.decode(entry.payload) == {"cached": 0}
    outcomes = sorted(a.outcome for a in rows(store, "attempts"))
    assert outcomes.count("handed_off") == 2
    # events "standard": the ledger row is the jump's record, no event repeats it
    assert events(store, "pipeline.handoff") == []


def test_events_all_repeat_each_ledger_row_as_an_event(where: Where) -> None:
    reset_calls()
    with where.runner(events="all") as r:
        assert r.run(QA.map(seeds(3))).counters["handoffs"] == 2
    store = where.read()
    ledger = {
        (h.handoff_id, h.pipeline_id): h
        for p in rows(store, "pipelines")
        for h in ledger_of(store, p.pipeline_id)
    }
    jumps = events(store, "pipeline.handoff")
    assert len(jumps) == len(ledger) == 2
    for e in jumps:
        h = ledger[e.data["handoff_id"], e.pipeline_id]
        assert e.task_run_id == f"{h.pipeline_id}:{h.from_seq}"
        assert e.data == {
            "task": h.from_task,
            "seq": h.from_seq,
            "to_task": h.to_task,
            "to_seq": h.to_seq,
            "reason": h.reason,
            "handoff_id": h.handoff_id,
            "entry_artifact_id": h.entry_artifact_id,
            "entry_reused": h.entry_reused,
            "operation": "forward",
        }
    assert sorted((str(e.data["to_task"]), e.data["entry_reused"]) for e in jumps) == [
        ("None", True),
        ("report", False),
    ]


def test_a_worker_takes_other_pipelines_while_a_jump_waits_for_its_commit() -> None:
    """A jump is durable before its destination starts, but its pipeline waits for the group
    commit off the worker, as after a checkpoint: one worker jumps for two pipelines before one
    commit (a worker that waited would make one commit per jump)."""
    reset_calls(route=0)  # every ask hands {"cached": i} to report
    store = RecordingStore()
    with vrunner(store, concurrency=1) as r:
        rep = r.run(QA.map(seeds(4)))
    assert rep.succeeded == 4 and rep.counters["handoffs"] == 4
    jumps = [len(b.handoffs) for b in store.batches if b.handoffs]
    assert sum(jumps) == 4 and max(jumps) >= 2, jumps
    # and each destination ran only once its jump was committed, with the value handed over
    finals = sorted(str(v) for vs in final_values(store).values() for v in vs)
    assert finals == sorted(str({"report": {"cached": i}}) for i in range(4))
    assert [c for c in CALLS if c[0] == "judge"] == []


@pytest.mark.parametrize("write_behind", [True, False])
def test_a_jump_commits_its_rows_together_with_or_without_write_behind(write_behind: bool) -> None:
    """The source task's row, its attempt, the entry, the ledger row and the pipeline row of a
    jump are in one commit: with write-behind off, the attempt's own flush must not go out
    before the rest (the attempt is staged last)."""
    reset_calls(route=0)

    store = RecordingStore()
    with vrunner(store, concurrency=2, write_behind=write_behind) as r:
        assert r.run(QA.map(seeds(4))).counters["handoffs"] == 4
    jumps = [
        (
            sorted(h.pipeline_id for h in b.handoffs),
            sorted(t.pipeline_id for t in b.tasks if t.state == "handed_off"),
            sorted(a.pipeline_id for a in b.attempts if a.outcome == "handed_off"),
            sorted(a.pipeline_id for a in b.artifacts if a.seq == 4),  # the entry, at n + 0
            sorted(p.pipeline_id for p in b.pipelines if p.cursor == 3),
        )
        for b in store.batches
        if b.handoffs or any(a.outcome == "handed_off" for a in b.attempts)
    ]
    assert sum(len(j[0]) for j in jumps) == 4
    for ledger, tasks, attempts, entries, pipelines in jumps:
        assert ledger and ledger == tasks == attempts == entries == pipelines


def test_an_error_moving_a_jumped_pipeline_fails_it_alone_and_the_run_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The commit's callback moves a pipeline that jumped; an internal error there is recorded
    as a worker records one (``runner.internal_error``, the pipeline failed), the pipeline is
    not run again from its source, and the others finish."""
    from pyattacker.engine.control import Control

    landed = Control.landed
    broken: list[str] = []

    def landed_once_broken(self: Control, state: Any) -> None:
        if not broken:
            broken.append(state.spec.key)
            raise RuntimeError("moving the pipeline broke")
        landed(self, state)

    monkeypatch.setattr(Control, "landed", landed_once_broken)
    reset_calls(route=0)
    store = MemoryStore()
    with vrunner(store, concurrency=2) as r:
        rep = r.run(QA.map(seeds(3)))
    assert (rep.succeeded, rep.failed, rep.status) == (2, 1, "completed")
    assert sorted(i for t, i in CALLS if t == "ask") == [0, 1, 2]  # no source ran twice
    (failed,) = [p for p in rows(store, "pipelines") if p.state == "failed"]
    assert failed.pipeline_id == broken[0] and "moving the pipeline broke" in (failed.error_message or "")
    (err,) = events(store, "runner.internal_error")
    assert err.pipeline_id == broken[0]


def test_end_with_a_value_is_the_final_artifact(where: Where) -> None:
    reset_calls(route="end_value")
    with where.runner() as r:
        assert r.run(QA.map(seeds(1))).succeeded == 1
    store = where.read()
    ((pid, finals),) = final_values(store).items()
    assert finals == [{"short": 0}]
    (h,) = ledger_of(store, pid)
    assert h.to_seq is None and h.entry_seq == 4 and not h.entry_reused


def test_reused_input_reaches_the_destination(where: Where) -> None:
    reset_calls(route="reuse")
    with where.runner() as r:
        assert r.run(QA.map(seeds(1))).succeeded == 1
    assert list(final_values(where.read()).values()) == [[{"report": {"i": 0}}]]


@pytest.mark.parametrize(
    ("template", "route", "message"),
    [
        (
            QA,
            {"target": "judge", "route": 0},
            "'judge' (seq 2), which pipeline.control.edges does not declare",
        ),
        (QA, {"target": "nowhere", "route": 0}, "'nowhere', which is no task of the pipeline"),
        (pipeline("plain", fetch, ask, judge, report), {"route": 0}, "declares no control"),
    ],
    ids=["undeclared_edge", "unknown_task", "no_control"],
)
def test_bad_jump_fails_the_task_without_retry(template: Any, route: dict[str, Any], message: str) -> None:
    reset_calls(**route)
    store = MemoryStore()
    retried = pipeline(
        template.name,
        *[t.with_overrides(retry={"max_attempts": 3}) for t in template.tasks],
        control=template.control,
    )
    with vrunner(store) as r:
        rep = r.run(retried.map(seeds(1)))
    assert rep.failed == 1
    (p,) = rows(store, "pipelines")
    assert p.error_type == "FatalError" and message in (p.error_message or "")
    assert p.failed_task == "ask" and [c for c in CALLS if c[0] == "ask"] == [("ask", 0)]  # no retry
    assert ledger_of(store, p.pipeline_id) == []


def test_unencodable_handed_over_value_fails_naming_the_task() -> None:
    @task
    def weird(x: Any) -> Any:
        return Handoff.to("last", object())

    @task
    def last(x: Any) -> Any:
        return x

    store = MemoryStore()
    retried = weird.with_overrides(retry={"max_attempts": 3, "on": ["Exception"]})
    with vrunner(store) as r:
        rep = r.run(pipeline("w", retried, fetch, last, control={"edges": {"weird": ["last"]}}).map(seeds(1)))
    assert rep.failed == 1
    (p,) = rows(store, "pipelines")
    assert "the value task 'weird' of pipeline" in (p.error_message or "")
    assert (p.error_class, p.attempts_total) == ("fatal", 1)  # the same value again: never retried
    assert ledger_of(store, p.pipeline_id) == []


class _NoLedger:
    """A third-party store that keeps no control ledger (everything else: a memory store)."""

    location = "noledger:x"
    read_only = False

    def __init__(self) -> None:
        self._inner = MemoryStore()

    def __getattr__(self, name: str) -> Any:
        if name in ("handoffs", "count_handoffs"):
            raise AttributeError(name)
        return getattr(self._inner, name)


def test_store_without_a_ledger_is_refused_before_anything_runs() -> None:
    reset_calls()
    refused = pytest.raises(StoreFeatureUnsupported, match=r"'noledger:x' keeps no handoff ledger")
    with refused, vrunner(_NoLedger()) as r:
        r.run(QA.map(seeds(1)))
    assert CALLS == []
    with vrunner(_NoLedger()) as r:  # a plain chain runs there as before
        assert r.run(pipeline("plain", fetch, judge).map(seeds(1))).succeeded == 1


def test_the_cli_asks_before_the_run_begins_so_a_refused_run_writes_nothing() -> None:
    store = _NoLedger()
    with vrunner(store) as r:
        r.check_control(pipeline("plain", fetch, judge))  # no control: always fine
        with pytest.raises(StoreFeatureUnsupported, match=r"pipeline 'qa' declares control"):
            r.check_control(QA)
    assert store._inner.runs() == [] and rows(store._inner, "pipelines") == []


# -- the declaration ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("control", "message"),
    [
        (
            {"edges": {"judge": ["fetch"]}},
            "control.edges['judge'][0]: destination 'fetch' (seq 0) is not later",
        ),
        ({"edges": {"report": ["end"]}}, "control.edges['report'][0]: 'end' from the last task"),
        ({"edges": {"nope": ["report"]}}, "control.edges['nope']: no task is named 'nope'"),
        ({"edges": {"ask": ["report"], 1: ["end"]}}, "declares seq 1 ('ask') again"),
        ({"edges": {"ask": []}}, "must be a non-empty list of destinations"),
        ({"edges": {"ask": [True]}}, "a destination is a task name, a seq or 'end', got bool"),
        ({"edges": {9: ["end"]}}, "seq 9 is outside the chain's 4 tasks"),
        (
            {"edges": {"ask": ["end"]}, "rewind": {"report": ["ask"]}},
            "control.max_handoffs: required once rewind or retry_all is declared",
        ),
        ({"edges": {"ask": ["end"]}, "mode": "x"}, "control.mode: unknown field"),
        ({"edges": {}}, "control.edges: must be a non-empty mapping"),
    ],
)
def test_declaration_errors_name_the_field(control: Any, message: str) -> None:
    with pytest.raises(PipelineBuildError) as info:
        pipeline("qa", fetch, ask, judge, report, control=control)
    assert message in str(info.value)


def test_repeated_names_are_given_by_seq() -> None:
    with pytest.raises(
        PipelineBuildError, match=r"task name 'fetch' is repeated in the chain \(seqs \[0, 2\]\)"
    ):
        pipeline("r", fetch, ask, fetch, report, control={"edges": {"fetch": ["report"]}})
    tpl = pipeline("r", fetch, ask, fetch, report, control={"edges": {"0": [2, "end"], "ask": ["report"]}})
    assert tpl.describe()["control"] == {"edges": {0: [2, "end"], "ask": ["report"]}}


def test_identity_follows_the_resolved_edges_not_their_spelling() -> None:
    by_name = pipeline("qa", fetch, ask, judge, report, control={"edges": {"ask": ["report", "end"]}})
    by_seq = pipeline("qa", fetch, ask, judge, report, control={"edges": {"1": ["end", 3]}})
    narrower = pipeline("qa", fetch, ask, judge, report, control={"edges": {"ask": ["report"]}})
    plain = pipeline("qa", fetch, ask, judge, report)
    assert by_name.spec_digest == by_seq.spec_digest
    assert len({by_name.spec_digest, narrower.spec_digest, plain.spec_digest}) == 3
    assert "control" not in plain.describe()


# -- resume -------------------------------------------------------------------------------------
def test_resume_at_the_destination_with_the_handed_over_value(tmp_path: Path) -> None:
    reset_calls(route=0, report_fails=True)
    path = str(tmp_path / "r.db")
    with vrunner(path) as r:
        assert r.run(QA.map(seeds(1))).failed == 1
    reset_calls(route=0)
    with vrunner(path) as r:
        rep = r.run(QA.map(seeds(1)))
    assert rep.succeeded == 1
    assert [c[0] for c in CALLS] == ["report"]  # neither fetch nor ask ran again
    store = open_store(path, read_only=True)
    try:
        assert list(final_values(store).values()) == [[{"report": {"cached": 0}}]]
        (resumed,) = events(store, "pipeline.resumed")
        assert resumed.data["via"] == "handoff" and resumed.data["from_seq"] == 3
        assert resumed.data["handoff"]["from_task"] == "ask"
        assert store.count_handoffs(rep.run_id) == 0 and store.count_handoffs() == 1
    finally:
        store.close()


def test_a_consumed_jump_resumes_after_the_last_output_never_in_the_skipped_part(tmp_path: Path) -> None:
    tpl = pipeline("qa5", fetch, ask, judge, report, publish, control=EDGES)
    reset_calls(route=0, publish_fails=True)
    path = str(tmp_path / "c.db")
    with vrunner(path) as r:
        assert r.run(tpl.map(seeds(1))).failed == 1
    reset_calls(route=0)
    with vrunner(path) as r:
        assert r.run(tpl.map(seeds(1))).succeeded == 1
    assert [c[0] for c in CALLS] == ["publish"]


def test_entry_lost_restarts_from_the_seed_and_the_ledger_says_so(tmp_path: Path) -> None:
    reset_calls(route=0, report_fails=True)
    path = str(tmp_path / "l.db")
    with vrunner(path) as r:
        assert r.run(QA.map(seeds(1))).failed == 1
    con = sqlite3.connect(path)
    con.execute("DELETE FROM artifacts WHERE seq = 4")  # the entry artifact is gone
    con.commit()
    con.close()
    reset_calls(route=2)  # this time ask answers normally
    with vrunner(path) as r:
        assert r.run(QA.map(seeds(1))).succeeded == 1
    assert [c[0] for c in CALLS] == ["fetch", "ask", "judge", "report"]
    store = open_store(path, read_only=True)
    try:
        (p,) = rows(store, "pipelines")
        ledger = ledger_of(store, p.pipeline_id)
        assert [(h.operation, h.reason) for h in ledger] == [
            ("forward", "cache hit"),
            ("restart", "checkpoint_unusable"),
        ]
        (missing,) = events(store, "pipeline.checkpoint_missing")
        assert missing.data["via"] == "handoff" and missing.data["resume_from"] == 0
        assert list(final_values(store).values()) == [[{"report": {"judged": {"asked": 0}}}]]
    finally:
        store.close()


def test_fresh_restart_keeps_history_and_exactly_one_final(where: Where) -> None:
    reset_calls(route=1)  # END with fetch's output: seq 0 is final
    with where.runner() as r:
        assert r.run(QA.map(seeds(1))).succeeded == 1
    reset_calls(route=2)
    with where.runner(fresh_restart=True, retry_succeeded=True) as r:
        assert r.run(QA.map(seeds(1))).succeeded == 1
    store = where.read()
    ((pid, finals),) = final_values(store).items()
    assert finals == [{"report": {"judged": {"asked": 0}}}]  # the END's final flag was cleared
    assert [h.operation for h in ledger_of(store, pid)] == ["forward", "restart"]
    assert [h.reason for h in ledger_of(store, pid)][1] == "fresh_restart"


def test_export_shows_only_the_task_rows_of_the_current_traversal(where: Where) -> None:
    reset_calls(route=2)  # every task runs
    with where.runner() as r:
        first = r.run(QA.map(seeds(1))).run_id
    reset_calls(route=0)  # this time ask jumps over judge
    with where.runner(fresh_restart=True, retry_succeeded=True) as r:
        second = r.run(QA.map(seeds(1))).run_id
    (row,) = list(iter_kind(where.read(), "pipelines"))
    writers = {t["name"]: t["run_id"] for t in row["tasks"]}
    assert writers == {"fetch": second, "ask": second, "report": second}  # judge's old row went
    assert [h["operation"] for h in row["handoffs"]] == ["forward"]  # no jump before: no restart row
    assert {a.run_id for a in rows(where.read(), "attempts")} == {first, second}  # history stays


def test_an_end_committed_but_never_settled_is_settled_without_rerun(tmp_path: Path) -> None:
    reset_calls(route=1)
    path = str(tmp_path / "e.db")
    with vrunner(path) as r:
        assert r.run(QA.map(seeds(1))).succeeded == 1
    con = sqlite3.connect(path)  # a row as a writer that lost its last update would leave it
    con.execute("UPDATE pipelines SET state = 'interrupted'")
    con.commit()
    con.close()
    reset_calls(route=1)
    with vrunner(path) as r:
        assert r.run(QA.map(seeds(1))).succeeded == 1
    assert CALLS == []
    store = open_store(path, read_only=True)
    try:
        (repaired,) = events(store, "pipeline.terminal_repaired")
        assert repaired.data["artifact_seq"] == 0 and repaired.data["handoff_task"] == "ask"
    finally:
        store.close()


# -- the command line (the example in examples/handoffs, copied so its store stays out of the tree)
EXAMPLE = REPO / "examples" / "handoffs"


def _example(tmp_path: Path, edges: Any = None) -> Path:
    shutil.copy(EXAMPLE / "router.py", tmp_path / "router.py")
    text = (EXAMPLE / "config.yaml").read_text()
    if edges is not None:
        text = text.replace("lookup: [report, end]", edges)
    (tmp_path / "config.yaml").write_text(text)
    return tmp_path / "config.yaml"


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    env["PYATTACKER_HOME"] = str(tmp_path / "home")
    return cli(list(args), env)


def test_the_example_config_runs_and_the_views_show_the_jumps(tmp_path: Path) -> None:
    config = _example(tmp_path)
    checked = _cli(tmp_path, "validate", "-c", str(config))
    assert checked.returncode == 0, checked.stderr
    assert 'control: {"edges": {"lookup": ["report", "end"]}}' in checked.stdout
    ran = _cli(tmp_path, "run", "-c", str(config))
    assert ran.returncode == 0, ran.stderr
    assert "handoffs 4" in ran.stdout
    store = str(tmp_path / "runs" / "handoffs.db")
    shown = _cli(tmp_path, "report", store)
    assert "task lookup: handed_off=4 succeeded=6" in shown.stdout and "handoffs=4" in shown.stdout
    assert "task judge: succeeded=6" in shown.stdout  # the four that jumped skipped it
    watched = _cli(tmp_path, "watch", store, "--iterations", "1")
    assert "attempts total=40 " in watched.stdout and "handoffs=4" in watched.stdout
    with serving(store, "t0ken") as (port, _url):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            conn.request("GET", "/pipelines?limit=20", headers={"Authorization": "Bearer t0ken"})
            served = json.loads(conn.getresponse().read())
            conn.request("GET", "/stats", headers={"Authorization": "Bearer t0ken"})
            assert json.loads(conn.getresponse().read())["handoffs_total"] == 4
        finally:
            conn.close()
    assert sorted(len(row["handoffs"]) for row in served["rows"]) == [0] * 6 + [1] * 4
    exported = _cli(tmp_path, "export", store, "-", "--rows", "pipelines", "--format", "jsonl")
    ledgers = {json.loads(line)["key"]: json.loads(line)["handoffs"] for line in exported.stdout.splitlines()}
    jumps = sorted((h[0]["to_task"] or "END", h[0]["reason"]) for h in ledgers.values() if h)
    assert jumps == [("END", "out of scope")] * 2 + [("report", "cache hit")] * 2
    results = _cli(tmp_path, "export", store, "-", "--rows", "results", "--format", "jsonl")
    answers = sorted(str(json.loads(line)["result"]["answer"]) for line in results.stdout.splitlines())
    assert answers == sorted(["four", "paris", "None", "None"] + [f"answer {i}" for i in (1, 3, 5, 6, 7, 8)])


def test_config_with_a_backward_edge_is_refused_naming_the_field(tmp_path: Path) -> None:
    config = _example(tmp_path, "report: [ask]")
    for command in ("validate", "run"):
        result = _cli(tmp_path, command, "-c", str(config))
        assert result.returncode == 2
        assert (
            "pipeline.control.edges['report'][0]: destination 'ask' (seq 2) is not later than the"
            " source 'report' (seq 4); v1 handoffs are forward-only" in result.stderr
        )
    assert not (tmp_path / "runs").exists()


def test_a_fanout_child_cannot_hand_off() -> None:
    from pyattacker import fanout

    @task
    def jumper(x: Any) -> Any:
        return Handoff.end()

    store = MemoryStore()
    group = fanout(fetch, jumper, name="both")
    with vrunner(store) as r:
        assert (
            r.run(pipeline("f", group, report, control={"edges": {"both": ["end"]}}).map(seeds(1))).failed
            == 1
        )
    (p,) = rows(store, "pipelines")
    assert "fanout child 'jumper' returned a handoff" in (p.error_message or "")


def test_directive_construction_errors_and_repr() -> None:
    for bad in (True, "", -1, 1.5):
        with pytest.raises(FatalError, match="Handoff target"):
            Handoff.to(bad)  # type: ignore[arg-type]
    with pytest.raises(FatalError, match="reason must be a string"):
        Handoff.to("x", reason=3)  # type: ignore[arg-type]
    assert (
        repr(Handoff.to("report", {"secret": 1}, reason="r")) == "Handoff.to('report', <value>, reason='r')"
    )
    with pytest.raises(TypeError, match="cannot be subclassed"):
        type("Sub", (Handoff,), {})


def test_a_torn_finish_after_a_jump_is_settled_without_rerun(tmp_path: Path) -> None:
    reset_calls(route=0)
    path = str(tmp_path / "t.db")
    with vrunner(path) as r:
        assert r.run(QA.map(seeds(1))).succeeded == 1
    con = sqlite3.connect(path)  # report's output is durable, the row still says running
    con.execute("UPDATE pipelines SET state = 'interrupted'")
    con.commit()
    con.close()
    reset_calls(route=0)
    with vrunner(path) as r:
        assert r.run(QA.map(seeds(1))).succeeded == 1
    assert CALLS == []
    store = open_store(path, read_only=True)
    try:
        assert list(final_values(store).values()) == [[{"report": {"cached": 0}}]]
        assert len(events(store, "pipeline.terminal_repaired")) == 1
    finally:
        store.close()


def test_the_example_in_two_shards_counts_every_jump_once(tmp_path: Path) -> None:
    config = _example(tmp_path)
    ran = _cli(tmp_path, "run", "-c", str(config), "--shards", "2")
    assert ran.returncode == 0, ran.stderr
    shards = sorted(str(p) for p in (tmp_path / "runs").glob("handoffs.shard*of2.db"))
    assert len(shards) == 2
    merged = _cli(tmp_path, "report", *shards)
    assert "task lookup: handed_off=4 succeeded=6" in merged.stdout and "handoffs=4" in merged.stdout
    again = _cli(tmp_path, "run", "-c", str(config), "--shards", "2")  # everything done: no jump again
    assert again.returncode == 0, again.stderr
    assert "handoffs=4" in _cli(tmp_path, "report", *shards, "--run-id", "all").stdout
