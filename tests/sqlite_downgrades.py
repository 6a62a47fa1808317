"""Files of older schema versions, made from a current one the way those versions wrote them:
the migration and read-as-it-is tests start from these."""

from __future__ import annotations

import sqlite3
from pathlib import Path

#: the tables whose ids schema 4 derives, and their views with the ids filled in
DERIVED_TABLES = ("tasks", "attempts", "artifacts", "events")


def downgrade_to_v4(path: Path) -> None:
    """What a file written before schema version 5 looks like: indexes on the run of attempts
    and events, no ``run_spans``."""
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE run_spans")
    conn.execute("CREATE INDEX attempts_by_run ON attempts (run_id)")
    conn.execute("CREATE INDEX events_by_run ON events (run_id)")
    conn.execute("UPDATE store_meta SET value = '4' WHERE key = 'schema_version'")
    conn.execute("PRAGMA user_version = 4")
    conn.commit()
    conn.close()


def downgrade_to_v3(path: Path) -> None:
    """What a file written before schema version 4 looks like: every id stored as text, no views."""
    downgrade_to_v4(path)
    conn = sqlite3.connect(path)
    for table in DERIVED_TABLES:
        cols = ", ".join(
            f'"{c}"' for c in [r[1] for r in conn.execute(f"SELECT * FROM pragma_table_info('{table}_full')")]
        )
        conn.execute(f'CREATE TEMP TABLE "old_{table}" AS SELECT {cols} FROM "{table}_full"')
        conn.execute(f'DELETE FROM "{table}"')
        conn.execute(f'INSERT INTO "{table}" ({cols}) SELECT {cols} FROM "old_{table}"')
        conn.execute(f'DROP VIEW "{table}_full"')
    conn.execute("UPDATE store_meta SET value = '3' WHERE key = 'schema_version'")
    conn.execute("PRAGMA user_version = 3")
    conn.commit()
    conn.close()


def downgrade_to_v2(path: Path) -> None:
    """What a file written before schema version 3 looks like (no control ledger)."""
    downgrade_to_v3(path)
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE handoffs")
    conn.execute("UPDATE store_meta SET value = '2' WHERE key = 'schema_version'")
    conn.execute("PRAGMA user_version = 2")
    conn.commit()
    conn.close()


def downgrade_to_v1(path: Path) -> None:
    """What a file written before schema version 2 looks like (no ``tasks_running`` marker)."""
    downgrade_to_v2(path)
    conn = sqlite3.connect(path)
    conn.execute("DELETE FROM store_meta WHERE key = 'tasks_running'")
    conn.execute("UPDATE store_meta SET value = '1' WHERE key = 'schema_version'")
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
