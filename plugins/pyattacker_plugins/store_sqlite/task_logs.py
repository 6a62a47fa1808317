"""Attempts' logs in the ``task_logs`` table (schema 7): one row per attempt that logged.

A commit inserts its ``Batch.logs`` with one ``executemany`` (nothing when the batch has none);
the lines are one JSON text per row. Reads go by ``log_id`` (the rowid), so a follower that
asks for the rows after the last id it saw reads only the new ones.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

import msgspec

from pyattacker.errors import CorruptRow
from pyattacker.model import LogRecord

__all__ = ["TABLE", "decode_log", "insert_logs", "select_logs_sql"]

TABLE = "task_logs"
_COLUMNS = (
    "run_id", "pipeline_id", "task_run_id", "task_name", "seq", "attempt", "ts", "dropped_lines",
    "dropped_bytes", "lines_json",
)  # fmt: skip
_INSERT = f"INSERT INTO {TABLE} ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' * len(_COLUMNS))})"
_encode = msgspec.json.Encoder().encode
_decode_lines = msgspec.json.Decoder(list[tuple[float, str, str]])


def insert_logs(conn: sqlite3.Connection, rows: Sequence[LogRecord]) -> None:
    """Insert ``rows`` (inside the commit's transaction)."""
    conn.executemany(
        _INSERT,
        [
            (
                r.run_id,
                r.pipeline_id,
                r.task_run_id,
                r.task_name,
                r.seq,
                r.attempt,
                r.ts,
                r.dropped_lines,
                r.dropped_bytes,
                _encode(r.lines).decode(),
            )
            for r in rows
        ],
    )


def select_logs_sql(
    run_id: str | None, pipeline_id: str | None, task: str | None, after: int | None, limit: int
) -> tuple[str, list[Any]]:
    """The query of ``StoreBase.logs`` and its parameters."""
    where: list[str] = []
    params: list[Any] = []
    for column, value in (("pipeline_id", pipeline_id), ("run_id", run_id), ("task_name", task)):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    if after is not None:
        where.append("log_id > ?")
        params.append(after)
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    params.append(max(0, limit))
    return f"SELECT log_id, {', '.join(_COLUMNS)} FROM {TABLE}{clause} ORDER BY log_id LIMIT ?", params


def decode_log(row: Sequence[Any]) -> LogRecord:
    """A ``task_logs`` row as a record; a damaged one raises ``CorruptRow`` naming it."""
    try:
        return LogRecord(
            log_id=row[0], run_id=row[1], pipeline_id=row[2], task_run_id=row[3], task_name=row[4],
            seq=row[5], attempt=row[6], ts=row[7], dropped_lines=row[8], dropped_bytes=row[9],
            lines=_decode_lines.decode(row[10]),
        )  # fmt: skip
    except (msgspec.DecodeError, TypeError) as exc:
        raise CorruptRow(f"table {TABLE}, log_id {row[0]}: lines_json: {exc}") from None
