"""The Store contract for ``Batch.resets``: a pipeline with control flow starting again from its
seed loses its task rows and chain outputs, in the commit that carries it, and nothing else.

Run against every built-in store (memory, a real SQLite file, a real JSONL journal), like the
rest of the contract in ``test_store_contract.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pyattacker.model import HandoffRecord, PipelineReset
from pyattacker.store.base import Store, iter_rows
from tests.support.store_contract import (
    STORE_KINDS,
    StoreFactory,
    artifact,
    attempt,
    batch_of,
    commit,
    event,
    pipeline,
    run,
    task,
)

#: the chain's length in these rows: seqs 0..3 are its slots, 4 and 5 handed-over entries
SLOTS = 4


@pytest.fixture(params=STORE_KINDS)
def store_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    factory = StoreFactory(request.param, tmp_path)
    yield factory
    factory.close_all()


@pytest.fixture
def store(store_factory: StoreFactory) -> Store:
    return store_factory.open()


def _restart(pid: str) -> HandoffRecord:
    return HandoffRecord(
        pipeline_id=pid, run_id="r2", from_seq=4, from_task="", to_seq=0, to_task="t0", entry_seq=-1,
        entry_artifact_id=f"{pid}:-1", entry_reused=True, reason="fresh_restart", operation="restart",
    )  # fmt: skip


def _traversal(store: Store, *pids: str) -> None:
    """What a first run leaves: every slot's task row and output, an entry at seq 4 (final, as
    an END's) and one at seq 5, the seed, and history (attempts, events, a ledger row)."""
    commit(store, runs=[run("r1")], pipelines=[pipeline(p) for p in pids])
    commit(
        store,
        tasks=[task(p, s, state="succeeded") for p in pids for s in range(SLOTS)],
        artifacts=[artifact(p, s, f"{p}{s}".encode()) for p in pids for s in range(-1, SLOTS)]
        + [artifact(p, 4, b"entry", is_final=True) for p in pids]
        + [artifact(p, 5, b"entry2") for p in pids],
        attempts=[attempt(p, s) for p in pids for s in range(SLOTS)],
        events=[event(pid=p) for p in pids],
        handoffs=[_restart(p) for p in pids],
    )


def _tasks(store: Store, pid: str) -> list[tuple[int, str]]:
    return [(t.seq, t.run_id) for t in iter_rows(store, "tasks", pipeline_id=pid)]


def _artifacts(store: Store, pid: str) -> list[tuple[int, bytes | None, bool]]:
    return [(a.seq, a.payload, a.is_final) for a in iter_rows(store, "artifacts", pipeline_id=pid)]


def _history(store: Store) -> tuple[int, int, int]:
    ledger = sum(len(store.handoffs(p)) for p in ("p1", "p2"))  # type: ignore[attr-defined]
    return len(list(iter_rows(store, "attempts"))), len(list(iter_rows(store, "events"))), ledger


def test_built_in_stores_declare_that_they_apply_resets(store: Store) -> None:
    assert store.supports_handoffs is True and store.has_ledger is True


def test_a_reset_drops_task_rows_and_chain_outputs_and_nothing_else(
    store_factory: StoreFactory, store: Store
) -> None:
    _traversal(store, "p1", "p2")
    reader = store_factory.open(read_only=True) if store_factory.persistent else None
    if reader is not None:
        assert len(_tasks(reader, "p1")) == SLOTS  # a live reader sees the rows first
    history = _history(store)
    commit(store, resets=[PipelineReset(pipeline_id="p1", slots=SLOTS)])
    for view in [store] + ([reader] if reader is not None else []):
        assert _tasks(view, "p1") == []
        # the seed and the handed-over entries stay; a reset leaves final flags to finals_cleared
        assert _artifacts(view, "p1") == [(-1, b"p1-1", False), (4, b"entry", True), (5, b"entry2", False)]
        assert view.get_artifact("p1", 0) is None and view.get_artifact("p1", 3) is None
        assert len(_tasks(view, "p2")) == SLOTS and len(_artifacts(view, "p2")) == SLOTS + 3  # untouched
        assert view.lookup_pipelines(["p1"])["p1"].pipeline_id == "p1"  # the row stays
        assert _history(view) == history  # attempts, events, the ledger: append-only
        by_name = view.stats()["tasks"]["by_name"]
        assert sum(sum(states.values()) for states in by_name.values()) == SLOTS  # p2's only
    if store_factory.persistent:
        reopened = store_factory.reopen(store, read_only=True)
        assert _tasks(reopened, "p1") == [] and [a[0] for a in _artifacts(reopened, "p1")] == [-1, 4, 5]
        assert _history(reopened) == history


def test_rows_of_the_same_batch_are_written_after_the_reset(
    store_factory: StoreFactory, store: Store
) -> None:
    _traversal(store, "p1")
    commit(
        store,
        pipelines=[pipeline("p1", run_id="r2", state="running")],
        resets=[PipelineReset(pipeline_id="p1", slots=SLOTS)],
        finals_cleared=["p1"],
        tasks=[task("p1", 0, run_id="r2", state="succeeded")],
        artifacts=[artifact("p1", -1, b"seed"), artifact("p1", 0, b"new")],
        handoffs=[_restart("p1")],
    )
    expected = [(-1, b"seed", False), (0, b"new", False), (4, b"entry", False), (5, b"entry2", False)]
    assert _tasks(store, "p1") == [(0, "r2")]
    assert _artifacts(store, "p1") == expected
    finals = getattr(store, "final_artifacts", None)
    if finals is not None:
        assert finals(["p1"]) == {}
    if store_factory.persistent:
        reopened = store_factory.reopen(store, read_only=True)
        assert _tasks(reopened, "p1") == [(0, "r2")] and _artifacts(reopened, "p1") == expected


def test_an_unknown_pipeline_id_and_zero_slots_change_nothing(
    store_factory: StoreFactory, store: Store
) -> None:
    _traversal(store, "p1")
    commit(
        store,
        resets=[PipelineReset(pipeline_id="nope", slots=SLOTS), PipelineReset(pipeline_id="p1", slots=0)],
        attempts=[attempt("p1")],
    )
    assert store.lookup_pipelines(["nope"]) == {}  # never registered as a pipeline
    assert len(_tasks(store, "p1")) == SLOTS and len(_artifacts(store, "p1")) == SLOTS + 3
    if store_factory.kind == "sqlite":
        import sqlite3

        con = sqlite3.connect(f"file:{store_factory.location}?mode=ro", uri=True)
        try:
            assert con.execute(
                "SELECT COUNT(*) FROM pipeline_keys WHERE pipeline_id = 'nope'"
            ).fetchone() == (0,)
        finally:
            con.close()


def test_a_failed_commit_keeps_the_rows_a_reset_would_have_dropped(
    store_factory: StoreFactory, store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    _traversal(store, "p1")
    before = (_tasks(store, "p1"), _artifacts(store, "p1"), _history(store))
    bad = batch_of(
        pipelines=[pipeline("p1", run_id="r2")],
        resets=[PipelineReset(pipeline_id="p1", slots=SLOTS)],
        tasks=[task("p1", 0, run_id="r2")],
        artifacts=[artifact("p1", 0, b"new")],
        handoffs=[_restart("p1")],
    )
    store_factory.break_mid_batch(monkeypatch, bad)  # (SQLite: after the reset's statements ran)
    with pytest.raises(Exception, match=r"injected failure|commit failed"):
        store.commit(bad)
    monkeypatch.undo()
    assert (_tasks(store, "p1"), _artifacts(store, "p1"), _history(store)) == before
    if store_factory.persistent:
        reopened = store_factory.reopen(store, read_only=True)
        assert (_tasks(reopened, "p1"), _artifacts(reopened, "p1"), _history(reopened)) == before


def test_resets_of_several_pipelines_in_one_batch(store: Store) -> None:
    _traversal(store, "p1", "p2")
    commit(
        store,
        resets=[PipelineReset(pipeline_id="p1", slots=SLOTS), PipelineReset(pipeline_id="p2", slots=2)],
        tasks=[task("p2", 0, run_id="r2")],
    )
    assert _tasks(store, "p1") == []
    assert _tasks(store, "p2") == [(0, "r2"), (2, "r1"), (3, "r1")]  # only slots 0 and 1 went
    assert [a[0] for a in _artifacts(store, "p2")] == [-1, 2, 3, 4, 5]


def test_a_jsonl_reader_that_does_not_know_a_line_kind_refuses_the_journal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``reset`` line read by a pyattacker that predates it (simulated: the kind unknown to the
    decoder) is refused like corruption, never skipped: skipping it would show the rows the
    reset removed. The message names the kind and says a newer pyattacker may have written it."""
    from pyattacker import ConfigError
    from pyattacker_plugins.store_jsonl import journal
    from pyattacker_plugins.store_jsonl.store import JsonlStore

    writer = JsonlStore.open_writer(str(tmp_path / "j"))
    _traversal(writer, "p1")
    commit(writer, resets=[PipelineReset(pipeline_id="p1", slots=SLOTS)])
    writer.close()
    lines = (tmp_path / "j" / "journal.jsonl").read_bytes().splitlines()
    reset_line = next(i for i, line in enumerate(lines) if line.startswith(b'["reset",'))
    monkeypatch.delitem(journal._DECODERS, b"reset")
    with pytest.raises(ConfigError) as info:
        JsonlStore.open_reader(str(tmp_path / "j"))
    assert f"line {reset_line + 1} is corrupt (unknown line kind 'reset': a newer pyattacker" in str(
        info.value
    )


def test_a_reset_from_a_rewind_target_keeps_the_slots_before_it(
    store_factory: StoreFactory, store: Store
) -> None:
    """``PipelineReset.start``: a rewind to seq 2 drops slots 2.. and keeps 0, 1, the seed, the
    entries and the history copies below the seed; reopened, the file says the same."""
    _traversal(store, "p1")
    commit(store, artifacts=[artifact("p1", -7, b"kept")])
    commit(store, resets=[PipelineReset(pipeline_id="p1", slots=SLOTS, start=2)])
    views = [store] + ([store_factory.open(read_only=True)] if store_factory.persistent else [])
    for view in views:
        assert [s for s, _run in _tasks(view, "p1")] == [0, 1]
        assert [s for s, _p, _f in _artifacts(view, "p1")] == [-7, -1, 0, 1, 4, 5]


def test_handoffs_are_counted_by_operation(store: Store) -> None:
    def move(op: str, run_id: str = "r1") -> HandoffRecord:
        return HandoffRecord(
            pipeline_id="p1", run_id=run_id, from_seq=2, from_task="t2", to_seq=0, to_task="t0",
            entry_seq=4, entry_artifact_id="p1:4", entry_reused=False, operation=op,
        )  # fmt: skip

    commit(store, runs=[run("r1")], pipelines=[pipeline("p1")])
    commit(store, handoffs=[move("forward"), move("rewind"), move("rewind"), move("retry_all", "r2")])
    commit(store, handoffs=[_restart("p1")])
    assert store.handoffs_by_operation() == {"forward": 1, "retry_all": 1, "rewind": 2}  # type: ignore[attr-defined]
    assert store.handoffs_by_operation("r1") == {"forward": 1, "rewind": 2}  # type: ignore[attr-defined]
    assert store.count_handoffs() == 4  # type: ignore[attr-defined]  # a restart is no handoff
    assert store.stats()["handoffs_total"] == 4  # type: ignore[attr-defined]
