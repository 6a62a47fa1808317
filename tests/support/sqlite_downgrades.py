"""Files of older schema versions, made from a current one the way those versions wrote them:
the migration and read-as-it-is tests start from these; and ``raw``, what plain SQL reads in a
store file (beside the store's own reads)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

#: the tables whose ids schema 4 derives, and their views with the ids filled in
DERIVED_TABLES = ("tasks", "attempts", "artifacts", "events")


def raw(path: Path, sql: str) -> list[Any]:
    """The rows of ``sql`` on the file, through a connection of its own."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def _downgrade(path: Path, version: int, *statements: str) -> None:
    """Run ``statements`` on the file and mark it as of schema ``version``, in one transaction."""
    conn = sqlite3.connect(path)
    try:
        for statement in statements:
            conn.execute(statement)
        conn.execute(f"UPDATE store_meta SET value = '{version}' WHERE key = 'schema_version'")
        conn.execute(f"PRAGMA user_version = {version}")
        conn.commit()
    finally:
        conn.close()


def downgrade_to_v7(path: Path) -> None:
    """What a file written before schema version 8 looks like: no ``task_logs``."""
    _downgrade(path, 7, "DROP TABLE task_logs")


def downgrade_to_v6(path: Path) -> None:
    """What a file written before schema version 7 looks like: no ``run_notes`` (nor ``task_logs``)."""
    downgrade_to_v7(path)
    _downgrade(path, 6, "DROP TABLE run_notes")


def downgrade_to_v5(path: Path) -> None:
    """What a file written before schema version 6 looks like: a unique index on the key table's
    ids, no ``pipeline_ids`` and no high mark (the views of schema 4 rebuilt around the table)."""
    from pyattacker_plugins.store_sqlite import schema

    downgrade_to_v6(path)
    _downgrade(
        path,
        5,
        "DROP VIEW pipeline_key_ids",
        *(f'DROP VIEW "{table}_full"' for table in DERIVED_TABLES),
        "CREATE TABLE keys_v5 (pk INTEGER PRIMARY KEY, pipeline_id TEXT NOT NULL UNIQUE)",
        "INSERT INTO keys_v5 (pk, pipeline_id) SELECT pk, pipeline_id FROM pipeline_keys",
        "DROP TABLE pipeline_keys",
        "ALTER TABLE keys_v5 RENAME TO pipeline_keys",
        "DROP TABLE pipeline_ids",
        "DELETE FROM store_meta WHERE key = 'keys_indexed'",
        *schema.MIGRATIONS[4],
    )


def downgrade_to_v4(path: Path) -> None:
    """What a file written before schema version 5 looks like: indexes on the run of attempts
    and events, no ``run_spans``."""
    downgrade_to_v5(path)
    _downgrade(
        path,
        4,
        "DROP TABLE run_spans",
        "CREATE INDEX attempts_by_run ON attempts (run_id)",
        "CREATE INDEX events_by_run ON events (run_id)",
    )


def downgrade_to_v3(path: Path) -> None:
    """What a file written before schema version 4 looks like: every id stored as text, no views."""
    downgrade_to_v4(path)
    conn = sqlite3.connect(path)
    try:
        columns = {
            table: ", ".join(
                f'"{r[1]}"' for r in conn.execute(f"SELECT * FROM pragma_table_info('{table}_full')")
            )
            for table in DERIVED_TABLES
        }
    finally:
        conn.close()
    statements = []
    for table, cols in columns.items():
        statements += [
            f'CREATE TEMP TABLE "old_{table}" AS SELECT {cols} FROM "{table}_full"',
            f'DELETE FROM "{table}"',
            f'INSERT INTO "{table}" ({cols}) SELECT {cols} FROM "old_{table}"',
            f'DROP VIEW "{table}_full"',
        ]
    _downgrade(path, 3, *statements)


def downgrade_to_v2(path: Path) -> None:
    """What a file written before schema version 3 looks like (no control ledger)."""
    downgrade_to_v3(path)
    _downgrade(path, 2, "DROP TABLE handoffs")


def downgrade_to_v1(path: Path) -> None:
    """What a file written before schema version 2 looks like (no ``tasks_running`` marker)."""
    downgrade_to_v2(path)
    _downgrade(path, 1, "DELETE FROM store_meta WHERE key = 'tasks_running'")
