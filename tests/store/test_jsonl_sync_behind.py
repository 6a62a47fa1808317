"""The JSONL journal synced behind its appends: what a power loss may leave, and how a replay
tells a torn tail from corruption. A marker records how far the journal was synced when its
batch was written; a damaged batch that no later marker vouches for was never acknowledged (a
hole: the kernel wrote a later batch's pages back before an earlier one's) and is dropped with
everything after it; one that a later marker vouches for is corruption, refused as before.

The "power loss" is simulated on a copy of the journal taken while syncs are held (the bytes a
reader sees then), with the unsynced batch's bytes replaced by zeros."""

from __future__ import annotations

import json
import os
import shutil
import threading
from pathlib import Path

import pytest

from pyattacker import ConfigError
from pyattacker.model import Batch
from pyattacker_plugins import sync_behind
from pyattacker_plugins.store_jsonl import JOURNAL, JsonlStoreOpener
from tests.support.store_contract import batch_of, commit, pipeline

OPENER = JsonlStoreOpener()
_real_sync = sync_behind._sync_data


def _batches(raw: bytes) -> list[tuple[int, int, list[int]]]:
    """``(start, end, marker numbers)`` of each committed batch of a journal."""
    out, start, pos = [], 0, 0
    for line in raw.split(b"\n")[:-1]:
        end = pos + len(line) + 1
        if line.startswith(b'["commit",'):
            out.append((start, end, json.loads(line)[1:]))
            start = end
        pos = end
    return out


def _ids(path: Path) -> set[str]:
    store = OPENER.open(str(path))  # a writer: it also truncates what it does not replay
    try:
        return {p.pipeline_id for p in store.page("pipelines")}
    finally:
        store.close()


def _hold_syncs(monkeypatch: pytest.MonkeyPatch) -> threading.Event:
    """From now on each sync waits for the returned event (then syncs for real)."""
    release = threading.Event()

    def held(fd: int) -> None:
        release.wait()
        _real_sync(fd)

    monkeypatch.setattr(sync_behind, "USE_HELPER", False)  # (the thread's sync is the one wrapped)
    monkeypatch.setattr(sync_behind, "_sync_data", held)
    return release


def _copy_with_hole(src: Path, dst: Path, raw: bytes, start: int, end: int) -> None:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.lock"))
    (dst / JOURNAL).write_bytes(raw[:start] + b"\0" * (end - start) + raw[end:])


def _refused_with_hole(src: Path, dst: Path, raw: bytes, start: int, end: int) -> None:
    """A copy of ``src`` with zeros over ``raw[start:end]`` is refused as corrupt, unchanged."""
    _copy_with_hole(src, dst, raw, start, end)
    damaged = (dst / JOURNAL).read_bytes()
    with pytest.raises(ConfigError, match="corrupt"):
        _ids(dst)
    assert (dst / JOURNAL).read_bytes() == damaged  # refused, nothing rewritten


def test_a_batch_lost_before_a_later_unacknowledged_one_is_a_torn_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = tmp_path / "s"
    store = OPENER.open(str(src))
    release = threading.Event()
    try:
        commit(store, pipelines=[pipeline("p1")])  # synced: the markers after it vouch for it
        release = _hold_syncs(monkeypatch)
        first = store.commit_behind(batch_of(pipelines=[pipeline("p2")]))
        second = store.commit_behind(batch_of(pipelines=[pipeline("p3")]))
        assert first is not None and second is not None and not first.done() and not second.done()
        raw = (src / JOURNAL).read_bytes()  # what the page cache holds: all three batches
    finally:
        release.set()
        store.close()
    batches = _batches(raw)
    assert len(batches) == 3
    p1_end = batches[0][1]
    assert batches[1][2][2] <= batches[1][0] and batches[2][2][2] <= batches[1][0]  # no vouching
    hole = tmp_path / "hole"
    _copy_with_hole(src, hole, raw, batches[1][0], batches[1][1])  # p2 never reached the disk
    assert _ids(hole) == {"p1"}  # p3, written after it and never acknowledged, goes with it
    assert (hole / JOURNAL).read_bytes() == raw[:p1_end]  # the writer cut the tail off
    cut = tmp_path / "cut"  # the hole starts inside the batch's marker (a page boundary there)
    _copy_with_hole(src, cut, raw, batches[1][1] - 5, batches[1][1])
    assert _ids(cut) == {"p1"}
    last = tmp_path / "last"  # the newest batch lost: the plain torn tail, as always
    _copy_with_hole(src, last, raw, batches[2][0], batches[2][1])
    assert _ids(last) == {"p1", "p2"}


def test_a_damaged_batch_that_a_later_marker_vouches_for_is_corruption(tmp_path: Path) -> None:
    src = tmp_path / "s"
    store = OPENER.open(str(src))
    for pid in ("p1", "p2", "p3"):
        commit(store, pipelines=[pipeline(pid)])  # each waits for its sync
    store.close()
    raw = (src / JOURNAL).read_bytes()
    batches = _batches(raw)
    assert batches[2][2][2] >= batches[1][1]  # the third marker says the second batch was synced
    _refused_with_hole(src, tmp_path / "damaged", raw, batches[1][0], batches[1][1])


def test_markers_of_an_older_journal_vouch_for_everything_before_them(tmp_path: Path) -> None:
    """A journal written before markers carried the synced offset (three numbers) replays as
    before, and damage before any of its markers is corruption, as it was."""
    src = tmp_path / "s"
    store = OPENER.open(str(src))
    for pid in ("p1", "p2", "p3"):
        commit(store, pipelines=[pipeline(pid)])
    store.close()
    lines = []
    for line in (src / JOURNAL).read_bytes().split(b"\n")[:-1]:
        if line.startswith(b'["commit",'):
            line = json.dumps(json.loads(line)[:3], separators=(",", ":")).encode()
        lines.append(line)
    old = b"\n".join(lines) + b"\n"
    (src / JOURNAL).write_bytes(old)
    assert _ids(src) == {"p1", "p2", "p3"}
    batches = _batches(old)
    assert all(len(numbers) == 2 for _, _, numbers in batches)
    _refused_with_hole(src, tmp_path / "damaged", old, batches[1][0], batches[1][1])


def test_a_group_commit_is_acknowledged_once_the_journal_is_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = threading.Event()
    synced: list[int] = []

    def held(fd: int) -> None:
        release.wait()
        _real_sync(fd)
        synced.append(fd)

    monkeypatch.setattr(sync_behind, "USE_HELPER", False)  # (the thread's sync is the one wrapped)
    store = OPENER.open(str(tmp_path / "s"))
    try:
        monkeypatch.setattr(sync_behind, "_sync_data", held)
        pending = store.commit_behind(Batch())
        assert pending is not None
        assert not pending.done()
        release.set()
        pending.result(timeout=30)
        assert synced  # resolved by a sync that ran after the append
    finally:
        release.set()
        store.close()


def test_a_batch_written_unsynced_but_vouched_for_later_is_corruption_when_damaged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second and third batches were written before any sync covered them, so neither of
    their markers vouches for the second; the fourth's, written after that sync, does. Damage
    to the second batch is then corruption, even though the marker right after it looked like
    a hole's."""
    src = tmp_path / "s"
    store = OPENER.open(str(src))
    release = threading.Event()
    try:
        commit(store, pipelines=[pipeline("p1")])
        release = _hold_syncs(monkeypatch)
        unsynced = [store.commit_behind(batch_of(pipelines=[pipeline(p)])) for p in ("p2", "p3")]
        release.set()
        for fut in unsynced:
            assert fut is not None
            fut.result(timeout=30)
        commit(store, pipelines=[pipeline("p4")])
    finally:
        release.set()
        store.close()
    raw = (src / JOURNAL).read_bytes()
    batches = _batches(raw)
    assert batches[2][2][2] <= batches[1][0] < batches[1][1] <= batches[3][2][2]
    _refused_with_hole(src, tmp_path / "damaged", raw, batches[1][0], batches[1][1])


def test_a_journal_that_cannot_be_opened_for_syncing_is_synced_in_each_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(self: sync_behind.SyncBehind) -> None:
        raise PermissionError(13, "Permission denied", self.path)

    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(sync_behind.SyncBehind, "open", refuse)
    store = OPENER.open(str(tmp_path / "s"))
    try:
        assert store.sync_behind is None
        monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
        assert store.commit_behind(batch_of(pipelines=[pipeline("p1")])) is None  # durable now
        assert len(synced) == 1
        commit(store, pipelines=[pipeline("p2")])
    finally:
        store.close()
    assert _ids(tmp_path / "s") == {"p1", "p2"}
    batches = _batches((tmp_path / "s" / JOURNAL).read_bytes())
    assert batches[1][2][2] == batches[0][1]  # each marker vouches for the batches synced before it


def test_damage_other_than_zeros_in_the_newest_batch_is_still_corruption(tmp_path: Path) -> None:
    """Only a hole reads as zeros (the journal is only appended to, and no line we write holds a
    zero byte): a garbled byte in the newest batch, which no marker can vouch for yet, is
    refused as corruption, never dropped as a torn tail."""
    src = tmp_path / "s"
    store = OPENER.open(str(src))
    for pid in ("p1", "p2"):
        commit(store, pipelines=[pipeline(pid)])
    store.close()
    raw = (src / JOURNAL).read_bytes()
    start, _end, numbers = _batches(raw)[-1]
    assert numbers[2] <= start  # its own marker does not vouch for it
    garbled = raw[:start] + b"{" + raw[start + 1 :]  # the first byte of its first line
    (src / JOURNAL).write_bytes(garbled)
    with pytest.raises(ConfigError, match="corrupt"):
        _ids(src)
    assert (src / JOURNAL).read_bytes() == garbled  # refused, nothing rewritten
