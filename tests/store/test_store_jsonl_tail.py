"""A JSONL reader tailing a live journal holding handoff rows: a scan that stops part-way (a
new writer truncating a crashed writer's torn tail under it, a failed read) must leave the
reader where a fresh open would be, never with a batch applied twice."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from pyattacker.model import ArtifactRecord, Batch, HandoffRecord
from pyattacker_plugins.store_jsonl import journal as journal_mod
from pyattacker_plugins.store_jsonl.store import JOURNAL, JsonlStore
from tests.support.store_contract import artifact


def _jump(pid: str, reason: str) -> HandoffRecord:
    return HandoffRecord(
        pipeline_id=pid,
        run_id="r",
        from_seq=0,
        from_task="a",
        to_seq=None,
        to_task=None,
        entry_seq=5,
        entry_artifact_id=f"{pid}:5",
        entry_reused=False,
        reason=reason,
        ts=1.0,
    )


def _commit_jumps(path: Path, *reasons: str) -> None:
    """Open a writer (it truncates any torn tail), commit one batch of jumps, close."""
    store = JsonlStore.open_writer(str(path))
    batch = Batch()
    batch.handoffs.extend(_jump("p", r) for r in reasons)
    store.commit(batch)
    store.close()


def _ledger(store: JsonlStore) -> list[tuple[int | None, str]]:
    return [(h.handoff_id, h.reason) for h in store.handoffs("p")]


def _fresh(path: Path) -> tuple[list[tuple[int | None, str]], int]:
    store = JsonlStore.open_reader(str(path))
    try:
        return _ledger(store), store.count_handoffs()
    finally:
        store.close()


def test_reader_survives_a_writer_truncating_the_torn_tail_it_is_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s"
    _commit_jumps(path, "first")
    reader = JsonlStore.open_reader(str(path))
    _commit_jumps(path, "second")  # the reader is one batch behind
    # a crashed writer's torn tail: a whole handoff line without its commit marker, half a line
    tail = journal_mod.encode_line("handoff", _jump("p", "never committed")) + b'\n["handoff",{"pipe'
    with open(path / JOURNAL, "ab") as fh:
        fh.write(tail)
    committed_end = os.path.getsize(path / JOURNAL) - len(tail)
    real_pread = os.pread
    opened = []

    def pread(fd: int, n: int, offset: int) -> Any:
        data = real_pread(fd, n, offset)
        if not opened and offset >= committed_end:  # the reader is in the torn tail: a writer opens
            opened.append(True)
            _commit_jumps(path, "third", "fourth", "fifth")
        return data

    monkeypatch.setattr(journal_mod, "_CHUNK", 200)
    monkeypatch.setattr(journal_mod.os, "pread", pread)
    try:
        first_look = _ledger(reader)  # raced: the batches it read before the truncation, or more
        monkeypatch.undo()
        assert opened
        assert first_look in ([(1, "first"), (2, "second")], _fresh(path)[0])
        assert (_ledger(reader), reader.count_handoffs()) == _fresh(path)
    finally:
        reader.close()
    assert _fresh(path) == ([(1, "first"), (2, "second"), (3, "third"), (4, "fourth"), (5, "fifth")], 5)


def test_a_failed_read_mid_catch_up_applies_no_batch_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s"
    _commit_jumps(path, "first")
    reader = JsonlStore.open_reader(str(path))
    for reason in ("second", "third", "fourth"):
        _commit_jumps(path, reason)
    real_pread = os.pread
    calls = []

    def pread(fd: int, n: int, offset: int) -> Any:
        calls.append(offset)
        if len(calls) == 2:  # the first chunk (a batch or two) was applied; the next read fails
            raise OSError(5, "Input/output error")
        return real_pread(fd, n, offset)

    monkeypatch.setattr(journal_mod, "_CHUNK", 300)
    monkeypatch.setattr(journal_mod.os, "pread", pread)
    try:
        with pytest.raises(OSError):
            reader.handoffs("p")
        monkeypatch.undo()
        assert (_ledger(reader), reader.count_handoffs()) == _fresh(path)
    finally:
        reader.close()
    assert _fresh(path)[1] == 4


def _finals(store: JsonlStore) -> set[str]:
    """Ids marked final, by ``page`` and by ``get_artifact`` alike (a payload line keeps its old flag)."""
    rows = store.page("artifacts", limit=100)
    got = {a.artifact_id for a in rows if a.is_final}
    fetched = (store.get_artifact(a.pipeline_id, a.seq) for a in rows)
    assert got == {a.artifact_id for a in fetched if a is not None and a.is_final}
    return got


def test_unfinal_lines_and_final_flips_read_alike_by_writer_reader_and_fresh_open(tmp_path: Path) -> None:
    path = tmp_path / "s"
    writer = JsonlStore.open_writer(str(path))
    reader = JsonlStore.open_reader(str(path))
    steps: list[tuple[list[str], list[ArtifactRecord], set[str]]] = [
        (
            [],
            [
                artifact("p", 1, is_final=False),
                artifact("p", 4, is_final=True),
                artifact("q", 1, is_final=True),
            ],
            {"p:4", "q:1"},
        ),
        (["p"], [artifact("p", 5, is_final=True)], {"p:5", "q:1"}),  # an END: one final per pipeline
        (
            [],
            [artifact("p", 5, is_final=False), artifact("p", 4, None, is_final=True)],
            {"p:4", "q:1"},
        ),  # flips both ways
        (["p"], [artifact("p", 4, is_final=True)], {"p:4", "q:1"}),  # cleared and marked again in one batch
        (["p", "q"], [artifact("p", 1, is_final=True)], {"p:1"}),
    ]
    for cleared, artifacts, want in steps:
        batch = Batch()
        batch.finals_cleared.extend(cleared)
        batch.artifacts.extend(artifacts)
        batch.handoffs.append(_jump("p", "step"))
        writer.commit(batch)
        assert _finals(writer) == _finals(reader) == want
    writer.close()
    fresh = JsonlStore.open_reader(str(path))
    assert _finals(fresh) == {"p:1"}
    fresh.close()
    _commit_jumps(path, "after reopen")
    assert [h for h, _ in _fresh(path)[0]] == [1, 2, 3, 4, 5, 6]  # ids continue across a reopen
    reader.close()
