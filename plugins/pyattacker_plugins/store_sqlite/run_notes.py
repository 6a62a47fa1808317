"""``RunNotes``: the SQLite store's notes on runs and the numbers ``runs`` and ``compare`` read.

Notes live in ``run_notes`` (schema 7), one row per revision; a write reads the latest
revision and inserts the next inside one ``BEGIN IMMEDIATE`` transaction, so two writers
(through the writer lock, one after the other) can never both win on the same revision. A
file older than schema 7 (read-only) has no notes of its own: its runs' config notes stand.
"""

from __future__ import annotations

import sqlite3
from array import array
from collections.abc import Sequence

from pyattacker.errors import NoteConflict, StoreUnavailable
from pyattacker.model import NoteRecord
from pyattacker.plugins.run_notes import config_note, next_note

from .connection import StoreConnection

__all__ = ["RunNotes"]

_LATEST = (
    "SELECT run_id, revision, text, author, written_at FROM run_notes WHERE run_id = ?"
    " ORDER BY revision DESC LIMIT 1"
)
_ALL_LATEST = (
    "SELECT n.run_id, n.revision, n.text, n.author, n.written_at FROM run_notes AS n"
    " JOIN (SELECT run_id, MAX(revision) AS top FROM run_notes GROUP BY run_id) AS m"
    " ON m.run_id = n.run_id AND m.top = n.revision"
)
_INSERT = "INSERT INTO run_notes (run_id, revision, text, author, written_at) VALUES (?, ?, ?, ?, ?)"


def _note(row: Sequence[object]) -> NoteRecord:
    run_id, revision, text, author, written_at = row
    return NoteRecord(
        run_id=str(run_id),
        revision=int(revision),  # type: ignore[call-overload]
        text=str(text),
        author=str(author),
        written_at=float(written_at),  # type: ignore[arg-type]
    )


class RunNotes(StoreConnection):
    """``run_note``, ``run_notes``, ``write_note``, and the run summaries ``runs`` and ``compare``
    read: ``run_state_counts``, ``spec_digests``, ``task_durations``."""

    supports_notes = True

    def run_note(self, run_id: str) -> NoteRecord | None:
        if self._has_table("run_notes"):
            rows = self._query(_LATEST, (run_id,))
            if rows:
                return _note(rows[0])
        return config_note(self.get_run(run_id))  # type: ignore[attr-defined]

    def run_notes(self) -> dict[str, NoteRecord]:
        written = {}
        if self._has_table("run_notes"):
            written = {row[0]: _note(row) for row in self._query(_ALL_LATEST)}
        out: dict[str, NoteRecord] = {}
        for run in self.runs():  # type: ignore[attr-defined]
            note = written.get(run.run_id) or config_note(run)
            if note is not None:
                out[run.run_id] = note
        return out

    def write_note(
        self, run_id: str, text: str, *, expected_revision: int | None, author: str, now: float
    ) -> NoteRecord:
        run = self._note_run(run_id)  # type: ignore[attr-defined]
        with self._mutex:
            conn = self._writer()
            try:
                conn.execute("BEGIN IMMEDIATE")
                rows = conn.execute(_LATEST, (run_id,)).fetchall()
                current = _note(rows[0]) if rows else config_note(run)
                note = next_note(self.path, run_id, current, text, expected_revision, author, now)
                if not rows and current is not None:  # the config's notes become a row of their own
                    conn.execute(_INSERT, (run_id, 1, current.text, current.author, current.written_at))
                conn.execute(_INSERT, (run_id, note.revision, note.text, note.author, note.written_at))
                conn.execute("COMMIT")
            except NoteConflict:
                self._rollback(conn)
                raise
            except sqlite3.Error as exc:
                self._rollback(conn)
                raise StoreUnavailable(f"store {self.path}: writing a note failed: {exc}") from exc
            return note

    def run_state_counts(self) -> dict[str, dict[str, int]]:
        """Counted in SQL over the ``(run_id, state)`` index (no row is read)."""
        out: dict[str, dict[str, int]] = {}
        for run_id, state, n in self._query(
            "SELECT run_id, state, COUNT(*) FROM pipelines GROUP BY run_id, state"
        ):
            out.setdefault(str(run_id), {})[str(state)] = int(n)
        return out

    def spec_digests(self, run_id: str) -> dict[str, int]:
        """Grouped in SQL over the run's pipeline rows."""
        rows = self._query(
            "SELECT spec_digest, COUNT(*) FROM pipelines WHERE run_id = ? GROUP BY spec_digest"
            " ORDER BY spec_digest",
            (run_id,),
        )
        return {str(digest): int(n) for digest, n in rows}

    def task_durations(self, run_id: str) -> dict[str, Sequence[float]]:
        """Two columns of the run's task rows, sorted in SQL; 8 bytes per task kept."""
        out: dict[str, array[float]] = {}
        for name, duration in self._query(
            "SELECT name, duration_ms FROM tasks WHERE run_id = ? AND typeof(duration_ms) IN"
            " ('real', 'integer') ORDER BY name, duration_ms",
            (run_id,),
        ):
            values = out.get(name)
            if values is None:
                values = out[name] = array("d")
            values.append(duration)
        return dict(out)
