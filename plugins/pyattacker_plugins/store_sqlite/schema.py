"""The SQLite schema, its version marker, migrations that keep every row, and the read-only file probe.

A file is ours only if ``PRAGMA application_id`` carries our id *and* ``store_meta`` names the
application; anything else is refused before a single byte is written. The schema version
lives in ``store_meta.schema_version`` (mirrored in ``PRAGMA user_version``). Migrations are
numbered steps applied in one transaction: a new file is simply "migrated from version 0".
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

from pyattacker import ConfigError
from pyattacker.errors import StoreUnavailable

from .rows import (
    ARTIFACTS,
    ATTEMPTS,
    EVENTS,
    HANDOFFS,
    METRIC_POINTS,
    METRICS,
    PIPELINES,
    RESOURCES,
    RUNS,
    TASKS,
    RowCodec,
)

__all__ = [
    "APPLICATION",
    "ADDED_TABLES",
    "APPLICATION_ID",
    "KEYS_INDEXED",
    "KEY_IDS",
    "KEY_TAIL",
    "MERGE_KEYS",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "SPAN_KINDS",
    "TABLES",
    "TASKS_RUNNING_KEY",
    "migrate",
    "probe",
    "ro_uri",
]

APPLICATION = "pyattacker"
#: "PYAT" as a big-endian 32-bit integer, stored in the file header.
APPLICATION_ID = 0x50594154
SCHEMA_VERSION = 9

_REAL = {
    "started_at", "ended_at", "heartbeat_at", "pid_started_at", "created_at", "finished_at", "ts",
    "duration_ms", "updated_at",
}  # fmt: skip
_INT = {
    "pid", "n_tasks_total", "cursor", "attempts_total", "repeat", "seq", "attempts_used", "attempt",
    "metric_failures", "size", "is_final", "step", "from_seq", "to_seq", "entry_seq", "entry_reused",
}  # fmt: skip


def _column_type(column: str) -> str:
    if column == "payload":
        return "BLOB"
    if column in _REAL:
        return "REAL"
    if column in _INT:
        return "INTEGER"
    return "TEXT"


def _table(
    columns: tuple[str, ...],
    table: str,
    constraint: str,
    rowid_key: str | None = None,
    *,
    clustered: bool = False,
) -> str:
    """DDL for a table; ``rowid_key`` names an INTEGER PRIMARY KEY (an alias of the rowid).

    ``clustered`` tables are WITHOUT ROWID: the primary key *is* the storage order, so a slot
    (pipeline, seq) costs one B-tree insert instead of a table row plus two index entries.
    """
    defs = [f'"{rowid_key}" INTEGER PRIMARY KEY'] if rowid_key else []
    if clustered or table == "pipelines":
        defs.append('"pk" INTEGER NOT NULL')
    elif table in ("attempts", "events"):
        defs.append('"pk" INTEGER')  # the pipeline's key (NULL for run/resource events)
    elif table == "handoffs":
        defs.append('"pk" INTEGER NOT NULL')
    defs += [f'"{c}" {_column_type(c)}' for c in columns if c != rowid_key]
    suffix = " WITHOUT ROWID" if clustered else ""
    return f'CREATE TABLE "{table}" ({", ".join(defs)}, {constraint}){suffix}'


_V1 = (
    "CREATE TABLE store_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
    # Pipeline ids are content digests (random). Each id gets a small sequential number once,
    # and the per-pipeline tables are clustered by it: pipelines in flight at the same time sit
    # on the same pages, so a group commit dirties a few pages instead of one per checkpoint.
    "CREATE TABLE pipeline_keys (pk INTEGER PRIMARY KEY, pipeline_id TEXT NOT NULL UNIQUE)",
    _table(RUNS.columns, "runs", "PRIMARY KEY (run_id)"),
    _table(PIPELINES.columns, "pipelines", "PRIMARY KEY (pk)"),
    _table(TASKS.columns, "tasks", "PRIMARY KEY (pk, seq)", clustered=True),
    _table(ATTEMPTS.columns, "attempts", "CHECK (attempt_id > 0)", rowid_key="attempt_id"),
    _table(EVENTS.columns, "events", "CHECK (event_id > 0)", rowid_key="event_id"),
    _table(ARTIFACTS.columns, "artifacts", "PRIMARY KEY (pk, seq)", clustered=True),
    _table(METRICS.columns, "metrics", "PRIMARY KEY (run_id, pipeline_id, name)"),
    _table(METRIC_POINTS.columns, "metric_points", "UNIQUE (op_id)", rowid_key="point_id"),
    _table(RESOURCES.columns, "resources", "PRIMARY KEY (run_id, pool, resource_id)"),
    "CREATE INDEX pipelines_by_run_state ON pipelines (run_id, state)",
    "CREATE INDEX pipelines_by_created ON pipelines (created_at, pipeline_id)",
    "CREATE INDEX attempts_by_run ON attempts (run_id)",
    "CREATE INDEX attempts_by_pipeline ON attempts (pk)",
    "CREATE INDEX events_by_run ON events (run_id)",
    "CREATE INDEX events_by_pipeline ON events (pk)",
    "CREATE INDEX metric_points_by_series ON metric_points (run_id, pipeline_id, step)",
)

#: the tables every store of version 1 or later has (a file without one is damaged)
TABLES = frozenset(
    ["store_meta", "pipeline_keys"]
    + [
        c.table
        for c in (RUNS, PIPELINES, TASKS, ATTEMPTS, EVENTS, ARTIFACTS, METRICS, METRIC_POINTS, RESOURCES)
    ]
)

#: ``store_meta.tasks_running`` marks a file that may hold task rows in state ``running`` (the
#: runner only ever writes finished task rows; other writers of the store API may not). A run
#: start then looks for rows a dead run left running only when the marker is there, instead of
#: scanning every task row (no index on the task state: it would cost every checkpoint).
TASKS_RUNNING_KEY = "tasks_running"
_V2 = (
    f"INSERT INTO store_meta (key, value) SELECT '{TASKS_RUNNING_KEY}', '1'"
    " WHERE EXISTS (SELECT 1 FROM tasks WHERE state = 'running')",
)

#: Version 3: the control ledger of pipelines that hand off (``pyattacker.flow.handoff``). Rows are
#: few (one per handoff or restart of such a pipeline), read per pipeline on resume and export.
_V3 = (
    _table(HANDOFFS.columns, "handoffs", "CHECK (handoff_id > 0)", rowid_key="handoff_id"),
    "CREATE INDEX handoffs_by_pipeline ON handoffs (pk)",
    "CREATE INDEX handoffs_by_run ON handoffs (run_id)",
)


def _full_view(codec: RowCodec[Any]) -> str:
    """A view of ``codec``'s table with every derived id filled in (what readers select)."""
    names = ", ".join(f'"{c}"' for c in ("pk", *codec.columns))
    return (
        f'CREATE VIEW "{codec.table}_full" ({names}) AS SELECT t."pk", {codec.read_list()}'
        f' FROM "{codec.table}" AS t LEFT JOIN pipeline_keys AS k ON k.pk = t.pk'
    )


#: Version 4: the id columns a row's pipeline gives are derived, not stored (``rows.PIPELINE_ID``
#: and ``SLOT_ID``: NULL or ``x''`` in the row, rebuilt by every reader). The tables keep their
#: columns, so rows written before stay as they are; ``*_full`` views show every row with its
#: ids, for plain SQL.
_V4 = tuple(_full_view(codec) for codec in (TASKS, ATTEMPTS, ARTIFACTS, EVENTS))

#: the row kinds whose rows a run's ids bound (``run_spans``), and their id column
SPAN_KINDS = {"attempts": "attempt_id", "events": "event_id"}

#: Version 5: a run's attempts and events are found by the span of ids it wrote, not through an
#: index on ``run_id``. One writer at a time numbers both tables in commit order, so the rows of
#: a run sit in a few ranges of the rowid; ``run_spans`` keeps the lowest and highest id each run
#: wrote per table (one upsert per commit, where an index takes an entry per row), and a
#: read by run scans that range of the table, checking ``run_id`` on each row. No row is rewritten.
_V5 = (
    "CREATE TABLE run_spans (run_id TEXT NOT NULL, kind TEXT NOT NULL, lo INTEGER NOT NULL,"
    " hi INTEGER NOT NULL, PRIMARY KEY (run_id, kind)) WITHOUT ROWID",
    *(
        f"INSERT INTO run_spans (run_id, kind, lo, hi) SELECT run_id, '{kind}', MIN({column}),"
        f" MAX({column}) FROM {kind} WHERE run_id IS NOT NULL GROUP BY run_id"
        for kind, column in SPAN_KINDS.items()
    ),
    "DROP INDEX attempts_by_run",
    "DROP INDEX events_by_run",
)

#: ``store_meta`` key: the highest ``pk`` whose id is in ``pipeline_ids`` (schema 6)
KEYS_INDEXED = "keys_indexed"
#: The key rows ``pipeline_ids`` does not hold yet (schema 6): the tail of ``pipeline_keys``.
KEY_TAIL = (
    "SELECT pipeline_id, pk FROM pipeline_keys"
    f" WHERE pk > (SELECT CAST(value AS INTEGER) FROM store_meta WHERE key = '{KEYS_INDEXED}')"
)
#: id -> pk of every key row (schema 6): what readers look an id up in
KEY_IDS = "pipeline_key_ids"
#: Copies the tail's ids into ``pipeline_ids`` in id order (``?``: the new high mark), so each
#: leaf of that index is written once per merge, not once per pipeline. ``OR IGNORE``: an id that
#: is indexed already keeps its first number (the writer registers an id once; see ``store``).
MERGE_KEYS = (
    f"INSERT OR IGNORE INTO pipeline_ids (pipeline_id, pk) SELECT pipeline_id, pk FROM ({KEY_TAIL})"
    " ORDER BY pipeline_id",
    f"UPDATE store_meta SET value = ? WHERE key = '{KEYS_INDEXED}'",
)

#: Version 6: the pipeline ids' index is written in sorted batches. Ids are random digests, so a
#: unique index on ``pipeline_keys.pipeline_id`` (up to version 5) takes each new pipeline into a
#: random leaf: about one page of log and checkpoint per pipeline once the index outgrows a
#: commit's rows. From version 6 ``pipeline_keys`` (pk -> id,
#: appended in pk order) has no index on the id; ``pipeline_ids`` (id -> pk, clustered by id)
#: holds the ids up to ``store_meta.keys_indexed``, and the writer copies the ids above that
#: mark in one sorted statement every few thousand keys and when it closes (``MERGE_KEYS``).
#: ``pipeline_key_ids`` is both parts, for every lookup by id. The key table is rebuilt without
#: its UNIQUE constraint (SQLite cannot drop one), its rows and numbers unchanged.
_V6 = (
    *(f'DROP VIEW "{codec.table}_full"' for codec in (TASKS, ATTEMPTS, ARTIFACTS, EVENTS)),
    "CREATE TABLE pipeline_keys_v6 (pk INTEGER PRIMARY KEY, pipeline_id TEXT NOT NULL)",
    "INSERT INTO pipeline_keys_v6 (pk, pipeline_id) SELECT pk, pipeline_id FROM pipeline_keys ORDER BY pk",
    "DROP TABLE pipeline_keys",
    "ALTER TABLE pipeline_keys_v6 RENAME TO pipeline_keys",
    "CREATE TABLE pipeline_ids (pipeline_id TEXT PRIMARY KEY, pk INTEGER NOT NULL) WITHOUT ROWID",
    "INSERT INTO pipeline_ids (pipeline_id, pk)"
    " SELECT pipeline_id, pk FROM pipeline_keys ORDER BY pipeline_id",
    f"INSERT OR REPLACE INTO store_meta (key, value) VALUES ('{KEYS_INDEXED}',"
    " (SELECT CAST(ifnull(MAX(pk), 0) AS TEXT) FROM pipeline_keys))",
    *_V4,
    f"CREATE VIEW {KEY_IDS} (pipeline_id, pk) AS SELECT pipeline_id, pk FROM pipeline_ids"
    f" UNION ALL {KEY_TAIL}",
)


def _notes_step() -> tuple[str, ...]:
    """Version 7: every revision of each run's notes (``pyattacker note``), clustered by run. A
    run's config notes stay on its row: they are revision 1 until a note is written."""
    return (
        "CREATE TABLE run_notes (run_id TEXT NOT NULL, revision INTEGER NOT NULL, text TEXT NOT NULL,"
        " author TEXT NOT NULL, written_at REAL NOT NULL, PRIMARY KEY (run_id, revision)) WITHOUT ROWID",
    )


def _v8_task_logs() -> tuple[str, ...]:
    """Version 8: attempts' logs (``LogRecord``), one row per attempt that wrote any, its lines one
    JSON text. Read by pipeline (the index) or after a ``log_id`` (the rowid: a follower's offset)."""
    return (
        "CREATE TABLE task_logs (log_id INTEGER PRIMARY KEY, run_id TEXT NOT NULL,"
        " pipeline_id TEXT NOT NULL, task_run_id TEXT NOT NULL, task_name TEXT NOT NULL,"
        " seq INTEGER NOT NULL, attempt INTEGER NOT NULL, ts REAL NOT NULL,"
        " dropped_lines INTEGER NOT NULL, dropped_bytes INTEGER NOT NULL, lines_json TEXT NOT NULL)",
        "CREATE INDEX task_logs_by_pipeline ON task_logs (pipeline_id, log_id)",
    )


def _v9_state_pages() -> tuple[str, ...]:
    """Version 9: a run's pipelines of one state in page order. ``(run_id, state)`` gave the
    rows of a state but not in ``(created_at, pipeline_id)`` order, so every page of failed
    pipelines (``/errors``, failure groups, ``report``'s errors) sorted all of them first. The
    same index with ``created_at`` appended: one more REAL per entry, no more entries."""
    return (
        "DROP INDEX pipelines_by_run_state",
        "CREATE INDEX pipelines_by_run_state ON pipelines (run_id, state, created_at)",
    )


#: tables that came with a version after 1: a file of an older version lacks them by design
ADDED_TABLES = {"handoffs": 3, "run_spans": 5, "pipeline_ids": 6, "run_notes": 7, "task_logs": 8}

#: version -> statements that bring a file from ``version - 1`` to ``version``
MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: _V1, 2: _V2, 3: _V3, 4: _V4, 5: _V5, 6: _V6, 7: _notes_step(), 8: _v8_task_logs(),
    9: _v9_state_pages(),
}  # fmt: skip


def ro_uri(path: str) -> str:
    """A ``mode=ro`` URI: the connection can neither create nor write the file."""
    return Path(path).absolute().as_uri() + "?mode=ro"


def _not_ours(path: str, why: str) -> ConfigError:
    return ConfigError(f"store {path} is not a pyattacker store ({why}); refusing to open it")


def probe(path: str) -> int:
    """The schema version of the file at ``path`` (0: absent or an empty database).

    Reads through a read-only connection, so a refused file is never modified. Raises
    ``ConfigError`` for corrupt, foreign or newer files.
    """
    if not os.path.exists(path):
        return 0
    if os.path.getsize(path) == 0 and not os.path.exists(path + "-wal"):
        return 0
    try:
        conn = sqlite3.connect(ro_uri(path), uri=True, isolation_level=None)
    except sqlite3.Error as exc:
        raise StoreUnavailable(f"store {path} cannot be opened: {exc}") from exc
    try:
        return _probe_connection(conn, path)
    except sqlite3.DatabaseError as exc:
        if os.path.exists(path + "-journal"):
            raise ConfigError(
                f"store {path} cannot be read until its journal {path}-journal is rolled back: a"
                " writer was killed inside its first transaction, and a read-only view cannot"
                " roll it back. Resume (or run) on the store once; the writer rolls it back"
                " (nothing in it was ever committed)"
            ) from exc
        raise ConfigError(
            f"store {path} is not a readable SQLite database (corrupt or another format): {exc}"
        ) from exc
    finally:
        conn.close()


def _probe_connection(conn: sqlite3.Connection, path: str) -> int:
    tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    user_version = conn.execute("PRAGMA user_version").fetchone()[0]
    if not tables and app_id == 0 and user_version == 0:
        return 0
    if app_id != APPLICATION_ID:
        raise _not_ours(path, "a SQLite database written by another application")
    if "store_meta" not in tables:
        raise _not_ours(path, "its store_meta table is missing")
    meta = dict(conn.execute("SELECT key, value FROM store_meta").fetchall())
    if meta.get("application") != APPLICATION:
        raise _not_ours(path, f"store_meta.application is {meta.get('application')!r}")
    try:
        version = int(meta.get("schema_version", user_version))
    except ValueError:
        raise _not_ours(path, f"bad schema_version {meta.get('schema_version')!r}") from None
    if version > SCHEMA_VERSION:
        raise ConfigError(
            f"store {path} was written by a newer pyattacker (schema {version} > {SCHEMA_VERSION}); "
            "upgrade pyattacker to open it"
        )
    if version < 1:
        raise _not_ours(path, f"schema_version {version}")
    expected = TABLES | {t for t, since in ADDED_TABLES.items() if version >= since}
    missing = sorted(expected - tables)
    if missing:
        raise ConfigError(
            f"store {path} is damaged: table {', '.join(missing)} is missing"
            " (every pyattacker store has all of its tables); refusing to open it"
        )
    return version


def migrate(conn: sqlite3.Connection, from_version: int, now: float) -> None:
    """Bring the file to ``SCHEMA_VERSION`` in one transaction (no-op when current)."""
    if from_version >= SCHEMA_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        for version in range(from_version + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[version]:
                conn.execute(statement)
        meta = [("application", APPLICATION), ("schema_version", str(SCHEMA_VERSION))]
        if from_version == 0:
            meta.append(("created_at", repr(now)))
        conn.executemany(
            "INSERT INTO store_meta (key, value) VALUES (?, ?)"
            " ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            meta,
        )
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
