"""A restart from the seed resets a pipeline with control: the slots the new traversal skips keep
no row an earlier traversal wrote, while attempts, events, the ledger and the handed-over entries
stay. Run 1: ``judge`` hands off to ``report``. Run 2 (``retry_succeeded`` / ``fresh_restart``):
``judge`` now ends the pipeline, so ``polish`` and ``report`` must show nothing."""

from __future__ import annotations

import base64
import json
import sqlite3
from pathlib import Path
from typing import Any

import msgspec
import pytest

from pyattacker import Handoff, pipeline, task
from pyattacker.errors import StoreFeatureUnsupported
from pyattacker.views.export import iter_kind
from pyattacker_plugins.store_memory import MemoryStore
from pyattacker_plugins.store_sqlite import SqliteStore
from tests.support.handoff import Where
from tests.support.runner import RecordingStore, rows, seeds, vrunner

#: where judge goes this time: "report", "end", or "on" (no jump: polish and report run)
ROUTE: dict[str, str] = {"to": "report"}
#: a runner judge stops (and then ends its pipeline) when set
STOPPING: dict[str, Any] = {}
N = 5  # fetch ask judge polish report


@task
def fetch(x: dict[str, int]) -> dict[str, int]:
    return {"i": x["i"]}


@task
def ask(d: dict[str, int]) -> dict[str, Any]:
    return {"asked": d["i"]}


@task
def judge(d: dict[str, Any]) -> Any:
    if STOPPING:
        STOPPING.pop("runner").stop("user")
    if ROUTE["to"] == "report":
        return Handoff.to("report", {"verdict": "cached", **d}, reason="cache hit")
    if ROUTE["to"] == "end":
        return Handoff.end({"verdict": "short", **d}, reason="short")
    return {"verdict": "judged", **d}


@task
def polish(d: dict[str, Any]) -> dict[str, Any]:
    return {**d, "polished": True}


@task
def report(d: dict[str, Any]) -> dict[str, Any]:
    return {"report": d}


QA = pipeline("qa", fetch, ask, judge, polish, report, control={"edges": {"judge": ["report", "end"]}})
PLAIN = pipeline("plain", fetch, ask, polish, report)


def _run(where: Where, route: str, **kwargs: Any) -> str:
    ROUTE["to"] = route
    with where.runner(**kwargs) as r:
        rep = r.run(QA.map(seeds(2)))
    assert rep.succeeded == 2, rep.summary()
    return rep.run_id


def _facts(store: Any, pid: str) -> dict[str, Any]:
    return {
        "tasks": {t.name: (t.state, t.run_id) for t in rows(store, "tasks", pipeline_id=pid)},
        "artifacts": {a.seq: a.is_final for a in rows(store, "artifacts", pipeline_id=pid)},
        "ledger": [(h.operation, h.to_task, h.run_id) for h in store.handoffs(pid)],
    }


@pytest.mark.parametrize("restart", ["retry_succeeded", "fresh_restart"])
def test_a_traversal_that_ends_early_drops_the_rows_the_first_one_wrote(where: Where, restart: str) -> None:
    first = _run(where, "report")
    store = where.read()
    history = {kind: len(rows(store, kind, run_id=first)) for kind in ("attempts", "events")}
    pids = sorted(p.pipeline_id for p in rows(store, "pipelines"))
    assert _facts(store, pids[0])["tasks"]["report"] == ("succeeded", first)
    flags = {"retry_succeeded": True, "fresh_restart": restart == "fresh_restart"}
    second = _run(where, "end", **flags)
    store = where.read()
    for pid in pids:
        facts = _facts(store, pid)
        assert facts["tasks"] == {
            "fetch": ("succeeded", second),
            "ask": ("succeeded", second),
            "judge": ("handed_off", second),
        }  # no polish, no report: this traversal never ran them
        # the seed, fetch's and ask's outputs, run 1's entry (seq 5: still named by its ledger
        # row, no longer final) and the END's entry (seq 7, after 2 ledger rows): the only final
        assert facts["artifacts"] == {-1: False, 0: False, 1: False, 5: False, 7: True}
        assert store.get_artifact(pid, 4) is None  # run 1's report output is gone
        assert facts["ledger"] == [
            ("forward", "report", first),
            ("restart", "fetch", second),
            ("forward", None, second),
        ]
        assert store.handoffs(pid)[1].reason == restart
        assert msgspec.json.decode(store.get_artifact(pid, 5).payload)["verdict"] == "cached"
    by_name = store.stats()["tasks"]["by_name"]
    assert set(by_name) == {"fetch", "ask", "judge"} and by_name["judge"] == {"handed_off": 2}
    assert {kind: len(rows(store, kind, run_id=first)) for kind in ("attempts", "events")} == history
    tasks = list(iter_kind(store, "tasks"))
    assert sorted({t["name"] for t in tasks}) == ["ask", "fetch", "judge"]
    results = sorted(
        json.loads(base64.b64decode(r["result"]))["verdict"] for r in iter_kind(store, "results")
    )
    assert results == ["short", "short"]


def test_every_restart_resets_even_after_a_traversal_without_a_jump(where: Where) -> None:
    first = _run(where, "report")
    second = _run(where, "on", retry_succeeded=True, fresh_restart=True)
    store = where.read()
    (pid, _) = sorted(p.pipeline_id for p in rows(store, "pipelines"))
    assert {t: s for t, (s, _run_id) in _facts(store, pid)["tasks"].items()} == dict.fromkeys(
        ["fetch", "ask", "judge", "polish", "report"], "succeeded"
    )
    third = _run(where, "end", retry_succeeded=True, fresh_restart=True)
    store = where.read()
    facts = _facts(store, pid)
    assert set(facts["tasks"]) == {"fetch", "ask", "judge"}  # run 2's polish and report went
    assert {run_id for _, run_id in facts["tasks"].values()} == {third}
    # no restart row for run 3 (run 2 made no jump), but its reset happened all the same
    assert facts["ledger"] == [
        ("forward", "report", first),
        ("restart", "fetch", second),
        ("forward", None, third),
    ]
    assert [s for s, final in facts["artifacts"].items() if final] == [N + 2]


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_a_row_deleted_by_hand_after_a_traversal_without_a_jump_still_resets(
    kind: str, tmp_path: Path
) -> None:
    """No ledger and no pipeline row, but the earlier traversal's other rows (its seed row
    first) are stored: the new one starts with a reset, so the slots it skips show nothing the
    earlier one wrote, and its END entry is the pipeline's only final artifact."""
    where = Where(kind, tmp_path)
    _run(where, "on")  # all five tasks, the last output final; no jump, so no ledger
    if where.memory is not None:
        where.memory._pipelines.clear()
    else:
        con = sqlite3.connect(where.path)
        con.execute("DELETE FROM pipelines")
        con.commit()
        con.close()
    second = _run(where, "end")
    store = where.read()
    for p in rows(store, "pipelines"):
        facts = _facts(store, p.pipeline_id)
        assert set(facts["tasks"]) == {"fetch", "ask", "judge"}, facts["tasks"]
        assert {run_id for _, run_id in facts["tasks"].values()} == {second}
        assert facts["ledger"] == [("forward", None, second)]  # nothing to supersede: no restart row
        assert [seq for seq, final in facts["artifacts"].items() if final] == [N]


def test_an_unreadable_seed_row_without_a_pipeline_row_counts_as_an_earlier_traversal(
    tmp_path: Path,
) -> None:
    """The seed row that says an earlier traversal wrote rows is damaged (and the pipeline row
    deleted): the start still resets, as for a readable one, instead of failing the run."""
    where = Where("sqlite", tmp_path)
    _run(where, "on")
    con = sqlite3.connect(where.path)
    con.execute("UPDATE artifacts SET size = 'not a size' WHERE seq = -1")
    con.execute("DELETE FROM pipelines")
    con.commit()
    con.close()
    second = _run(where, "end")  # the seed rows are written again by the new traversal
    store = where.read()
    for p in rows(store, "pipelines"):
        facts = _facts(store, p.pipeline_id)
        assert set(facts["tasks"]) == {"fetch", "ask", "judge"}, facts["tasks"]
        assert {run_id for _, run_id in facts["tasks"].values()} == {second}
        assert [seq for seq, final in facts["artifacts"].items() if final] == [N]


def test_a_pipeline_row_deleted_by_hand_resets_its_other_rows(tmp_path: Path) -> None:
    where = Where("sqlite", tmp_path)
    _run(where, "report")
    con = sqlite3.connect(where.path)
    con.execute("DELETE FROM pipelines")
    con.commit()
    con.close()
    second = _run(where, "end")  # a plain run: the rows have no pipeline row to skip
    store = where.read()
    for p in rows(store, "pipelines"):
        facts = _facts(store, p.pipeline_id)
        assert set(facts["tasks"]) == {"fetch", "ask", "judge"}
        assert [op for op, _, _ in facts["ledger"]] == ["forward", "restart", "forward"]
        assert store.handoffs(p.pipeline_id)[1].reason == "pipeline_row_missing"
        assert {r for _, r in facts["tasks"].values()} == {second}


def test_the_reset_commits_with_the_pipeline_row_at_cursor_0_and_the_restart_row() -> None:
    store = RecordingStore()
    ROUTE["to"] = "report"
    with vrunner(store) as r:
        assert r.run(QA.map(seeds(1))).succeeded == 1
    store.batches.clear()
    store.closed = False
    ROUTE["to"] = "end"
    with vrunner(store, retry_succeeded=True) as r:
        assert r.run(QA.map(seeds(1))).succeeded == 1
    (carrier,) = [b for b in store.batches if b.resets]
    (reset,) = carrier.resets
    assert reset.slots == N
    (row,) = [p for p in carrier.pipelines if p.pipeline_id == reset.pipeline_id][:1]
    assert (row.cursor, row.state) == (0, "running")
    restart = [h for h in carrier.handoffs if h.pipeline_id == reset.pipeline_id]
    assert [h.operation for h in restart][:1] == ["restart"]
    assert reset.pipeline_id in carrier.finals_cleared
    # no task of the new traversal can have been committed before it
    before = store.batches[: store.batches.index(carrier)]
    assert not [t for b in before for t in b.tasks]


@pytest.mark.parametrize(
    "flags", [{}, {"retry_succeeded": True}, {"retry_succeeded": True, "fresh_restart": True}]
)
def test_a_plain_chain_never_resets(flags: dict[str, bool]) -> None:
    store = RecordingStore()
    for _ in range(2):
        store.closed = False
        with vrunner(store, **flags) as r:
            r.run(PLAIN.map(seeds(3)))
    assert not [b for b in store.batches if b.resets or b.finals_cleared or b.handoffs]


def test_a_plain_chain_on_sqlite_sends_no_reset_statement(tmp_path: Path) -> None:
    statements: list[str] = []
    for _ in range(2):
        store = SqliteStore.open_writer(str(tmp_path / "p.db"))
        assert store._conn is not None
        store._conn.set_trace_callback(statements.append)
        with vrunner(store, retry_succeeded=True, fresh_restart=True) as r:
            assert r.run(PLAIN.map(seeds(3))).succeeded == 3
    assert statements and not [s for s in statements if s.lstrip().upper().startswith("DELETE")]


class _NoResets:
    """A third-party store with a ledger that does not declare ``applies_resets``."""

    location = "noreset:x"
    read_only = False

    def __init__(self) -> None:
        self._inner = MemoryStore()

    def __getattr__(self, name: str) -> Any:
        if name == "applies_resets":
            raise AttributeError(name)
        return getattr(self._inner, name)


def test_a_store_with_a_ledger_but_without_resets_is_refused_before_anything_runs() -> None:
    store = _NoResets()
    message = r"store 'noreset:x' keeps no handoff ledger: it does not declare supports_handoffs = True"
    with pytest.raises(StoreFeatureUnsupported, match=message), vrunner(store) as r:
        r.run(QA.map(seeds(1)))
    assert rows(store._inner, "pipelines") == [] and rows(store._inner, "tasks") == []
    with vrunner(_NoResets()) as r:
        with pytest.raises(StoreFeatureUnsupported, match=r"pipeline 'qa' declares control"):
            r.check_control(QA)  # what the CLI asks before the run row is written
        r.check_control(PLAIN)
    with vrunner(_NoResets()) as r:  # a plain chain runs there as before
        assert r.run(PLAIN.map(seeds(1))).succeeded == 1


def test_a_pipeline_the_run_never_admits_keeps_its_rows(where: Where) -> None:
    """The reset waits for admission: a run that stops while a pipeline waits for its place
    leaves that pipeline as the earlier run left it (no reset, no restart row, still final)."""
    _run(where, "report")
    store = where.read()
    before = {p.pipeline_id: _facts(store, p.pipeline_id) for p in rows(store, "pipelines")}
    ROUTE["to"] = "end"
    with where.runner(retry_succeeded=True, concurrency=1, max_admitted=1) as r:
        STOPPING["runner"] = r  # the first judge stops the run while the second pipeline waits
        assert r.run(QA.map(seeds(2))).counters["pipelines_admitted"] == 1
    store = where.read()
    after = {p.pipeline_id: _facts(store, p.pipeline_id) for p in rows(store, "pipelines")}
    changed = [pid for pid in before if after[pid] != before[pid]]
    assert len(changed) == 1  # the admitted one was reset and ended; the other is untouched
    (untouched,) = set(before) - set(changed)
    assert after[untouched]["tasks"]["report"][0] == "succeeded"
    assert [op for op, _, _ in after[untouched]["ledger"]] == ["forward"]
    assert {p.pipeline_id: p.state for p in rows(store, "pipelines")}[untouched] == "succeeded"
