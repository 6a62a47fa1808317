"""Schema 6: pipeline ids are indexed in sorted batches. New keys go to the key table only; the
writer merges them into ``pipeline_ids`` every ``KEY_TAIL_MAX`` keys, when it closes, and (what a
crash left) when it opens. Whichever side of the mark an id is on, every read by id finds it,
pages come in (pipeline_id, seq) order, and no id gets two numbers."""

from __future__ import annotations

import hashlib
import logging
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from pyattacker_plugins.store_sqlite import SqliteStoreOpener
from pyattacker_plugins.store_sqlite import commit as sqlite_commit
from tests.support import REPO
from tests.support.sqlite_downgrades import downgrade_to_v5, raw
from tests.support.store_contract import artifact, attempt, commit, pipeline, task

OPENER = SqliteStoreOpener()
#: ids whose sort order differs from the order they are registered in
IDS = [f"{c}{i}" for i, c in enumerate("qbxdmzafkwcprhe")]


def _mark(path: Path) -> int:
    return int(raw(path, "SELECT value FROM store_meta WHERE key = 'keys_indexed'")[0][0])


def _write(store: Any, ids: list[str]) -> None:
    """One commit per pipeline: a pipeline row, two tasks and artifacts, an attempt."""
    for pid in ids:
        commit(
            store,
            pipelines=[pipeline(pid)],
            tasks=[task(pid, 0), task(pid, 1)],
            artifacts=[artifact(pid, 0), artifact(pid, 1, is_final=True)],
            attempts=[attempt(pid, 0)],
        )


def _assert_every_read_finds(store: Any, ids: list[str]) -> None:
    """Each read by id, on both sides of the mark; pages in (pipeline_id, seq) order."""
    assert set(store.lookup_pipelines(ids)) == set(ids)
    assert set(store.lookup_states(ids)) == set(ids)
    assert sorted(store.rows_by_pipeline("tasks", ids)) == sorted(ids)
    assert {p: [a.seq for a in rows] for p, rows in store.rows_by_pipeline("artifacts", ids).items()} == {
        p: [0, 1] for p in ids
    }
    assert {p: a.seq for p, a in store.final_artifacts(ids).items()} == {p: 1 for p in ids}
    assert set(store.task_leases(ids)) == {f"{p}:0" for p in ids}
    for pid in ids:
        assert store.get_artifact(pid, 1) is not None
        assert [t.seq for t in store.page("tasks", pipeline_id=pid)] == [0, 1]
        assert {a.pipeline_id for a in store.page("attempts", pipeline_id=pid)} == {pid}
        assert [p.pipeline_id for p in store.page("pipelines", pipeline_id=pid)] == [pid]
    expected = [(p, s) for p in sorted(ids) for s in (0, 1)]
    for kind in ("tasks", "artifacts"):
        assert [(r.pipeline_id, r.seq) for r in store.page(kind, limit=1000)] == expected, kind
        paged: list[tuple[str, int]] = []
        while True:  # three at a time, from the last (pipeline_id, seq) seen
            got = store.page(kind, after=paged[-1] if paged else None, limit=3)
            if not got:
                break
            paged += [(r.pipeline_id, r.seq) for r in got]
        assert paged == expected, kind


def test_keys_are_merged_in_batches_and_found_on_both_sides_of_the_mark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_commit, "KEY_TAIL_MAX", 4)
    path = tmp_path / "k.db"
    store = OPENER.open(str(path))
    try:
        _write(store, IDS[:6])
        # the fourth key's commit merged the first four; two wait above the mark
        assert _mark(path) == 4
        assert sorted(raw(path, "SELECT pipeline_id FROM pipeline_ids")) == sorted((p,) for p in IDS[:4])
        assert len(raw(path, "SELECT * FROM pipeline_keys")) == 6
        _assert_every_read_finds(store, IDS[:6])
        # a reader beside the writer has no memory of the newer keys: it reads them from the table
        reader = OPENER.open(str(path), read_only=True)
        try:
            _assert_every_read_finds(reader, IDS[:6])
        finally:
            reader.close()
        _write(store, IDS[6:])
        assert _mark(path) == 12
    finally:
        store.close()
    # the writer merged its newer keys as it closed: readers probe the index alone
    assert _mark(path) == len(IDS)
    keys = raw(path, "SELECT pipeline_id, pk FROM pipeline_keys ORDER BY pk")
    assert sorted(keys) == sorted(raw(path, "SELECT pipeline_id, pk FROM pipeline_ids"))
    assert [pid for pid, _ in keys] == IDS and len({pk for _, pk in keys}) == len(IDS)
    reader = OPENER.open(str(path), read_only=True)
    try:
        _assert_every_read_finds(reader, IDS)
    finally:
        reader.close()


def test_the_writer_looks_its_own_newer_keys_up_in_memory(tmp_path: Path) -> None:
    """The writer's reads by id probe the index alone unless an id is one of its newer keys
    (which they still find), and its pages read no newer keys when it has none. A commit of a
    pipeline whose number the writer forgot finds its key above the mark, and does not number
    it again."""
    path = tmp_path / "k.db"
    store = OPENER.open(str(path))
    _write(store, ["a", "b"])
    store._known.clear()  # (as when more pipelines are in flight than it keeps)
    _write(store, ["b"])
    assert raw(path, "SELECT pk FROM pipeline_keys WHERE pipeline_id = 'b'") == [(2,)]
    store.close()  # a and b are merged
    store = OPENER.open(str(path))
    try:
        sqls: list[str] = []
        query = store._query

        def spy(sql: str, params: Any = ()) -> list[Any]:
            sqls.append(sql)
            return query(sql, params)

        store._query = spy  # type: ignore[method-assign]
        store._states._query = spy
        assert [(t.pipeline_id, t.seq) for t in store.page("tasks")] == [
            ("a", 0),
            ("a", 1),
            ("b", 0),
            ("b", 1),
        ]
        assert len(sqls) == 1  # no newer keys: the index alone
        _write(store, ["c"])
        reads = {
            "lookup_states": lambda ids: (setattr(store._states, "_next_pk", None), store.lookup_states(ids))[
                1
            ],
            "lookup_pipelines": lambda ids: store.lookup_pipelines(ids),
            "rows_by_pipeline": lambda ids: store.rows_by_pipeline("tasks", ids),
            "final_artifacts": lambda ids: store.final_artifacts(ids),
            "task_leases": lambda ids: {p.split(":")[0]: v for p, v in store.task_leases(ids).items()},
            "get_artifact": lambda ids: {
                i: store.get_artifact(i, 0) for i in ids if store.get_artifact(i, 0)
            },
            "page": lambda ids: {
                i: store.page("attempts", pipeline_id=i) for i in ids if store.page("attempts", pipeline_id=i)
            },
        }
        for name, read in reads.items():
            del sqls[:]  # (lookup_states without its read-ahead: the probe is what is looked at)
            assert set(read(["a", "x"])) == {"a"}, name
            assert sqls and all("pipeline_key_ids" not in q for q in sqls), name
            del sqls[:]
            assert set(read(["c", "a"])) == {"c", "a"}, name
            assert any("pipeline_key_ids" in q for q in sqls), name
        assert [(t.pipeline_id, t.seq) for t in store.page("tasks")][-2:] == [("c", 0), ("c", 1)]
    finally:
        store.close()


def test_a_crash_leaves_keys_above_the_mark_that_the_next_writer_merges(tmp_path: Path) -> None:
    """A writer killed (``os._exit``) before it closes leaves its keys in the table only: readers
    find them, and the next writer merges them before its first commit, with no id numbered
    twice when a resume writes the same pipelines again."""
    path = tmp_path / "k.db"
    child = textwrap.dedent(
        f"""
        import os, sys
        sys.path.insert(0, {str(REPO)!r})
        from tests.support.store_contract import artifact, attempt, commit, pipeline, task
        from pyattacker_plugins.store_sqlite import SqliteStoreOpener
        store = SqliteStoreOpener().open({str(path)!r})
        for pid in {IDS[:5]!r}:
            commit(store, pipelines=[pipeline(pid)], tasks=[task(pid, 0), task(pid, 1)],
                   artifacts=[artifact(pid, 0), artifact(pid, 1, is_final=True)], attempts=[attempt(pid, 0)])
        os._exit(0)
        """
    )
    subprocess.run([sys.executable, "-c", child], check=True, timeout=60)
    assert _mark(path) == 0 and len(raw(path, "SELECT * FROM pipeline_keys")) == 5
    assert raw(path, "SELECT COUNT(*) FROM pipeline_ids") == [(0,)]
    reader = OPENER.open(str(path), read_only=True)
    try:
        _assert_every_read_finds(reader, IDS[:5])
    finally:
        reader.close()
    store = OPENER.open(str(path))
    try:
        assert _mark(path) == 5 and raw(path, "SELECT COUNT(*) FROM pipeline_ids") == [(5,)]
        _write(store, IDS[:7])  # five again (a resume), two new
        _assert_every_read_finds(store, IDS[:7])
    finally:
        store.close()
    keys = raw(path, "SELECT pipeline_id FROM pipeline_keys")
    assert sorted(keys) == sorted((p,) for p in IDS[:7])  # each id numbered once
    assert raw(path, "SELECT COUNT(*) FROM pipeline_ids") == [(7,)]


def test_an_id_registered_twice_keeps_its_first_number_and_is_reported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The merge never fails a commit over an id that is indexed already (a file edited by hand,
    say): the indexed number stays, and the writer says how many it met."""
    path = tmp_path / "k.db"
    store = OPENER.open(str(path))
    _write(store, ["a", "b"])
    store.close()
    conn = sqlite3.connect(path)
    conn.execute("INSERT INTO pipeline_keys (pk, pipeline_id) VALUES (3, 'a'), (4, 'c')")
    conn.commit()
    conn.close()
    with caplog.at_level(logging.WARNING, logger="pyattacker"):
        store = OPENER.open(str(path))
    try:
        assert "1 of 2 new pipeline keys were indexed already" in caplog.text
        assert dict(raw(path, "SELECT pipeline_id, pk FROM pipeline_ids")) == {"a": 1, "b": 2, "c": 4}
        assert store.lookup_pipelines(["a"])["a"].pipeline_id == "a"
    finally:
        store.close()


def test_a_version_5_file_is_read_as_it_is_and_migrated_by_the_writer(tmp_path: Path) -> None:
    """A reader reads a file of schema 5 through its unique index, and keeps reading it while a
    writer migrates it; the migration keeps every key and number and drops the unique index."""
    path = tmp_path / "v5.db"
    store = OPENER.open(str(path))
    _write(store, IDS[:5])
    store.close()
    downgrade_to_v5(path)
    keys = raw(path, "SELECT pk, pipeline_id FROM pipeline_keys ORDER BY pk")
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    reader = OPENER.open(str(path), read_only=True)
    try:
        assert not reader.has_ids
        _assert_every_read_finds(reader, IDS[:5])
        assert hashlib.sha256(path.read_bytes()).hexdigest() == before
        writer = OPENER.open(str(path))  # migrates to 6 while the reader is open
        try:
            assert reader.has_ids  # (asked again)
            _assert_every_read_finds(reader, IDS[:5])
            _write(writer, IDS[5:8])
            _assert_every_read_finds(reader, IDS[:8])
        finally:
            writer.close()
    finally:
        reader.close()
    assert raw(path, "SELECT pk, pipeline_id FROM pipeline_keys ORDER BY pk")[:5] == keys
    ddl = raw(path, "SELECT sql FROM sqlite_master WHERE name = 'pipeline_keys'")[0][0]
    assert "UNIQUE" not in ddl.upper()
    indexes = "SELECT name FROM sqlite_master WHERE tbl_name = 'pipeline_keys' AND type = 'index'"
    assert not raw(path, indexes)
    assert raw(path, "SELECT COUNT(*) FROM pipeline_ids") == [(8,)] and _mark(path) == 8
    # the views of schema 4 survived the rebuild of the key table
    assert raw(path, "SELECT COUNT(*) FROM tasks_full WHERE pipeline_id IS NOT NULL") == [(16,)]


class _MergeBetween:
    """A reader's connection that lets the writer merge its newer keys right after the reader's
    first read of a page (the read of the sorted index)."""

    def __init__(self, conn: sqlite3.Connection, writer: Any) -> None:
        self._conn = conn
        self._writer = writer
        self.merged = False

    def execute(self, sql: str, params: Any = ()) -> Any:
        cursor = self._conn.execute(sql, params)
        if "FROM pipeline_ids AS k" in sql and not self.merged:
            rows = cursor.fetchall()
            self._writer._indexed = self._writer._merge_keys()
            self.merged = True
            return _Rows(rows)
        return cursor

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class _Rows:
    def __init__(self, rows: list[Any]) -> None:
        self._rows = rows

    def fetchall(self) -> list[Any]:
        return self._rows


def test_a_page_reads_both_parts_in_one_snapshot(tmp_path: Path) -> None:
    """A merge committed between a reader's read of the sorted index and its read of the newer
    keys would move those keys out of the second part unseen: both are read in one snapshot."""
    path = tmp_path / "k.db"
    writer = OPENER.open(str(path))
    try:
        _write(writer, IDS[:4])
        reader = OPENER.open(str(path), read_only=True)
        try:
            conn = _MergeBetween(reader._conn, writer)  # type: ignore[arg-type]
            reader._conn = conn  # type: ignore[assignment]
            got = [(t.pipeline_id, t.seq) for t in reader.page("tasks")]
            assert conn.merged and _mark(path) == 4
            assert got == [(p, s) for p in sorted(IDS[:4]) for s in (0, 1)]
        finally:
            reader.close()
    finally:
        writer.close()


def test_a_merge_that_fails_at_close_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Closing still closes (lock freed) when the merge fails; the keys stay above the mark,
    readers find them, and the next writer merges them."""
    from pyattacker_plugins.store_sqlite import schema

    path = tmp_path / "k.db"
    store = OPENER.open(str(path))
    _write(store, IDS[:3])
    monkeypatch.setattr(
        schema, "MERGE_KEYS", ("SELECT no_such_column FROM pipeline_ids", schema.MERGE_KEYS[1])
    )
    with caplog.at_level(logging.WARNING, logger="pyattacker"):
        store.close()
    assert "merging the key index failed" in caplog.text and "(at close)" in caplog.text
    assert _mark(path) == 0
    monkeypatch.undo()
    reader = OPENER.open(str(path), read_only=True)
    try:
        _assert_every_read_finds(reader, IDS[:3])
    finally:
        reader.close()
    store = OPENER.open(str(path))  # the lock was freed; this writer merges them
    store.close()
    assert _mark(path) == 3 and raw(path, "SELECT COUNT(*) FROM pipeline_ids") == [(3,)]
