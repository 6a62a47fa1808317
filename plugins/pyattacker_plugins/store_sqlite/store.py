"""``SqliteStore``: the embedded default store, one SQLite file in WAL mode.

One writer connection (guarded by the sidecar writer lock) applies each ``Batch`` as one
``BEGIN IMMEDIATE ... COMMIT`` with a few multi-row statements per table; readers open ``mode=ro``
connections that never create or migrate anything and see consistent snapshots beside a live
writer. Every SQL string is built once; rows travel as tuples.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import logging
import operator
import os
import sqlite3
import threading
import time
from array import array
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, TypeVar

import msgspec

from pyattacker import ConfigError
from pyattacker.errors import CorruptRow, StoreUnavailable
from pyattacker.model import (
    ArtifactRecord,
    Batch,
    HandoffRecord,
    MetricPoint,
    MetricRecord,
    PipelineRecord,
    ResourceRecord,
    RunRecord,
)
from pyattacker.store.base import PAGE_KINDS
from pyattacker.store.writer_lock import WriterLock
from pyattacker.views.stats import duration_summary

from ..sync_behind import SyncBehind, wait_durable
from . import run_spans, schema
from .checkpointer import Checkpointer
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
from .state_lookup import StateLookup
from .statements import Statement, write_rows
from .wal_bound import WalBound, truncate_wal

__all__ = ["KEY_TAIL_MAX", "LOOKUP_CHUNK", "WAL_CHECKPOINT_PAGES", "WAL_SIZE_LIMIT", "SqliteStore"]

log = logging.getLogger("pyattacker")
#: ids per ``IN (...)`` query in ``lookup_pipelines`` (well under SQLite's variable limit)
LOOKUP_CHUNK = 512
BUSY_TIMEOUT_MS = 10_000
#: Bytes of WAL file the writer leaves on disk after the log restarts. A reader that holds a
#: snapshot (a live view's statistics, read in one transaction) keeps the WAL from restarting,
#: so it grows past its usual 4 MB while the run writes; SQLite never shrinks the file by itself.
#: With the limit, the first commit after the next restart truncates it back.
WAL_SIZE_LIMIT = 16 * 2**20
#: WAL pages after which a commit checkpoints the log into the database (SQLite's default is
#: 1,000, 4 MB). The same ~16 MB the file is cut back to anyway: a checkpoint writes each page
#: once however many commits changed it, and the rightmost leaves of every table and index are
#: changed by every commit, so four times fewer checkpoints write and sync fewer pages (about
#: 10 % less CPU per task on the overhead workload).
WAL_CHECKPOINT_PAGES = 4000
SYNCHRONOUS_MODES = ("normal", "full")
#: The conflict clause of every write of a commit. A batch is all or nothing, so a statement that
#: fails must end the whole transaction anyway; with the default (ABORT) SQLite would also keep a
#: statement journal to undo that statement alone: a copy of every page it changes, spilled to a
#: temporary file past 64 KiB (about a quarter of the write syscalls and bytes of a run).
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


#: Where readers look a pipeline id up (``ids`` in the statements below): ``pipeline_key_ids``
#: from schema 6 on (the sorted index and the keys not merged into it yet, see the schema),
#: the key table itself before.
_IDS_OLD = "pipeline_keys"
#: the keys ``pipeline_ids`` holds (the writer looks its own newer ones up in memory)
_IDS_INDEXED = "pipeline_ids"
#: the newer ones, as a table ``k`` can name (an ordered page reads the two parts apart)
_IDS_TAIL = f"({schema.KEY_TAIL})"
_REGISTER_KEY = f"INSERT {_OR} INTO pipeline_keys (pk, pipeline_id) VALUES (?, ?)"
_HAS_TABLE = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"
#: Keys registered since the last merge into ``pipeline_ids`` after which a commit merges them
#: (schema 6). Each merge writes the index's leaves that the new ids fall in, once; a reader
#: that looks an id up scans at most this many key rows besides its index probe.
KEY_TAIL_MAX = 8192
#: pipeline id -> pk entries kept between commits (pipelines in flight checkpoint many times)
_KNOWN_MAX = 4096
#: ids known to have no key row, at most (admission looks ahead of the commits by a few chunks)
_ABSENT_MAX = 65536


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


#: a cursor advance: two columns of an existing row, no index touched
_PROGRESS = f"UPDATE {_OR} pipelines SET cursor = ?, attempts_total = ? WHERE pk = ?"
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
#: a pipeline's earlier final artifacts, unmarked before a new one is written (``Batch.finals_cleared``)
_CLEAR_FINALS = f"UPDATE {_OR} artifacts SET is_final = 0 WHERE pk = ? AND is_final"
#: ``Batch.resets``, before the batch's tasks and artifacts: a range of the clustered key each
_RESET_TASKS = "DELETE FROM tasks WHERE pk = ? AND seq >= 0 AND seq < ?"
_RESET_ARTIFACTS = "DELETE FROM artifacts WHERE pk = ? AND seq >= 0 AND seq < ?"

_PAGE_CODECS: dict[str, RowCodec[Any]] = {
    "pipelines": PIPELINES,
    "tasks": TASKS,
    "attempts": ATTEMPTS,
    "events": EVENTS,
    "artifacts": ARTIFACTS,
}
#: which filters each kind honours (same as the memory reference store)
_PAGE_FILTERS: dict[str, tuple[str, ...]] = {
    "pipelines": ("run_id", "pipeline_id", "state"),
    "tasks": ("run_id", "pipeline_id", "state"),
    "attempts": ("run_id", "pipeline_id"),
    "events": ("run_id", "pipeline_id"),
    "artifacts": ("pipeline_id",),
}


@lru_cache(maxsize=256)
def _page_sql(
    kind: str,
    filters: tuple[str, ...],
    keyset: bool,
    select: str | None = None,
    spans: bool = False,
    ids: str = _IDS_OLD,
) -> str:
    """``page``'s statement for the rowid kinds; ``select`` narrows the columns; ``spans``: the
    file has ``run_spans`` (schema 5), which a filter on the run of attempts or events reads;
    ``ids``: where a pipeline id is looked up."""
    codec = _PAGE_CODECS[kind]
    keys = PAGE_KINDS[kind]
    by_span = spans and "run_id" in filters and kind in schema.SPAN_KINDS
    where = [
        f't."pk" = (SELECT pk FROM {ids} WHERE pipeline_id = ?)'
        if f == "pipeline_id"
        else run_spans.run_condition(kind)
        if f == "run_id" and by_span
        else f't."{f}" = ?'
        for f in filters
    ]
    if keyset:
        cols = ", ".join(f't."{k}"' for k in keys)
        marks = ", ".join("?" for _ in keys)
        where.append(f"({cols}) > ({marks})" if len(keys) > 1 else f't."{keys[0]}" > ?')
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    order = ", ".join(f't."{k}"' for k in keys)
    columns = select or codec.read_list()
    source = (run_spans.SOURCE if by_span else "") + _source(codec, columns)
    return f"SELECT {columns} FROM {source}{clause} ORDER BY {order} LIMIT ?"


def _source(codec: RowCodec[Any], columns: str) -> str:
    """``codec``'s table as ``t``, with the key table as ``k`` when ``columns`` read from it (a
    derived id; a narrow summary of attempts needs none)."""
    table = f'"{codec.table}" AS t'
    return f"{table} LEFT JOIN pipeline_keys AS k ON k.pk = t.pk" if 'k."' in columns else table


def _rows_where(codec: RowCodec[Any], where: str) -> str:
    """Whole rows of ``codec``'s table (derived ids rebuilt) matching ``where``, which names the
    table's own columns unqualified (``... LIMIT 1`` included)."""
    if not codec.derived:
        return f'SELECT {codec.select_list} FROM "{codec.table}" WHERE {where}'
    inner = f'(SELECT * FROM "{codec.table}" WHERE {where}) AS t'
    return f"SELECT {codec.read_list()} FROM {inner} LEFT JOIN pipeline_keys AS k ON k.pk = t.pk"


@lru_cache(maxsize=64)
def _clustered_page_sql(codec: RowCodec[Any], filters: tuple[str, ...], keyset: bool, keys: str) -> str:
    """(pipeline_id, seq) order through an id-ordered key source ``keys`` (the key table's unique
    index before schema 6, ``pipeline_ids`` or the sorted tail after), then each pipeline's rows."""
    cols = codec.read_list()
    where = ['k."pipeline_id" = ?' if f == "pipeline_id" else f't."{f}" = ?' for f in filters]
    if keyset:
        where.append('(k."pipeline_id", t."seq") > (?, ?)')
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    return (
        f'SELECT {cols} FROM {keys} AS k JOIN "{codec.table}" AS t ON t.pk = k.pk{clause}'
        ' ORDER BY k."pipeline_id", t."seq" LIMIT ?'
    )


_CHILD_CODECS: dict[str, RowCodec[Any]] = {"tasks": TASKS, "artifacts": ARTIFACTS, "handoffs": HANDOFFS}
#: the order of each child kind within one pipeline
_CHILD_ORDER = {"tasks": "seq", "artifacts": "seq", "handoffs": "handoff_id"}


@lru_cache(maxsize=64)
def _children_sql(kind: str, n: int, ids: str) -> str:
    """Tasks, artifacts or ledger rows of n pipeline ids, by pipeline id then seq (handoff id):
    one index probe of the key table per id, then that pipeline's rows."""
    codec = _CHILD_CODECS[kind]
    cols = codec.read_list()
    marks = ", ".join("?" for _ in range(n))
    return (
        f'SELECT {cols} FROM {ids} AS k JOIN "{kind}" AS t ON t.pk = k.pk'
        f' WHERE k."pipeline_id" IN ({marks}) ORDER BY k."pipeline_id", t."{_CHILD_ORDER[kind]}"'
    )


@lru_cache(maxsize=64)
def _leases_sql(n: int, ids: str) -> str:
    """Each attempt's task and leases for n pipeline ids, oldest first (the last one per task is
    what it leased in the end): two columns, where a whole attempt row carries fifteen."""
    marks = ", ".join("?" for _ in range(n))
    return (
        f'SELECT {_ATTEMPT_TASK}, t."leases_json" FROM {ids} AS k JOIN attempts AS t ON t.pk = k.pk'
        f' WHERE k."pipeline_id" IN ({marks}) ORDER BY t."attempt_id"'
    )


_LEASES = msgspec.json.Decoder(list[dict[str, Any]])


@lru_cache(maxsize=4)
def _get_artifact_sql(ids: str) -> str:
    """One artifact by pipeline id and seq (a resume reads one per pipeline it continues)."""
    return (
        f"SELECT {ARTIFACTS.read_list()} FROM {ids} AS k JOIN artifacts AS t ON t.pk = k.pk"
        ' WHERE k."pipeline_id" = ? AND t."seq" = ?'
    )


#: an attempt's ``task_run_id`` as readers see it (derived, see ``rows.SLOT_ID``)
_ATTEMPT_TASK = ATTEMPTS.read_columns()[ATTEMPTS.columns.index("task_run_id")]


@lru_cache(maxsize=64)
def _finals_sql(n: int, ids: str) -> str:
    """The artifacts marked final of n pipeline ids, in (pipeline_id, seq) order: the filter runs
    in SQLite, so the other artifacts of a pipeline are never fetched or decoded."""
    cols = ARTIFACTS.read_list()
    marks = ", ".join("?" for _ in range(n))
    return (
        f"SELECT {cols} FROM {ids} AS k JOIN artifacts AS t ON t.pk = k.pk"
        f' WHERE k."pipeline_id" IN ({marks}) AND t."is_final" ORDER BY k."pipeline_id", t."seq"'
    )


@lru_cache(maxsize=64)
def _metrics_sql(n: int) -> str:
    """The latest metrics of run ? for n pipeline ids, through the (run_id, pipeline_id, name) key."""
    marks = ", ".join("?" for _ in range(n))
    return (
        f"SELECT {METRICS.select_list} FROM metrics WHERE run_id = ? AND pipeline_id IN ({marks})"
        " ORDER BY pipeline_id, name"
    )


@lru_cache(maxsize=64)
def _keys_sql(n: int) -> str:
    """The writer's lookup of ids in the sorted index (it knows the newer keys itself)."""
    marks = ", ".join("?" for _ in range(n))
    return f"SELECT pipeline_id, pk FROM {_IDS_INDEXED} WHERE pipeline_id IN ({marks})"


@lru_cache(maxsize=64)
def _lookup_sql(n: int, ids: str) -> str:
    marks = ", ".join("?" for _ in range(n))
    cols = ", ".join(f'p."{c}"' for c in PIPELINES.columns)
    return (
        f"SELECT {cols} FROM {ids} AS k JOIN pipelines AS p ON p.pk = k.pk WHERE k.pipeline_id IN ({marks})"
    )


#: Rows a dead run left ``running``, found through ``pipelines_by_run_state`` one run at a time:
#: the run ids come from a skip scan of that index (one seek per distinct run), so the cost
#: follows the number of runs and stale rows, not the size of the store (a plain
#: ``WHERE state = 'running' AND run_id != ?`` scans every pipeline at every run start).
_INTERRUPT_PIPELINES = (
    "UPDATE pipelines INDEXED BY pipelines_by_run_state SET state = 'interrupted'"
    " WHERE state = 'running' AND run_id IN ("
    " WITH RECURSIVE run_ids(id) AS ("
    "  SELECT (SELECT min(run_id) FROM pipelines)"
    "  UNION ALL"
    "  SELECT (SELECT min(run_id) FROM pipelines WHERE run_id > run_ids.id) FROM run_ids"
    "  WHERE run_ids.id IS NOT NULL)"
    " SELECT id FROM run_ids WHERE id IS NOT NULL AND id != ?)"
)  # (the statement starts with UPDATE so that ``rowcount`` counts its changes; INDEXED BY:
#    once ``PRAGMA optimize`` has analysed a store whose pipelines all sit in one run and one
#    state, the statistics call the index useless and the planner would scan the table)
#: the columns a live view folds per attempt (``attempt_summaries``)
#: ``pipeline_summaries``' five columns of a row that also carries its ``pk`` (for the next page)
_SUMMARY = operator.itemgetter(0, 1, 2, 3, 4)
#: the order of a page of tasks or artifacts
_ID_SEQ = operator.attrgetter("pipeline_id", "seq")
_LAST = operator.itemgetter(-1)
#: the columns of a pipeline row that its summary and the totals read hold what they should
#: (computed in SQLite next to the values: a hand-edited row is found without a Python test per row)
_SUMMARY_TYPED = PIPELINES.typed_sql(("pipeline_id", "state", "started_at", "finished_at", "attempts_total"))
_STATE_TYPED = PIPELINES.typed_sql(("state", "started_at", "finished_at", "attempts_total"))
_TASK_COUNT_TYPED = TASKS.typed_sql(("name", "state"), "t.")
_TASK_STATS_TYPED = TASKS.typed_sql(("name", "state"))
_SUMMARY_TYPES = {
    "attempts": ATTEMPTS.typed_sql(("attempt_id", "duration_ms", "ended_at", "outcome"), "t."),
    "events": EVENTS.typed_sql(("event_id", "kind", "pipeline_id", "ts"), "t."),
}
_ATTEMPT_SUMMARY = 't."attempt_id", t."duration_ms", t."ended_at", t."outcome"'
_EVENT_SUMMARY = ", ".join(
    EVENTS.read_columns()[EVENTS.columns.index(c)] for c in ("event_id", "kind", "pipeline_id", "ts")
)
#: task rows are looked at only in a file marked as possibly holding running ones (see schema)
_TASKS_MARKED = f"SELECT 1 FROM store_meta WHERE key = '{schema.TASKS_RUNNING_KEY}'"
_MARK_TASKS = f"INSERT OR REPLACE INTO store_meta (key, value) VALUES ('{schema.TASKS_RUNNING_KEY}', '1')"
_INTERRUPT_TASKS = "UPDATE tasks SET state = 'interrupted' WHERE state = 'running' AND run_id != ?"
_STILL_RUNNING = "SELECT 1 FROM tasks WHERE state = 'running' LIMIT 1"
_UNMARK_TASKS = f"DELETE FROM store_meta WHERE key = '{schema.TASKS_RUNNING_KEY}'"


F = TypeVar("F", bound=Callable[..., Any])


def _names_store(method: F) -> F:
    """Rows are decoded (``RowCodec.decode``) where the store is not known: a ``CorruptRow``
    leaving a read method is given the store's path, so the message names file, table, row
    and column."""

    @functools.wraps(method)
    def read(self: SqliteStore, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except CorruptRow as exc:
            raise exc.at(self.path) from None

    return read  # type: ignore[return-value]


def synchronous_mode(query: dict[str, str]) -> str:
    """``?synchronous=`` in the location wins over ``PYATTACKER_SQLITE_SYNCHRONOUS``; NORMAL default."""
    raw = query.get("synchronous") or os.environ.get("PYATTACKER_SQLITE_SYNCHRONOUS") or "normal"
    mode = raw.strip().lower()
    if mode not in SYNCHRONOUS_MODES:
        raise ConfigError(f"sqlite synchronous={raw!r}: expected one of {', '.join(SYNCHRONOUS_MODES)}")
    return mode


class SqliteStore:
    """A pyattacker store in one SQLite file. Build it with ``open_writer`` / ``open_reader``."""

    #: applies ``Batch.resets`` (pipelines with control flow may run here)
    applies_resets = True

    def __init__(
        self,
        path: str,
        conn: sqlite3.Connection,
        *,
        read_only: bool,
        lock: WriterLock | None,
        synchronous: str,
    ) -> None:
        self.location = path
        self.path = path
        self.read_only = read_only
        self.synchronous = synchronous
        self._conn: sqlite3.Connection | None = conn
        self._writer_lock = lock
        self._mutex = threading.RLock()
        self._next_attempt_id = self._next_id("attempts", "attempt_id")
        self._next_event_id = self._next_id("events", "event_id")
        #: the tables of later schema versions that the file has (``_has_table``): a reader of an
        #: older file has no ledger (schema 3), finds a run's rows through its run indexes
        #: (before 5) and looks ids up in the key table's own index (before 6)
        self._tables: set[str] = set() if read_only else set(schema.ADDED_TABLES)  # (a writer migrated it)
        self._next_handoff_id = self._next_id("handoffs", "handoff_id") if self.has_ledger else 1
        #: pipeline id -> pk of committed key rows. Rows carry the pk itself (resolved here, not
        #: by a sub-select per row); bounded, since only pipelines in flight need to be here.
        self._known: dict[str, int] = {}
        #: ids that a lookup found without a key row: their first commit registers them without
        #: looking again (sound because this connection is the file's only writer: the writer
        #: lock; a commit that registers one takes it out, and clearing the set is always safe)
        self._absent: set[str] = set()
        self._next_pk = self._next_id("pipeline_keys", "pk")
        #: the writer's keys above ``store_meta.keys_indexed`` (id -> pk), which ``pipeline_ids``
        #: does not hold yet: complete, because the writer merges whatever a crash left before
        #: its first commit (``_merge_keys``), and nobody else registers keys (the writer lock)
        self._tail: dict[str, int] = {}
        self._indexed = 0
        if not read_only:
            self._indexed = self._merge_keys()
        self._states = StateLookup(
            self._query, LOOKUP_CHUNK, None if read_only else self._absent, self._ids_for
        )
        #: copies the log into the database off the writer's thread (see ``checkpointer``)
        self.checkpointer = None if read_only else Checkpointer(path, synchronous)
        self.wal_bound = (
            None
            if self.checkpointer is None
            else WalBound(path + "-wal", BUSY_TIMEOUT_MS, exclusive=self.checkpointer.lock)
        )
        #: FULL makes its commits durable beside the writer (``sync_behind``) from the second commit on
        self.sync_behind = SyncBehind(path + "-wal") if not read_only and synchronous == "full" else None

    def _has_table(self, name: str) -> bool:
        """Whether the file has ``name``, a table a later schema version added. Known for good once
        seen; a reader of an older file asks again until it is there: a writer may migrate the
        file while ``watch`` or ``serve`` keeps it open (a writer has migrated it already)."""
        if name not in self._tables and self._conn is not None and self._query(_HAS_TABLE, (name,)):
            self._tables.add(name)
        return name in self._tables

    @property
    def has_ledger(self) -> bool:
        """Whether the file has the control ledger (schema 3)."""
        return self._has_table("handoffs")

    @property
    def has_spans(self) -> bool:
        """Whether the file has ``run_spans`` (schema 5, see ``run_spans``)."""
        return self._has_table("run_spans")

    @property
    def has_ids(self) -> bool:
        """Whether the file has ``pipeline_ids`` (schema 6)."""
        return self._has_table("pipeline_ids")

    @property
    def _ids(self) -> str:
        """Where a statement looks pipeline ids up (see ``_IDS_OLD``)."""
        return schema.KEY_IDS if self.has_ids else _IDS_OLD

    def _ids_for(self, ids: Sequence[str]) -> str:
        """``_ids``, or for the writer the sorted index alone when none of ``ids`` is one of its
        own newer keys (the usual case: a resume's lookups then skip the scan of those rows)."""
        if self.read_only or not self.has_ids:
            return self._ids
        tail = self._tail
        return schema.KEY_IDS if tail and not tail.keys().isdisjoint(ids) else _IDS_INDEXED

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

    # -- opening ----------------------------------------------------------------------------
    @classmethod
    def open_writer(cls, path: str, synchronous: str = "normal") -> SqliteStore:
        """Create/open the file for writing, holding the writer lock for the store's lifetime."""
        path = os.path.abspath(os.path.expanduser(path))
        require_sqlite(path)
        _ensure_writable_dir(path)
        schema.probe(path)  # refuse foreign/corrupt/newer files before leaving any trace
        lock = WriterLock.acquire(path + ".lock", path)
        conn: sqlite3.Connection | None = None
        try:
            version = schema.probe(path)
            conn = _connect(path)
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {synchronous.upper()}")
            conn.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}")
            conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_CHECKPOINT_PAGES}")
            schema.migrate(conn, version, time.time())
            return cls(path, conn, read_only=False, lock=lock, synchronous=synchronous)
        except BaseException as exc:
            if conn is not None:
                conn.close()
            lock.release()
            if isinstance(exc, sqlite3.Error):
                raise StoreUnavailable(f"store {path} cannot be opened for writing: {exc}") from exc
            raise

    @classmethod
    def open_reader(cls, path: str) -> SqliteStore:
        """Open an existing store read-only (works beside a live writer; never writes)."""
        path = os.path.abspath(os.path.expanduser(path))
        require_sqlite(path)
        if os.path.isdir(path):
            raise ConfigError(f"store {path} is a directory, not a SQLite store file")
        if not os.path.isfile(path):
            raise ConfigError(f"store {path} does not exist")
        if schema.probe(path) == 0:
            raise ConfigError(f"store {path} is not a pyattacker store (an empty database)")
        conn: sqlite3.Connection | None = None
        try:
            conn = sqlite3.connect(
                schema.ro_uri(path), uri=True, isolation_level=None, check_same_thread=False
            )
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
            conn.execute("PRAGMA query_only = 1")
            return cls(path, conn, read_only=True, lock=None, synchronous="normal")
        except sqlite3.Error as exc:
            if conn is not None:
                conn.close()
            raise StoreUnavailable(f"store {path} cannot be opened for reading: {exc}") from exc

    def _next_id(self, table: str, column: str) -> int:
        row = self._db().execute(f'SELECT COALESCE(MAX("{column}"), 0) FROM "{table}"').fetchone()
        return int(row[0]) + 1

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreUnavailable(f"store {self.path} is closed")
        return self._conn

    def _writer(self) -> sqlite3.Connection:
        if self.read_only:
            raise StoreUnavailable(f"store {self.path} is open read-only")
        return self._db()

    # -- writes -----------------------------------------------------------------------------
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

    @staticmethod
    def _reset(conn: sqlite3.Connection, batch: Batch, pks: dict[str, int]) -> None:
        """Delete the task rows and chain outputs of pipelines starting again from the seed
        (``Batch.resets``; an id without a key row has none)."""
        slots = [(pks[r.pipeline_id], r.slots) for r in batch.resets if r.pipeline_id in pks]
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

    @staticmethod
    def _rollback(conn: sqlite3.Connection) -> None:
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass

    def interrupt_running(self, run_id: str, now: float) -> int:
        """Mark rows left ``running`` by other (dead: we hold the lock) runs interrupted."""
        with self._mutex:
            conn = self._writer()
            try:
                conn.execute("BEGIN IMMEDIATE")
                changed = conn.execute(_INTERRUPT_PIPELINES, (run_id,)).rowcount
                if conn.execute(_TASKS_MARKED).fetchone() is not None:
                    conn.execute(_INTERRUPT_TASKS, (run_id,))
                    if conn.execute(_STILL_RUNNING).fetchone() is None:  # (only ``run_id``'s may remain)
                        conn.execute(_UNMARK_TASKS)
                conn.execute(
                    "UPDATE runs SET status = 'interrupted',"
                    " ended_at = CASE WHEN ended_at IS NULL OR ended_at = 0 THEN ? ELSE ended_at END"
                    " WHERE status = 'running' AND run_id != ?",
                    (now, run_id),
                )
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback(conn)
                raise StoreUnavailable(f"store {self.path}: interrupt_running failed: {exc}") from exc
            return int(changed)

    # -- reads ------------------------------------------------------------------------------
    def _query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        with self._mutex:
            try:
                return self._db().execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise StoreUnavailable(f"store {self.path}: read failed: {exc}") from exc

    def _query_snapshot(self, sqls: list[str], params: Sequence[Any]) -> list[list[Any]]:
        """The rows of each of ``sqls`` (same ``params``), all read in one transaction."""
        if len(sqls) == 1:
            return [self._query(sqls[0], params)]
        with self._snapshot() as conn:
            return [conn.execute(sql, params).fetchall() for sql in sqls]

    @contextmanager
    def _snapshot(self, what: str = "read") -> Iterator[sqlite3.Connection]:
        """The connection inside one read transaction (what the block reads agrees with itself)."""
        with self._mutex:
            conn = self._db()
            try:
                conn.execute("BEGIN")
                try:
                    yield conn
                finally:
                    conn.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback(conn)
                raise StoreUnavailable(f"store {self.path}: {what} failed: {exc}") from exc

    def _raise_corrupt(self, codec: RowCodec[Any], where: str, params: Sequence[Any] = ()) -> None:
        """Raise the ``CorruptRow`` of the first row of ``codec``'s table matching ``where`` (a
        narrow read saw a bad value: decoding the whole row names its column)."""
        rows = self._query(_rows_where(codec, f"{where} LIMIT 1"), params)
        if rows:
            raise codec.corrupt(rows[0]).at(self.path)
        raise CorruptRow(f"table {codec.table}: a row changed while it was read", self.path)

    @_names_store
    def lookup_pipelines(self, ids: Sequence[str]) -> dict[str, PipelineRecord]:
        unique = list(dict.fromkeys(ids))
        found: dict[str, PipelineRecord] = {}
        decode = PIPELINES.decode
        for start in range(0, len(unique), LOOKUP_CHUNK):
            chunk = unique[start : start + LOOKUP_CHUNK]
            for row in self._query(_lookup_sql(len(chunk), self._ids_for(chunk)), chunk):
                found[row[0]] = decode(row)
        return found

    @_names_store
    def rows_by_pipeline(self, kind: str, ids: Sequence[str]) -> dict[str, list[Any]]:
        """``{pipeline_id: rows}`` of ``kind`` (``tasks``, ``artifacts`` or ``handoffs``) for
        ``ids``, each list in seq (handoff id) order: ``page(kind, pipeline_id=id)`` for many ids,
        one statement per ``LOOKUP_CHUNK`` ids (optional method: ``export`` reads the children of
        a batch of pipelines with it)."""
        codec = _CHILD_CODECS.get(kind)
        if codec is None:
            raise ValueError(f"rows_by_pipeline: kind must be tasks, artifacts or handoffs, got {kind!r}")
        if kind == "handoffs" and not self.has_ledger:
            return {}
        return self._grouped(lambda n, chunk: _children_sql(kind, n, self._ids_for(chunk)), codec, ids, ())

    @_names_store
    def final_artifacts(self, ids: Sequence[str]) -> dict[str, ArtifactRecord]:
        """``{pipeline_id: final artifact}`` for those of ``ids`` that have one (the first marked
        final, in seq order): what ``export --rows results`` shows, read without the other
        artifacts (optional method; a pipeline's seed and intermediate outputs can be most of
        its rows)."""
        finals = self._grouped(lambda n, chunk: _finals_sql(n, self._ids_for(chunk)), ARTIFACTS, ids, ())
        return {pid: rows[0] for pid, rows in finals.items()}

    def task_leases(self, ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
        """``{task_run_id: leases}`` of the last attempt of each task of the pipelines ``ids``
        (optional method: ``export --rows tasks`` says which lease each task used)."""
        last: dict[str, str | None] = {}
        unique = list(dict.fromkeys(ids))
        for start in range(0, len(unique), LOOKUP_CHUNK):
            chunk = unique[start : start + LOOKUP_CHUNK]
            last.update(self._query(_leases_sql(len(chunk), self._ids_for(chunk)), chunk))
        out: dict[str, list[dict[str, Any]]] = {}
        for task_run_id, text in last.items():
            try:
                out[task_run_id] = [] if text is None else _LEASES.decode(text)
            except msgspec.DecodeError as exc:
                raise CorruptRow(
                    f"table attempts, task_run_id={task_run_id!r}: column leases_json is not a list of"
                    f" lease objects ({exc})",
                    self.path,
                ) from None
        return out

    @_names_store
    def metrics_by_pipeline(self, run_id: str, ids: Sequence[str]) -> dict[str, list[MetricRecord]]:
        """``{pipeline_id: metrics}`` of run ``run_id`` for ``ids``, each list by name:
        ``metrics(run_id, pipeline_id=id)`` for many ids (optional method, see ``export``)."""
        return self._grouped(lambda n, _: _metrics_sql(n), METRICS, ids, (run_id,))

    def _grouped(
        self,
        sql_for: Callable[[int, Sequence[str]], str],
        codec: RowCodec[Any],
        ids: Sequence[str],
        head: tuple[Any, ...],
    ) -> dict[str, list[Any]]:
        """Rows of ``sql_for(n, chunk)`` (``head`` then the n ids of ``chunk`` as parameters),
        grouped by pipeline id."""
        out: dict[str, list[Any]] = {}
        unique = list(dict.fromkeys(ids))
        decode = codec.decode
        for start in range(0, len(unique), LOOKUP_CHUNK):
            chunk = unique[start : start + LOOKUP_CHUNK]
            for row in self._query(sql_for(len(chunk), chunk), (*head, *chunk)):
                rec = decode(row)
                out.setdefault(rec.pipeline_id, []).append(rec)
        return out

    @_names_store
    def lookup_states(self, ids: Sequence[str]) -> dict[str, tuple[str, str, str, str]]:
        """``(state, spec_digest, seed_digest, run_id)`` per stored id: what a resume needs to
        skip a finished pipeline, without reading and decoding its whole row (optional method).
        Reads ahead in storage order when the ids come in that order (see ``state_lookup``)."""
        return self._states(ids)

    def pipeline_summaries(
        self, run_id: str | None = None, page: int = 5000
    ) -> Iterator[tuple[str, str, float | None, float | None, int]]:
        """``(pipeline_id, state, started_at, finished_at, attempts_total)`` of every pipeline
        row of ``run_id`` (None: all), in storage order and read in pages. Optional method: a
        merged report folds stores on these five columns and reads whole rows only for the
        failed pipelines it shows."""
        # a range scan of the table in pk order (``+run_id``: not through the (run_id, state)
        # index, whose rows would have to be sorted by pk again for every page)
        where = "WHERE pk > ? AND +run_id = ?" if run_id is not None else "WHERE pk > ?"
        sql = (
            "SELECT pipeline_id, state, started_at, finished_at, ifnull(attempts_total, 0), pk,"
            f" {_SUMMARY_TYPED} FROM pipelines {where} ORDER BY pk LIMIT ?"
        )
        after = 0
        while True:
            params = (after, run_id, page) if run_id is not None else (after, page)
            rows = self._query(sql, params)
            if not all(map(_LAST, rows)):
                self._raise_corrupt(PIPELINES, "pk = ?", (next(r[5] for r in rows if not r[6]),))
            yield from map(_SUMMARY, rows)  # the first five columns, without a Python loop
            if len(rows) < page:
                return
            after = rows[-1][5]

    def pipeline_totals(self, run_id: str | None = None) -> tuple[dict[str, int], Sequence[float], int]:
        """``({state: count}, sorted durations in ms, sum of attempts_total)`` over the pipeline
        rows of ``run_id`` (None: all), read in one transaction. Optional method: a report over
        one store needs these three, not a fold of every row (a duration is
        ``(finished_at - started_at) * 1000.0`` of a row that has both, as the fold computes it).
        The durations are a packed array: 8 bytes per pipeline, however large the run."""
        where, params = _run_filter(run_id)
        with self._snapshot() as conn:
            totals = conn.execute(
                f"SELECT state, COUNT(*), SUM(ifnull(attempts_total, 0)), SUM(NOT {_STATE_TYPED})"
                f" FROM pipelines{where} GROUP BY state",
                params,
            ).fetchall()
            durations = _sorted_durations(conn, run_id)
        if any(bad for *_, bad in totals):
            and_run, run_params = _run_filter(run_id, " AND")
            self._raise_corrupt(PIPELINES, f"NOT {_STATE_TYPED}{and_run}", run_params)
        by_state = {state: int(n) for state, n, _, _ in totals}
        return by_state, durations, sum(int(a) for _, _, a, _ in totals)

    def task_counts(self, run_id: str | None = None) -> dict[str, dict[str, int]]:
        """``{task name: {state: count}}`` over the task rows of ``run_id`` whose pipeline row is
        of ``run_id`` too (None: every task row that has a pipeline row). Optional method: a
        merged report asks for it instead of reading every task row.

        The types are tested once per group, not per row: ``name`` and ``state`` may only be
        text, and a text value never groups with a value of another type, so a group's own
        value is bad exactly when one of its rows is (a read after a shard's run waits on this)."""
        head = f"SELECT t.name, t.state, COUNT(*), NOT {_TASK_COUNT_TYPED}"
        if run_id is None:
            sql = f"{head} FROM tasks AS t JOIN pipelines AS p ON p.pk = t.pk GROUP BY t.name, t.state"
            params: tuple[Any, ...] = ()
        else:
            sql = (
                f"{head} FROM tasks AS t JOIN pipelines AS p ON p.pk = t.pk"
                " WHERE t.run_id = ? AND p.run_id = ? GROUP BY t.name, t.state"
            )
            params = (run_id, run_id)
        rows = self._query(sql, params)
        if any(bad for *_, bad in rows):
            self._raise_corrupt(TASKS, f"NOT {_TASK_STATS_TYPED}")
        out: dict[str, dict[str, int]] = {}
        for name, state, n, _ in rows:
            out.setdefault(name, {})[state] = int(n)
        return out

    def count_rows(self, kind: str, run_id: str | None = None) -> int:
        """Rows of ``kind`` that ``page(kind, run_id=run_id)`` would return, counted in SQL
        (optional method: a merged report needs the event count, not the events)."""
        if kind not in _PAGE_CODECS:
            raise ValueError(f"unknown row kind {kind!r}; expected one of {', '.join(PAGE_KINDS)}")
        by_run = run_id is not None and "run_id" in _PAGE_FILTERS[kind]
        sql = _count_sql(kind, by_run, self.has_spans)
        return int(self._query(sql, (run_id,) if by_run else ())[0][0])

    def count_handoffs(self, run_id: str | None = None) -> int:
        """Handoffs committed by ``run_id`` (restarts of a traversal are not counted)."""
        if not self.has_ledger:
            return 0
        and_run, params = _run_filter(run_id, " AND")
        return int(
            self._query(f"SELECT COUNT(*) FROM handoffs WHERE operation = 'forward'{and_run}", params)[0][0]
        )

    def attempt_summaries(
        self, run_id: str | None, after: int | None, limit: int
    ) -> list[tuple[int, float, float, str]]:
        """``(attempt_id, duration_ms, ended_at, outcome)`` of the attempts ``page("attempts",
        run_id=run_id, after=(after,), limit=limit)`` would return (optional method): a live
        view folds these four columns, and decoding whole rows (their JSON included) cost it
        seconds when it first caught up with a large run."""
        return self._summaries("attempts", _ATTEMPT_SUMMARY, run_id, after, limit)

    def event_summaries(
        self, run_id: str | None, after: int | None, limit: int
    ) -> list[tuple[int, str, str | None, float]]:
        """``(event_id, kind, pipeline_id, ts)`` of the events ``page("events", run_id=run_id,
        after=(after,), limit=limit)`` would return (optional method): a live view counts kinds
        and follows parked pipelines from these, without decoding every event's JSON."""
        return self._summaries("events", _EVENT_SUMMARY, run_id, after, limit)

    def _summaries(
        self, kind: str, select: str, run_id: str | None, after: int | None, limit: int
    ) -> list[Any]:
        if limit <= 0:
            return []
        filters = ("run_id",) if run_id is not None else ()
        params = [*([run_id] if run_id is not None else []), *([after] if after is not None else []), limit]
        typed = _SUMMARY_TYPES[kind]
        sql = _page_sql(kind, filters, after is not None, f"{select}, {typed}", self.has_spans, self._ids)
        rows = self._query(sql, params)
        if not all(map(_LAST, rows)):
            codec = _PAGE_CODECS[kind]
            bad = next(r[0] for r in rows if not r[-1])
            self._raise_corrupt(codec, f'"{codec.plain[0]}" = ?', (bad,))
        return [r[:-1] for r in rows]

    @_names_store
    def get_artifact(self, pipeline_id: str, seq: int) -> ArtifactRecord | None:
        if pipeline_id in self._absent:  # no key row, no artifacts (as ``handoffs``)
            return None
        rows = self._query(_get_artifact_sql(self._ids_for((pipeline_id,))), (pipeline_id, seq))
        return ARTIFACTS.decode(rows[0]) if rows else None

    @_names_store
    def handoffs(self, pipeline_id: str) -> list[HandoffRecord]:
        """The pipeline's control ledger, oldest first (optional method: a store without it
        cannot run pipelines that hand off).

        An id the writer's lookup found without a key row has no ledger rows (they carry the
        key): a fresh pipeline with control costs no query here when its run opens it."""
        if pipeline_id in self._absent or not self.has_ledger:
            return []
        rows = self._query(_children_sql("handoffs", 1, self._ids_for((pipeline_id,))), (pipeline_id,))
        return [HANDOFFS.decode(row) for row in rows]

    @_names_store
    def get_run(self, run_id: str) -> RunRecord | None:
        rows = self._query(f"SELECT {RUNS.select_list} FROM runs WHERE run_id = ?", (run_id,))
        return RUNS.decode(rows[0]) if rows else None

    @_names_store
    def runs(self) -> list[RunRecord]:
        rows = self._query(f"SELECT {RUNS.select_list} FROM runs ORDER BY started_at, run_id")
        return [RUNS.decode(r) for r in rows]

    @_names_store
    def page(
        self,
        kind: str,
        *,
        run_id: str | None = None,
        pipeline_id: str | None = None,
        state: str | None = None,
        after: tuple[Any, ...] | None = None,
        limit: int = 1000,
    ) -> list[Any]:
        if kind not in _PAGE_CODECS:
            raise ValueError(f"unknown row kind {kind!r}; expected one of {', '.join(PAGE_KINDS)}")
        if limit <= 0:
            return []
        given = {"run_id": run_id, "pipeline_id": pipeline_id, "state": state}
        filters = tuple(f for f in _PAGE_FILTERS[kind] if given[f] is not None)
        params: list[Any] = [given[f] for f in filters]
        if after is not None:
            keys = PAGE_KINDS[kind]
            if len(after) != len(keys):
                raise ValueError(f"after for {kind} must be a tuple of {', '.join(keys)}")
            params.extend(after)
        params.append(limit)
        codec = _PAGE_CODECS[kind]
        decode = codec.decode
        ids = self._ids if pipeline_id is None else self._ids_for((pipeline_id,))
        if kind not in ("tasks", "artifacts"):
            sql = _page_sql(kind, filters, after is not None, None, self.has_spans, ids)
            return [decode(r) for r in self._query(sql, params)]
        keyset = after is not None
        if not self.has_ids:
            return [
                decode(r) for r in self._query(_clustered_page_sql(codec, filters, keyset, _IDS_OLD), params)
            ]
        # schema 6: the sorted index and the newer keys are each in id order; the page is the
        # first ``limit`` rows of the two, merged, both read in one snapshot (a merge committed
        # between them would move keys from the second part to the first unseen). The writer
        # knows whether it has newer keys, and which: then none to read, or these.
        parts = [_IDS_INDEXED]
        if ids != _IDS_INDEXED and (self.read_only or self._tail):
            parts.append(_IDS_TAIL)
        indexed, *newer = self._query_snapshot(
            [_clustered_page_sql(codec, filters, keyset, k) for k in parts], params
        )
        if not newer or not newer[0]:
            return [decode(r) for r in indexed]
        return list(
            itertools.islice(heapq.merge(map(decode, indexed), map(decode, newer[0]), key=_ID_SEQ), limit)
        )

    @_names_store
    def metrics(self, run_id: str | None = None, pipeline_id: str | None = None) -> list[MetricRecord]:
        where, params = _where({"run_id": run_id, "pipeline_id": pipeline_id})
        rows = self._query(
            f"SELECT {METRICS.select_list} FROM metrics{where} ORDER BY run_id, pipeline_id, name", params
        )
        return [METRICS.decode(r) for r in rows]

    @_names_store
    def metric_points(
        self, run_id: str, pipeline_id: str, key: str | None = None, after_step: int = -1, limit: int = 1000
    ) -> list[MetricPoint]:
        where, params = _where({"run_id": run_id, "pipeline_id": pipeline_id, "key": key})
        rows = self._query(
            f"SELECT {METRIC_POINTS.select_list} FROM metric_points{where} AND step > ?"
            " ORDER BY step, key, point_id LIMIT ?",
            [*params, after_step, max(0, limit)],
        )
        return [METRIC_POINTS.decode(r) for r in rows]

    def point_pipelines(self, run_id: str) -> list[str]:
        """The pipeline ids (``""``: the run scope) with metric points in run ``run_id``, sorted
        (optional method: ``export --rows points`` visits these instead of every pipeline that
        made an attempt). One pass over the run's part of the ``(run_id, pipeline_id, step)``
        index."""
        rows = self._query(
            "SELECT DISTINCT pipeline_id FROM metric_points WHERE run_id = ? ORDER BY pipeline_id", (run_id,)
        )
        return [pid for (pid,) in rows]

    @_names_store
    def resources(self, run_id: str | None = None) -> list[ResourceRecord]:
        where, params = _where({"run_id": run_id})
        rows = self._query(
            f"SELECT {RESOURCES.select_list} FROM resources{where} ORDER BY pool, resource_id, rowid", params
        )
        return [RESOURCES.decode(r) for r in rows]

    def stats(self, run_id: str | None = None) -> dict[str, Any]:
        """Aggregates in SQL, read in one transaction so the numbers agree with each other."""
        try:
            with self._snapshot("stats") as conn:
                return _stats(conn, run_id, self.has_ledger, self.has_spans)
        except CorruptRow as exc:
            raise exc.at(self.path) from None

    def close(self) -> None:
        """Close the connection (WAL checkpointed by SQLite) and free the writer lock."""
        with self._mutex:
            if not self.read_only and self._conn is not None:
                # the newer keys into the sorted index, so readers after the run probe it alone
                # (if that fails they stay where they are, and are still found)
                try:
                    self._indexed = self._merge_keys()
                except StoreUnavailable as exc:
                    log.warning("pyattacker: %s (at close)", exc)
            conn, self._conn = self._conn, None
            if self.sync_behind is not None:
                self.sync_behind.stop()  # after the syncs requested so far
            if self.checkpointer is not None:
                self.checkpointer.stop()
            try:
                if conn is not None:
                    if not self.read_only:
                        try:
                            conn.execute("PRAGMA optimize")
                        except sqlite3.Error:
                            pass
                        # SQLite removes the WAL when its last connection closes; a viewer
                        # still open would keep it at full size: empty it now if no reader is in it
                        truncate_wal(conn, BUSY_TIMEOUT_MS)
                    conn.close()
            finally:
                if self._writer_lock is not None:
                    self._writer_lock.release()

    def __enter__(self) -> SqliteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "read-only" if self.read_only else "writer"
        return f"SqliteStore({self.path!r}, {mode})"


def _where(filters: dict[str, Any]) -> tuple[str, list[Any]]:
    used = [(k, v) for k, v in filters.items() if v is not None]
    if not used:
        return "", []
    return " WHERE " + " AND ".join(f'"{k}" = ?' for k, _ in used), [v for _, v in used]


def _run_filter(run_id: str | None, prefix: str = " WHERE") -> tuple[str, tuple[Any, ...]]:
    return (f"{prefix} run_id = ?", (run_id,)) if run_id is not None else ("", ())


def _sorted_durations(conn: sqlite3.Connection, run_id: str | None) -> array[float]:
    """``(finished_at - started_at) * 1000.0`` of the pipeline rows of ``run_id`` that have both,
    ascending, packed (8 bytes each: a report over a million pipelines keeps 8 MB of them)."""
    and_run, params = _run_filter(run_id, " AND")
    rows = conn.execute(
        "SELECT (finished_at - started_at) * 1000.0 AS d FROM pipelines"
        f" WHERE finished_at IS NOT NULL AND started_at IS NOT NULL{and_run} ORDER BY d",
        params,
    )
    return array("d", (d for (d,) in rows))


def _count_sql(kind: str, by_run: bool, spans: bool) -> str:
    """Rows of ``kind``, or of run ``?`` (``by_run``) through its span when the file has them."""
    if not by_run:
        return f'SELECT COUNT(*) FROM "{kind}"'
    if spans and kind in schema.SPAN_KINDS:
        return f'SELECT COUNT(*) FROM {run_spans.SOURCE}"{kind}" AS t WHERE {run_spans.run_condition(kind)}'
    return f'SELECT COUNT(*) FROM "{kind}" WHERE run_id = ?'


def _stats(conn: sqlite3.Connection, run_id: str | None, ledger: bool, spans: bool) -> dict[str, Any]:
    params = (run_id,) if run_id is not None else ()
    states = _typed_counts(conn, PIPELINES, _STATE_TYPED, "state", run_id)
    by_state = {state: n for state, n, _ in states}
    durations = _sorted_durations(conn, run_id)
    by_name: dict[str, dict[str, int]] = {}
    tasks = _typed_counts(conn, TASKS, _TASK_STATS_TYPED, "name, state", run_id)
    for name, state, n, _ in tasks:
        by_name.setdefault(name, {})[state] = n
    attempts = conn.execute(_count_sql("attempts", run_id is not None, spans), params).fetchone()[0]
    events = conn.execute(_count_sql("events", run_id is not None, spans), params).fetchone()[0]
    handoffs = 0
    if ledger:
        and_run, _ = _run_filter(run_id, " AND")
        handoffs = conn.execute(
            f"SELECT COUNT(*) FROM handoffs WHERE operation = 'forward'{and_run}", params
        ).fetchone()[0]
    return {
        "pipelines": {
            "total": sum(by_state.values()),
            "by_state": by_state,
            "duration_ms": duration_summary(durations),
        },
        "tasks": {"by_name": by_name},
        "attempts_total": attempts,
        "events_total": events,
        "handoffs_total": handoffs,
    }


def _typed_counts(
    conn: sqlite3.Connection, codec: RowCodec[Any], typed: str, columns: str, run_id: str | None
) -> list[Any]:
    """``(*columns, count, rows failing typed)`` per group of ``codec``'s table (of ``run_id``),
    in ``columns`` order; a failing row is raised as ``CorruptRow`` (``_check_counted``)."""
    where, params = _run_filter(run_id)
    groups = conn.execute(
        f'SELECT {columns}, COUNT(*), SUM(NOT {typed}) FROM "{codec.table}"{where}'
        f" GROUP BY {columns} ORDER BY {columns}",
        params,
    ).fetchall()
    _check_counted(conn, codec, typed, groups, run_id)
    return groups


def _check_counted(
    conn: sqlite3.Connection, codec: RowCodec[Any], typed: str, groups: list[Any], run_id: str | None
) -> None:
    """Groups whose last column counts rows failing ``typed``: raise the first such row's
    ``CorruptRow`` (without the store's path; ``stats`` adds it)."""
    if any(group[-1] for group in groups):
        and_run, params = _run_filter(run_id, " AND")
        row = conn.execute(_rows_where(codec, f"NOT {typed}{and_run} LIMIT 1"), params).fetchone()
        if row is not None:
            raise codec.corrupt(row)


#: the oldest SQLite the statements run on: upserts (``ON CONFLICT ... DO UPDATE``) came in 3.24.0
MIN_SQLITE = (3, 24, 0)


def require_sqlite(path: str) -> None:
    """Refuse, before touching ``path``, a SQLite library too old for the store's statements
    (they would fail at the first commit with a bare syntax error)."""
    version = sqlite3.sqlite_version_info
    if version < MIN_SQLITE:
        have, need = ".".join(map(str, version)), ".".join(map(str, MIN_SQLITE))
        raise StoreUnavailable(
            f"store {path}: this Python's sqlite3 module uses SQLite {have}; the sqlite store needs"
            f" {need} or later (a newer Python or SQLite library, or another store such as jsonl:)"
        )


def _connect(path: str) -> sqlite3.Connection:
    # room for every multi-row variant of the write statements (up to seven sizes per NULL
    # pattern per table), so no commit re-parses one evicted by another
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, cached_statements=512)
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    return conn


def _ensure_writable_dir(path: str) -> None:
    directory = os.path.dirname(path)
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise StoreUnavailable(
            f"store {path}: cannot create directory {directory}: {exc.strerror or exc}"
        ) from exc
    if not os.access(directory, os.W_OK | os.X_OK):
        raise StoreUnavailable(
            f"store {path}: directory {directory} is not writable (a writer needs it for -wal/-shm files)"
        )
    if os.path.exists(path) and not os.access(path, os.R_OK | os.W_OK):
        raise StoreUnavailable(f"store {path}: file is not writable by this user")
