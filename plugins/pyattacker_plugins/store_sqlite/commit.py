"""``CommitPath``: how a ``Batch`` reaches the file, the hottest code of a run.

Each batch is one ``BEGIN IMMEDIATE ... COMMIT`` with a few multi-row statements per table
(``_WRITES``, in order). Rows carry their pipeline's clustering key ``pk``, resolved once per
batch from the writer's memory (``_known``, ``_tail``, ``_absent``) and the sorted key index;
ids never seen are numbered and registered in the same transaction. The statements turn a
table's rows into parameters in one compiled loop (``statements``): no Python call per row.
"""

from __future__ import annotations

import logging
import sqlite3
from concurrent.futures import Future
from functools import lru_cache
from typing import Any

from pyattacker.errors import StoreUnavailable
from pyattacker.model import Batch

from ..sync_behind import SyncBehind, wait_durable
from . import run_spans, schema
from .checkpointer import Checkpointer
from .connection import LOOKUP_CHUNK, StoreConnection
from .contents import ContentsRecord
from .read_sql import IDS_INDEXED
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
from .statements import Statement, write_rows
from .task_logs import insert_logs
from .wal_bound import WalBound

__all__ = ["KEY_TAIL_MAX", "CommitPath"]

log = logging.getLogger("pyattacker")

#: Keys registered since the last merge into ``pipeline_ids`` after which a commit merges them
#: (schema 6). Each merge writes the index's leaves that the new ids fall in, once; a reader
#: that looks an id up scans at most this many key rows besides its index probe.
KEY_TAIL_MAX = 8192
#: pipeline id -> pk entries kept between commits (pipelines in flight checkpoint many times)
_KNOWN_MAX = 4096
#: ids known to have no key row, at most (admission looks ahead of the commits by a few chunks)
_ABSENT_MAX = 65536

#: The conflict clause of every write of a commit. A batch is all or nothing, so a statement that
#: fails must end the whole transaction anyway; with the default (ABORT) SQLite would also keep a
#: statement journal to undo that statement alone: a copy of every page it changes, spilled to a
#: temporary file past 64 KiB.
_OR = "OR ROLLBACK"


def _upsert(codec: RowCodec[Any], key: tuple[str, ...], keep: tuple[str, ...] = ()) -> Statement:
    cols = ", ".join(f'"{c}"' for c in codec.columns)
    updates = ", ".join(f'"{c}" = excluded."{c}"' for c in codec.columns if c not in key and c not in keep)
    conflict = ", ".join(f'"{c}"' for c in key)

    def render(marks: tuple[str, ...]) -> str:
        return (
            f'INSERT {_OR} INTO "{codec.table}" ({cols}) VALUES ({", ".join(marks)})'
            f" ON CONFLICT ({conflict}) DO UPDATE SET {updates}"
        )

    return Statement(render, codec)


def _insert(codec: RowCodec[Any], suffix: str = "") -> Statement:
    cols = ", ".join(f'"{c}"' for c in codec.columns)

    def render(marks: tuple[str, ...]) -> str:
        return f'INSERT {_OR} INTO "{codec.table}" ({cols}) VALUES ({", ".join(marks)}){suffix}'

    return Statement(render, codec)


def _clustered(codec: RowCodec[Any], key: tuple[str, ...] | None, keep: tuple[str, ...] = ()) -> Statement:
    """Insert (``key`` None) or upsert whose first parameter is the clustering key ``pk``.

    ``pk`` is NULL for rows that belong to no pipeline (run and resource events).
    """
    cols = ", ".join(f'"{c}"' for c in codec.columns)
    conflict = "" if key is None else ", ".join(f'"{c}"' for c in key)
    updates = ", ".join(f'"{c}" = excluded."{c}"' for c in codec.columns if c not in keep)

    def render(marks: tuple[str, ...]) -> str:
        sql = f'INSERT {_OR} INTO "{codec.table}" (pk, {cols}) VALUES ({", ".join(marks)})'
        return sql if key is None else f"{sql} ON CONFLICT ({conflict}) DO UPDATE SET {updates}"

    return Statement(render, codec, clustered=True)


#: (table attribute of Batch, statement) in the order rows are applied
_WRITES: tuple[tuple[str, Statement], ...] = (
    ("runs", _upsert(RUNS, ("run_id",))),
    ("pipelines", _clustered(PIPELINES, ("pk",), keep=("created_at", "pipeline_id"))),
    ("tasks", _clustered(TASKS, ("pk", "seq"), keep=("pipeline_id", "seq"))),
    ("artifacts", _clustered(ARTIFACTS, ("pk", "seq"), keep=("pipeline_id", "seq"))),
    ("attempts", _clustered(ATTEMPTS, None)),
    ("events", _clustered(EVENTS, None)),
    ("handoffs", _clustered(HANDOFFS, None)),
    ("metrics", _upsert(METRICS, ("run_id", "pipeline_id", "name"))),
    ("metric_points", _insert(METRIC_POINTS, " ON CONFLICT (op_id) DO NOTHING")),
    ("resources", _upsert(RESOURCES, ("run_id", "pool", "resource_id"))),
)
#: batch attributes whose rows carry the pipeline's clustering key
_KEYED = ("pipelines", "tasks", "artifacts", "attempts", "events", "handoffs")
#: a cursor advance: two columns of an existing row, no index touched
_PROGRESS = f"UPDATE {_OR} pipelines SET cursor = ?, attempts_total = ? WHERE pk = ?"
#: a pipeline's earlier final artifacts, unmarked before a new one is written (``Batch.finals_cleared``)
_CLEAR_FINALS = f"UPDATE {_OR} artifacts SET is_final = 0 WHERE pk = ? AND is_final"
#: ``Batch.resets``, before the batch's tasks and artifacts: a range of the clustered key each
_RESET_TASKS = "DELETE FROM tasks WHERE pk = ? AND seq >= ? AND seq < ?"
_RESET_ARTIFACTS = "DELETE FROM artifacts WHERE pk = ? AND seq >= ? AND seq < ?"
#: the file may hold running task rows from now on (``RunRepair`` looks at them then)
_MARK_TASKS = f"INSERT OR REPLACE INTO store_meta (key, value) VALUES ('{schema.TASKS_RUNNING_KEY}', '1')"
#: a pipeline id's first key row (its number allocated by the commit, see ``_resolve_keys``)
_REGISTER_KEY = f"INSERT {_OR} INTO pipeline_keys (pk, pipeline_id) VALUES (?, ?)"


@lru_cache(maxsize=64)
def _keys_sql(n: int) -> str:
    """The writer's lookup of ids in the sorted index (it knows the newer keys itself)."""
    marks = ", ".join("?" for _ in range(n))
    return f"SELECT pipeline_id, pk FROM {IDS_INDEXED} WHERE pipeline_id IN ({marks})"


class CommitPath(StoreConnection):
    """``commit`` and ``commit_behind``: one batch, one transaction, its ids and keys assigned;
    and the merge of the writer's newer keys into the sorted index (``_merge_keys``)."""

    #: the id the next attempt, event and handoff row gets (assigned by the commit writing it)
    _next_attempt_id: int
    _next_event_id: int
    _next_handoff_id: int
    #: copies the log into the database off the writer's thread (see ``checkpointer``)
    checkpointer: Checkpointer | None
    #: keeps the WAL file bounded beside readers that never leave a gap (see ``wal_bound``)
    wal_bound: WalBound | None
    #: FULL makes its commits durable beside the writer (``sync_behind``) from the second commit on
    sync_behind: SyncBehind | None
    #: ``<file>.contents``, kept fresh from this writer's first run record on (see ``contents``)
    _contents: ContentsRecord | None = None
    #: how many runs the file holds (counted again by each commit that carries a run record)
    _runs_held = 0

    def commit(self, batch: Batch) -> None:
        """Apply ``batch`` in one transaction and return once it is durable; on failure nothing
        is kept and ids are reset."""
        wait_durable(self.path, self.commit_behind(batch))

    def commit_behind(self, batch: Batch) -> Future[None] | None:
        """``commit`` that may return before the transaction is durable (``synchronous=full``:
        see ``sync_behind``): then with a future that resolves once it is, or fails with the
        sync's error. ``None``: durable already (NORMAL is as durable as it gets on return)."""
        self._apply(batch)
        syncer = self.sync_behind
        if syncer is None:
            return None
        if not syncer.opened:
            self._start_sync_behind(syncer)  # this first commit was synced by SQLite itself
            return None
        return syncer.request()

    def _start_sync_behind(self, syncer: SyncBehind) -> None:
        with self._mutex:
            try:
                syncer.open()
                self._writer().execute("PRAGMA synchronous = NORMAL")
            except (OSError, sqlite3.Error) as exc:  # (the log cannot be opened here, say)
                log.warning("pyattacker: %s: commits are synced by SQLite itself (%s)", self.path, exc)
                syncer.stop()
                self.sync_behind = None  # and the connection is still FULL: SQLite syncs each commit

    def _apply(self, batch: Batch) -> None:
        with self._mutex:
            conn = self._writer()
            for i, attempt in enumerate(batch.attempts, self._next_attempt_id):
                attempt.attempt_id = i
            for i, event in enumerate(batch.events, self._next_event_id):
                event.event_id = i
            for i, handoff in enumerate(batch.handoffs, self._next_handoff_id):
                handoff.handoff_id = i
            try:
                conn.execute("BEGIN IMMEDIATE")
                pks, fresh = self._resolve_keys(conn, batch)
                merged = 0
                if fresh and len(self._tail) + len(fresh) >= KEY_TAIL_MAX:
                    merged = self._next_pk + len(fresh) - 1
                    self._merge_statements(conn, merged, merged - self._indexed)
                for attr, statement in _WRITES:
                    rows = getattr(batch, attr)
                    if attr == "tasks" and batch.resets:
                        self._reset(conn, batch, pks)
                    if attr == "artifacts" and batch.finals_cleared:
                        conn.executemany(_CLEAR_FINALS, [(pks[p],) for p in batch.finals_cleared if p in pks])
                    if rows:
                        statement.run(conn, rows, pks.get if statement.clustered else None)
                    if attr == "tasks" and rows and "running" in [t.state for t in rows]:
                        conn.execute(_MARK_TASKS)
                    if attr == "pipelines" and batch.progress:
                        conn.executemany(
                            _PROGRESS,
                            [
                                (p.cursor, p.attempts_total, pks[p.pipeline_id])
                                for p in batch.progress
                                if p.pipeline_id in pks  # an unknown id is ignored
                            ],
                        )
                spans = []
                if batch.attempts:
                    spans = run_spans.spans_of("attempts", batch.attempts, self._next_attempt_id)
                if batch.events:
                    spans += run_spans.spans_of("events", batch.events, self._next_event_id)
                if spans:
                    conn.executemany(run_spans.UPSERT, spans)
                if batch.logs:
                    insert_logs(conn, batch.logs)
                conn.execute("COMMIT")
            except BaseException as exc:
                self._rollback(conn)
                for attempt in batch.attempts:
                    attempt.attempt_id = None
                for event in batch.events:
                    event.event_id = None
                for handoff in batch.handoffs:
                    handoff.handoff_id = None
                if isinstance(exc, Exception):
                    raise StoreUnavailable(
                        f"store {self.path}: commit failed, nothing written ({type(exc).__name__}: {exc})"
                    ) from exc
                raise
            self._next_attempt_id += len(batch.attempts)
            self._next_event_id += len(batch.events)
            self._next_handoff_id += len(batch.handoffs)
            # only now: a rolled-back batch registered nothing and allocated no key
            self._next_pk += len(fresh)
            if merged:
                self._tail.clear()
                self._indexed = merged
            elif fresh:
                self._tail.update((pid, pk) for pk, pid in fresh)
            if batch.runs or self._contents is not None:  # what the file holds now
                self._record_contents(bool(batch.runs))
            if self.wal_bound is not None:
                self.wal_bound.after_commit(conn)
            if self.checkpointer is not None:
                self.checkpointer.after_commit()
            if len(self._known) + len(pks) > _KNOWN_MAX:
                self._known.clear()
            self._known.update(pks)
            if fresh:
                self._absent.difference_update(pks)
            if len(self._absent) > _ABSENT_MAX:  # (admitted pipelines that never committed)
                self._absent.clear()

    def _record_contents(self, counted: bool) -> None:
        """Update ``<file>.contents`` (see ``contents``): one positioned write when a count
        changed, the runs counted again only when the commit carried a run record (``counted``).
        A failure there never fails the commit; the record then stays as it was (proving less)."""
        try:
            if counted:
                (runs,) = self._db().execute("SELECT count(*) FROM runs").fetchone()
                self._runs_held = int(runs)
                if self._contents is None:
                    self._contents = ContentsRecord(self.path)
            record = self._contents
            if record is not None:
                record.write(
                    (self._runs_held, self._next_pk - 1, self._next_attempt_id - 1, self._next_event_id - 1)
                )
        except (OSError, sqlite3.Error) as exc:
            log.warning("pyattacker: %s: cannot record what the store holds: %s", self.path, exc)
            self._close_contents()

    def _close_contents(self) -> None:
        record, self._contents = self._contents, None
        if record is not None:
            try:
                record.close()
            except OSError:
                pass

    def held(self) -> dict[str, int]:
        """How many runs, pipelines, attempts and events the file holds (``contents``): the
        runs counted, the rest from the ids this connection keeps anyway."""
        (runs,) = self._db().execute("SELECT count(*) FROM runs").fetchone()
        return {
            "runs": int(runs),
            "pipelines": self._next_pk - 1,
            "attempts": self._next_attempt_id - 1,
            "events": self._next_event_id - 1,
        }

    @staticmethod
    def _reset(conn: sqlite3.Connection, batch: Batch, pks: dict[str, int]) -> None:
        """Delete the task rows and chain outputs of pipelines starting again from the seed
        (``Batch.resets``; an id without a key row has none)."""
        slots = [(pks[r.pipeline_id], r.start, r.slots) for r in batch.resets if r.pipeline_id in pks]
        if slots:
            conn.executemany(_RESET_TASKS, slots)
            conn.executemany(_RESET_ARTIFACTS, slots)

    def _resolve_keys(
        self, conn: sqlite3.Connection, batch: Batch
    ) -> tuple[dict[str, int], list[tuple[int, str]]]:
        """pk of every pipeline the batch touches; ids never seen get the next numbers.

        Returns the map (known entries included) and the ``(pk, id)`` keys allocated. Progress rows
        only look keys up: a cursor advance of an unknown pipeline is ignored, never registered.
        """
        known = self._known
        pks: dict[str, int] = {}
        missing: list[str] = []
        for attr in _KEYED:
            for rec in getattr(batch, attr):
                pid = rec.pipeline_id
                if pid and pid not in pks:
                    pk = known.get(pid)
                    if pk is None:
                        missing.append(pid)
                        pks[pid] = -1
                    else:
                        pks[pid] = pk
        absent = [p.pipeline_id for p in batch.progress if p.pipeline_id not in pks]
        absent += [p for p in batch.finals_cleared if p not in pks]
        if batch.resets:
            absent += [r.pipeline_id for r in batch.resets if r.pipeline_id not in pks]
        if absent:
            missing.extend(dict.fromkeys(p for p in absent if p not in known))
            pks.update({p: known[p] for p in absent if p in known})
        if not missing:
            return pks, []
        keyless = self._absent  # ids known to have no key row: registered without a lookup
        unsure = [p for p in missing if p not in keyless] if keyless else missing
        stored = self._stored_keys(conn, unsure) if unsure else {}
        fresh: list[tuple[int, str]] = []
        registering = set(pks)
        for pid in missing:
            pk = stored.get(pid)
            if pk is not None:
                pks[pid] = pk
            elif pid in registering:
                pk = self._next_pk + len(fresh)
                fresh.append((pk, pid))
                pks[pid] = pk
        if fresh:
            write_rows(conn, _REGISTER_KEY, fresh)
        return pks, fresh

    def _stored_keys(self, conn: sqlite3.Connection, ids: list[str]) -> dict[str, int]:
        """pk of those of ``ids`` with a key row: the writer's newer keys, then the sorted index."""
        tail = self._tail
        found = {i: tail[i] for i in ids if i in tail} if tail else {}
        if found:
            ids = [i for i in ids if i not in found]
        for start in range(0, len(ids), LOOKUP_CHUNK):
            chunk = ids[start : start + LOOKUP_CHUNK]
            found.update(conn.execute(_keys_sql(len(chunk)), chunk).fetchall())
        return found

    def _merge_keys(self) -> int:
        """Merge the keys above the high mark into ``pipeline_ids`` (what a crashed writer left,
        or this one's at close) in a transaction of its own; returns the new high mark."""
        with self._mutex:
            conn = self._writer()
            (mark,) = conn.execute(
                f"SELECT CAST(value AS INTEGER) FROM store_meta WHERE key = '{schema.KEYS_INDEXED}'"
            ).fetchone()
            high = self._next_pk - 1
            if high <= mark:
                return int(mark)
            try:
                conn.execute("BEGIN IMMEDIATE")
                self._merge_statements(conn, high, self._next_pk - 1 - int(mark))
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback(conn)
                raise StoreUnavailable(f"store {self.path}: merging the key index failed: {exc}") from exc
            self._tail.clear()
            return high

    def _merge_statements(self, conn: sqlite3.Connection, high: int, expected: int) -> None:
        before = conn.total_changes
        conn.execute(schema.MERGE_KEYS[0])
        conn.execute(schema.MERGE_KEYS[1], (str(high),))
        merged = conn.total_changes - before - 1
        if merged != expected:  # an id registered twice: its first number stays the indexed one
            log.warning(
                "pyattacker: store %s: %d of %d new pipeline keys were indexed already",
                self.path,
                expected - merged,
                expected,
            )
