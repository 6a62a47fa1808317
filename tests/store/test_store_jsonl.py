"""JSONL store specifics: the torn-tail rule, commit markers, corruption, append-only bytes."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from pyattacker import ConfigError
from pyattacker.errors import StoreUnavailable
from pyattacker.store.location import resolve_opener
from pyattacker_plugins.store_jsonl import JOURNAL, MARKER, JsonlStoreOpener
from pyattacker_plugins.store_sqlite import SqliteStoreOpener
from tests.support.store_contract import artifact, attempt, commit, pipeline

OPENER = JsonlStoreOpener()


def journal(path: Path) -> Path:
    return path / JOURNAL


def make_store(path: Path, n: int = 2) -> bytes:
    store = OPENER.open(str(path))
    for i in range(n):
        commit(store, pipelines=[pipeline(f"p{i}")], attempts=[attempt(f"p{i}")])
    store.close()
    return journal(path).read_bytes()


def pipeline_ids(path: Path, *, read_only: bool) -> set[str]:
    store = OPENER.open(str(path), read_only=read_only)
    try:
        return {p.pipeline_id for p in store.page("pipelines")}
    finally:
        store.close()


def test_layout_and_recognition(tmp_path: Path) -> None:
    path = tmp_path / "runs" / "x"
    make_store(path)
    assert (path / MARKER).is_file() and journal(path).is_file()
    assert OPENER.recognizes(str(path)) and not OPENER.recognizes(str(tmp_path))
    openers = {"sqlite": SqliteStoreOpener(), "jsonl": OPENER}
    assert resolve_opener(str(path), openers) is OPENER  # type: ignore[arg-type]
    assert resolve_opener("jsonl:runs/x", openers) is OPENER  # type: ignore[arg-type]


def test_torn_tail_tolerated_and_truncated_only_by_writer(tmp_path: Path) -> None:
    path = tmp_path / "s"
    committed = make_store(path)
    torn = committed + b'["pipeline",{"pipeline_id":"p9","run_id":"r1","na'
    journal(path).write_bytes(torn)
    assert pipeline_ids(path, read_only=True) == {"p0", "p1"}
    assert journal(path).read_bytes() == torn  # readers never write
    store = OPENER.open(str(path))
    assert journal(path).read_bytes() == committed  # the writer cut the torn tail
    commit(store, pipelines=[pipeline("p2")])
    store.close()
    assert pipeline_ids(path, read_only=True) == {"p0", "p1", "p2"}


def test_batch_without_commit_marker_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "s"
    committed = make_store(path)
    store = OPENER.open(str(path))
    commit(store, pipelines=[pipeline("px")], attempts=[attempt("px")])
    store.close()
    full = journal(path).read_bytes()
    without_marker = full[: full.rstrip(b"\n").rfind(b"\n") + 1]  # drop the last commit line only
    assert without_marker.startswith(committed) and len(without_marker) > len(committed)
    journal(path).write_bytes(without_marker)
    assert pipeline_ids(path, read_only=True) == {"p0", "p1"}
    store = OPENER.open(str(path))
    assert [a.attempt_id for a in store.page("attempts")] == [1, 2]
    again = commit(store, attempts=[attempt("p5")])
    assert again.attempts[0].attempt_id == 3
    store.close()
    assert journal(path).read_bytes().startswith(committed)


def test_garbage_after_last_commit_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "s"
    committed = make_store(path)
    journal(path).write_bytes(committed + b"\x00\x00garbage\n{not json\n")
    assert pipeline_ids(path, read_only=True) == {"p0", "p1"}
    assert pipeline_ids(path, read_only=False) == {"p0", "p1"}
    assert journal(path).read_bytes() == committed


def test_corrupt_committed_line_refused_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "s"
    data = make_store(path, n=3)
    lines = data.split(b"\n")
    assert lines[2].startswith(b'["commit",')
    lines[3] = b'["pipeline",{"pipeline_id": oops}]'  # first line of the second committed batch
    broken = b"\n".join(lines)
    journal(path).write_bytes(broken)
    for read_only in (True, False):
        with pytest.raises(ConfigError, match=r"line 4 is corrupt") as info:
            OPENER.open(str(path), read_only=read_only)
        assert JOURNAL in str(info.value)
    assert journal(path).read_bytes() == broken


def test_committed_prefix_never_rewritten(tmp_path: Path) -> None:
    path = tmp_path / "s"
    store = OPENER.open(str(path))
    prefixes = []
    for i in range(5):
        commit(
            store,
            pipelines=[pipeline("p1", state="running" if i < 4 else "succeeded", cursor=i)],
            artifacts=[artifact("p1", i, payload=bytes([i]) * 100)],
            attempts=[attempt("p1", n=i)],
        )
        prefixes.append(journal(path).read_bytes())
    store.interrupt_running("other", 1.0)
    store.close()
    final = journal(path).read_bytes()
    assert all(final.startswith(p) for p in prefixes)
    assert all(len(a) < len(b) for a, b in itertools.pairwise(prefixes))


def test_payloads_read_back_lazily(tmp_path: Path) -> None:
    path = tmp_path / "s"
    store = OPENER.open(str(path))
    blob = os.urandom(50_000)
    commit(store, artifacts=[artifact("p1", 0, payload=blob), artifact("p1", 1, payload=None, blob_ref="x")])
    store.close()
    store = OPENER.open(str(path), read_only=True)
    index_row = store._index.artifacts["p1:0"]
    assert index_row.payload is None  # the index does not hold payload bytes
    got = store.get_artifact("p1", 0)
    assert got is not None and got.payload == blob
    assert store.get_artifact("p1", 1).payload is None  # type: ignore[union-attr]
    store.close()


def test_reader_catches_up_with_live_writer(tmp_path: Path) -> None:
    path = tmp_path / "s"
    writer = OPENER.open(str(path))
    reader = OPENER.open(str(path), read_only=True)
    assert reader.page("pipelines") == []
    commit(writer, pipelines=[pipeline("p1")])
    assert [p.pipeline_id for p in reader.page("pipelines")] == ["p1"]
    with open(journal(path), "ab") as fh:  # a half-written batch is invisible
        fh.write(b'["pipeline",{"pipeline_id":"zz"')
    assert [p.pipeline_id for p in reader.page("pipelines")] == ["p1"]
    reader.close()
    writer.close()


def test_refuses_foreign_and_newer_directories(tmp_path: Path) -> None:
    foreign = tmp_path / "photos"
    foreign.mkdir()
    (foreign / "cat.jpg").write_bytes(b"meow")
    with pytest.raises(ConfigError, match="not a pyattacker jsonl store"):
        OPENER.open(str(foreign))
    assert sorted(os.listdir(foreign)) == ["cat.jpg"]
    newer = tmp_path / "newer"
    make_store(newer)
    (newer / MARKER).write_text('{"application": "pyattacker", "format": "jsonl", "version": 7}')
    before = journal(newer).read_bytes()
    for read_only in (False, True):
        with pytest.raises(ConfigError, match="newer pyattacker"):
            OPENER.open(str(newer), read_only=read_only)
    assert journal(newer).read_bytes() == before
    with pytest.raises(ConfigError, match="does not exist"):
        OPENER.open(str(tmp_path / "missing"), read_only=True)
    assert not (tmp_path / "missing").exists()


def test_unwritable_location(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises((StoreUnavailable, ConfigError)):
        OPENER.open(str(blocker / "store"))


def test_failed_write_truncates_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "s"
    store = OPENER.open(str(path))
    commit(store, pipelines=[pipeline("p1")])
    before = journal(path).read_bytes()
    real_pwrite = os.pwrite

    def failing_pwrite(fd: int, data: bytes, offset: int) -> int:
        real_pwrite(fd, bytes(data[: len(data) // 2]), offset)  # half of it reached the file
        raise OSError(28, "injected ENOSPC")

    monkeypatch.setattr(os, "pwrite", failing_pwrite)
    with pytest.raises(StoreUnavailable, match="injected ENOSPC"):
        commit(store, pipelines=[pipeline("p2")], attempts=[attempt("p2")])
    monkeypatch.setattr(os, "pwrite", real_pwrite)
    assert journal(path).read_bytes() == before
    assert set(store.lookup_pipelines(["p1", "p2"])) == {"p1"}
    b = commit(store, attempts=[attempt("p3")])
    assert b.attempts[0].attempt_id == 1
    store.close()


def test_a_payload_that_is_not_base64_names_the_artifact(tmp_path: Path) -> None:
    """The replay reads artifact lines without their payload, so a hand-edited payload shows
    only when it is read: a ``CorruptRow`` naming journal and artifact, not a ValidationError."""
    path = tmp_path / "s"
    store = OPENER.open(str(path))
    commit(store, artifacts=[artifact("p1", 0, payload=b"hello")])
    store.close()
    text = journal(path).read_bytes()
    encoded = b'"payload":"aGVsbG8="'
    assert encoded in text
    journal(path).write_bytes(text.replace(encoded, b'"payload":"!!not base64"'))
    before = journal(path).read_bytes()
    store = OPENER.open(str(path), read_only=True)
    try:
        with pytest.raises(StoreUnavailable, match=r"artifact 'p1:0'.*base64") as info:
            store.get_artifact("p1", 0)
    finally:
        store.close()
    assert type(info.value).__name__ == "CorruptRow" and str(path) in str(info.value)
    assert journal(path).read_bytes() == before


def test_a_directory_in_place_of_the_journal_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s"
    make_store(path)
    journal(path).unlink()
    journal(path).mkdir()
    with pytest.raises(ConfigError, match="is not a file"):
        OPENER.open(str(path), read_only=True)


def test_a_failed_sync_fails_its_commit_and_refuses_every_later_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The journal is synced behind its appends: a sync that fails is never tried again (after a
    failed fsync a later success proves nothing), so the store writes nothing more."""
    from pyattacker_plugins import sync_behind

    monkeypatch.setattr(sync_behind, "USE_HELPER", False)  # (the thread's sync is the one failed)
    path = tmp_path / "s"
    store = OPENER.open(str(path))
    commit(store, pipelines=[pipeline("p1")])

    def failing_sync(fd: int) -> None:
        raise OSError(5, "injected EIO")

    monkeypatch.setattr(sync_behind, "_sync_data", failing_sync)
    with pytest.raises(StoreUnavailable, match=r"commit written but not made durable.*injected EIO"):
        commit(store, pipelines=[pipeline("p2")])
    size = journal(path).stat().st_size
    refused = r"a sync of .*journal.* failed earlier.*nothing more is written"
    with pytest.raises(StoreUnavailable, match=refused):
        commit(store, pipelines=[pipeline("p3")])
    assert journal(path).stat().st_size == size
    store.close()
