"""Task logs in a SQLite file: schema 8 adds ``task_logs``; older files migrate, and a reader of
an older file reads no logs instead of failing."""

from __future__ import annotations

from pathlib import Path

from pyattacker.testing.rows import commit, log_row, pipeline
from pyattacker_plugins.store_sqlite import SqliteStore
from pyattacker_plugins.store_sqlite.schema import SCHEMA_VERSION
from tests.support.sqlite_downgrades import downgrade_to_v7, raw


def test_a_schema_7_file_reads_no_logs_then_migrates(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    store = SqliteStore.open_writer(str(path))
    commit(store, pipelines=[pipeline("p1")])
    store.close()
    downgrade_to_v7(path)
    reader = SqliteStore.open_reader(str(path))
    try:
        assert reader.logs() == [] and reader.logs(pipeline_id="p1") == []
    finally:
        reader.close()
    writer = SqliteStore.open_writer(str(path))
    try:
        commit(writer, logs=[log_row("p1")])
        assert [r.lines for r in writer.logs(pipeline_id="p1")] == [log_row("p1").lines]
    finally:
        writer.close()
    assert raw(path, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
    assert raw(path, "SELECT pipeline_id, task_name, attempt FROM task_logs") == [("p1", "t0", 1)]


def test_lines_are_stored_as_one_row_per_attempt(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SqliteStore.open_writer(str(path))
    try:
        lines = [(float(i), "log", f"line {i}") for i in range(50)]
        commit(store, logs=[log_row("p1", lines=lines), log_row("p2")])
    finally:
        store.close()
    assert raw(path, "SELECT count(*) FROM task_logs") == [(2,)]
