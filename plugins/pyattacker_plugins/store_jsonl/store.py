"""``JsonlStore``: a directory holding an append-only JSON Lines journal.

Each ``commit`` appends its rows plus a commit marker with a single write and one sync (the
kernel already groups rows, so this is group fsync); the recorder's group commits are synced
behind the writer (``commit_behind``, ``sync_behind``: acknowledged once synced), which is why
a marker records how far the journal was synced when it was written (``journal``). On open the
journal is replayed into an in-memory ``Index``; an uncommitted or torn tail is ignored, and a
writer truncates it before appending so the committed prefix of the file is never rewritten.
Readers never write and catch up with a live writer by reading the journal's new committed
bytes before each read.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

import msgspec

from pyattacker import ConfigError
from pyattacker.errors import CorruptRow, StoreUnavailable
from pyattacker.model import (
    ArtifactRecord,
    Batch,
    HandoffRecord,
    LogRecord,
    MetricPoint,
    MetricRecord,
    NoteRecord,
    PipelineRecord,
    ResourceRecord,
    RunRecord,
)
from pyattacker.plugins.api import PAGE_KINDS, StoreBase
from pyattacker.plugins.run_notes import config_note, next_note
from pyattacker.plugins.store_base import select_logs
from pyattacker.plugins.store_queries import PipelineQuery, TimeBucket, bucket_attempts, select_pipelines
from pyattacker.plugins.store_stats import count_states
from pyattacker.store.writer_lock import WriterLock

from ..sync_behind import SyncBehind, not_durable, wait_durable
from .index import Index, copy
from .journal import (
    Entry,
    FinalsCleared,
    ScanResult,
    decode_payload,
    encode_commit,
    encode_line,
    scan,
)
from .marker import MARKER, is_store_dir
from .notes import append_note, read_notes

__all__ = ["FORMAT_VERSION", "JOURNAL", "LOCK", "MARKER", "JsonlStore", "is_store_dir"]

JOURNAL = "journal.jsonl"
LOCK = "writer.lock"
FORMAT_VERSION = 1
_MARKER_BODY = {"application": "pyattacker", "format": "jsonl", "version": FORMAT_VERSION}

#: (Batch attribute, line tag)
_KINDS = (
    ("runs", "run"),
    ("pipelines", "pipeline"),
    ("progress", "progress"),
    ("resets", "reset"),  # before the tasks and artifacts: the new traversal's rows stay
    ("tasks", "task"),
    ("finals_cleared", "unfinal"),  # before the artifacts: a new final artifact stays marked
    ("artifacts", "artifact"),
    ("attempts", "attempt"),
    ("events", "event"),
    ("handoffs", "handoff"),
    ("logs", "log"),
    ("metrics", "metric"),
    ("metric_points", "point"),
    ("resources", "resource"),
)
_FILTERS: dict[str, tuple[str, ...]] = {
    "pipelines": ("run_id", "pipeline_id", "state"),
    "tasks": ("run_id", "pipeline_id", "state"),
    "attempts": ("run_id", "pipeline_id"),
    "events": ("run_id", "pipeline_id"),
    "artifacts": ("pipeline_id",),
}


def _check_marker(path: str) -> None:
    """Refuse directories that are not ours or are from a newer format (read-only check)."""
    marker = os.path.join(path, MARKER)
    try:
        with open(marker, "rb") as fh:
            body = msgspec.json.decode(fh.read())
    except (OSError, msgspec.DecodeError) as exc:
        raise ConfigError(f"store {path}: unreadable marker {marker}: {exc}") from exc
    if not isinstance(body, dict) or body.get("application") != "pyattacker" or body.get("format") != "jsonl":
        raise ConfigError(f"store {path} is not a pyattacker jsonl store ({marker} names something else)")
    version = body.get("version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ConfigError(
            f"store {path} was written by a newer pyattacker (format {version} > {FORMAT_VERSION}); upgrade"
        )


def _check_new_dir(path: str) -> None:
    if os.path.exists(path) and not os.path.isdir(path):
        raise ConfigError(f"store {path} is not a directory")
    if os.path.isdir(path) and not is_store_dir(path) and os.listdir(path):
        raise ConfigError(
            f"store {path} is not a pyattacker jsonl store (a non-empty directory without {MARKER})"
        )


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_marker(path: str) -> None:
    tmp = os.path.join(path, f".{MARKER}.tmp")
    with open(tmp, "wb") as fh:
        fh.write(msgspec.json.encode(_MARKER_BODY) + b"\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, os.path.join(path, MARKER))
    _fsync_dir(path)


class JsonlStore(StoreBase):
    """A pyattacker store in a directory of JSON Lines. Build it with ``open_writer``/``open_reader``."""

    #: keeps a control ledger and applies ``Batch.resets`` (a ``reset`` line)
    supports_handoffs = True
    keeps_logs = True
    #: ``commit_behind`` may return before the journal is synced (see ``sync_behind``)
    commits_behind = True
    #: keeps every revision of each run's notes (``notes.jsonl``)
    supports_notes = True

    def __init__(self, path: str, *, read_only: bool, lock: WriterLock | None) -> None:
        self.location = path
        self.path = path
        self.journal = os.path.join(path, JOURNAL)
        self.read_only = read_only
        self._lock = lock
        self._mutex = threading.RLock()
        self._index = Index()
        self._fd: int | None = None
        self._end = 0
        self._lines = 0
        self._commits = 0
        self._closed = False
        #: syncs the journal behind the appends (a writer's; opened with the journal)
        self.sync_behind: SyncBehind | None = None
        #: how far this writer synced the journal itself (at open; in each commit without a thread)
        self._synced_to = 0

    # -- opening ----------------------------------------------------------------------------------
    @classmethod
    def open_writer(cls, path: str) -> JsonlStore:
        path = os.path.abspath(os.path.expanduser(path))
        _check_new_dir(path)
        if is_store_dir(path):
            _check_marker(path)
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as exc:
            raise StoreUnavailable(f"store {path}: cannot create directory: {exc.strerror or exc}") from exc
        if not os.access(path, os.W_OK | os.X_OK):
            raise StoreUnavailable(f"store {path}: directory is not writable")
        lock = WriterLock.acquire(os.path.join(path, LOCK), path)
        try:
            store = cls(path, read_only=False, lock=lock)
            store._open_journal_for_writing()
            return store
        except BaseException:
            lock.release()
            raise

    def _open_journal_for_writing(self) -> None:
        if is_store_dir(self.path):
            _check_marker(self.path)
        else:
            _write_marker(self.path)
        created = not os.path.exists(self.journal)
        try:
            self._fd = os.open(self.journal, os.O_RDWR | os.O_CREAT, 0o644)
            if created:
                _fsync_dir(self.path)
        except OSError as exc:
            raise StoreUnavailable(f"store {self.path}: cannot open {self.journal}: {exc}") from exc
        try:
            self._catch_up()
            if os.fstat(self._fd).st_size > self._end:  # an uncommitted or torn tail: never written
                os.ftruncate(self._fd, self._end)
            os.fsync(self._fd)  # what is replayed is durable: the markers from here vouch for it
            self._synced_to = self._end
            syncer = SyncBehind(self.journal)
            try:
                syncer.open()
                self.sync_behind = syncer
            except OSError:  # (cannot open it twice here): every commit syncs inline
                self.sync_behind = None
        except BaseException:
            os.close(self._fd)
            self._fd = None
            raise

    @classmethod
    def open_reader(cls, path: str) -> JsonlStore:
        path = os.path.abspath(os.path.expanduser(path))
        if not os.path.exists(path):
            raise ConfigError(f"store {path} does not exist")
        if not is_store_dir(path):
            raise ConfigError(f"store {path} is not a pyattacker jsonl store (no {MARKER})")
        _check_marker(path)
        store = cls(path, read_only=True, lock=None)
        store._refresh()
        return store

    # -- replay -------------------------------------------------------------------------------------
    def _catch_up(self) -> None:
        """Apply committed batches appended since the last look (readers: a live writer's).

        A reader that finds corruption scans once more from the last batch it applied: a writer
        opening meanwhile may have truncated a crashed writer's torn tail under the scan and
        appended over it, which reads as garbage once; real corruption is found again."""
        assert self._fd is not None
        try:
            self._scan()
        except ConfigError:
            if not self.read_only:
                raise
            self._scan()

    def _scan(self) -> None:
        assert self._fd is not None
        scan(self._fd, self._end, self._lines, self._commits, self.journal, self._apply_replayed)

    def _apply_replayed(self, entries: list[Entry], at: ScanResult) -> None:
        """One committed batch, and the position after it (kept even if the scan fails later)."""
        self._index.apply(entries)
        self._end, self._lines, self._commits = at.committed_end, at.lines, at.commits

    def _refresh(self) -> None:
        """Readers: pick up new commits (the journal may appear after the marker)."""
        if self._closed:
            raise StoreUnavailable(f"store {self.path} is closed")
        if not self.read_only:
            return
        if self._fd is None:
            try:
                fd = os.open(self.journal, os.O_RDONLY)
            except FileNotFoundError:
                return
            except OSError as exc:
                raise StoreUnavailable(f"store {self.path}: cannot read {self.journal}: {exc}") from exc
            if not stat.S_ISREG(os.fstat(fd).st_mode):  # a directory opens read-only, then fails to read
                os.close(fd)
                raise ConfigError(f"store {self.path}: {self.journal} is not a file (a journal is one)")
            self._fd = fd
        if os.fstat(self._fd).st_size > self._end:
            self._catch_up()

    # -- writes -------------------------------------------------------------------------------------
    def _writable_fd(self) -> int:
        if self._closed:
            raise StoreUnavailable(f"store {self.path} is closed")
        if self.read_only or self._fd is None:
            raise StoreUnavailable(f"store {self.path} is open read-only")
        return self._fd

    def commit(self, batch: Batch) -> None:
        """Append the batch and its commit marker, update the index, and return once the journal
        is synced."""
        wait_durable(self.path, self.commit_behind(batch))

    def commit_behind(self, batch: Batch) -> Future[None] | None:
        """``commit`` returning once the batch is appended (and readable), with a future that
        resolves once the journal is synced up to its end (``sync_behind``)."""
        with self._mutex:
            syncer = self.sync_behind
            if syncer is not None and syncer.failed is not None:  # the journal's tail is unknown
                raise StoreUnavailable(
                    f"store {self.path}: a sync of {self.journal} failed earlier ({syncer.failed}):"
                    " nothing more is written"
                )
            self._append_batch(batch)
            if syncer is None:
                try:
                    os.fsync(self._writable_fd())
                except OSError as exc:
                    self._closed = True  # as after a failed sync: the tail's durability is unknown
                    raise not_durable(self.path, exc) from exc
                self._synced_to = self._end
                return None
            return syncer.request(self._end)

    def _append_batch(self, batch: Batch) -> None:
        with self._mutex:
            fd = self._writable_fd()
            next_attempt = len(self._index.attempts.rows) + 1
            next_event = len(self._index.events.rows) + 1
            for i, attempt in enumerate(batch.attempts, next_attempt):
                attempt.attempt_id = i
            for i, event in enumerate(batch.events, next_event):
                event.event_id = i
            for i, handoff in enumerate(batch.handoffs, self._index.handoffs_total + 1):
                handoff.handoff_id = i
            for i, row in enumerate(batch.logs, len(self._index.logs) + 1):
                row.log_id = i
            try:
                data, entries = self._encode(batch)
                self._append(fd, data)
            except BaseException as exc:
                for attempt in batch.attempts:
                    attempt.attempt_id = None
                for event in batch.events:
                    event.event_id = None
                for handoff in batch.handoffs:
                    handoff.handoff_id = None
                for row in batch.logs:
                    row.log_id = None
                if isinstance(exc, Exception):
                    raise StoreUnavailable(
                        f"store {self.path}: commit failed, nothing written ({type(exc).__name__}: {exc})"
                    ) from exc
                raise
            for entry in entries:
                entry.offset += self._end
            self._index.apply(entries)
            self._end += len(data)
            self._lines += len(entries) + 1
            self._commits += 1

    def _encode(self, batch: Batch) -> tuple[bytes, list[Entry]]:
        lines: list[bytes] = []
        entries: list[Entry] = []
        offset = 0
        seen_ops: set[str] = set()
        known_ops = self._index.point_ops
        for attr, tag in _KINDS:
            for rec in getattr(batch, attr):
                if tag == "unfinal":
                    rec = FinalsCleared(pipeline_id=rec)
                if tag == "point":
                    if rec.op_id in known_ops or rec.op_id in seen_ops:
                        continue
                    seen_ops.add(rec.op_id)
                line = encode_line(tag, rec)
                has_payload = tag == "artifact" and rec.payload is not None
                row = copy(rec)
                if tag == "artifact":
                    row.payload = None
                entries.append(Entry(tag, row, offset, len(line), has_payload))
                lines.append(line)
                offset += len(line) + 1
        durable = self.sync_behind.synced_mark if self.sync_behind is not None else 0
        lines.append(encode_commit(self._commits + 1, len(entries), max(durable, self._synced_to)))
        return b"\n".join(lines) + b"\n", entries

    def _append(self, fd: int, data: bytes) -> None:
        try:
            written = 0
            while written < len(data):
                written += os.pwrite(fd, data[written:], self._end + written)
        except OSError:
            try:
                os.ftruncate(fd, self._end)  # leave no partial batch for the next append to follow
            except OSError:
                self._closed = True  # the committed region's end is unknown: refuse further use
            raise

    def interrupt_running(self, run_id: str, now: float) -> int:
        """Rewrite rows left ``running`` by other (dead: we hold the lock) runs as interrupted."""
        with self._mutex:
            self._writable_fd()
            batch = Batch()
            for p in self._index.pipelines.values():
                if p.state == "running" and p.run_id != run_id:
                    batch.pipelines.append(msgspec.structs.replace(p, state="interrupted"))
            for t in self._index.tasks.values():
                if t.state == "running" and t.run_id != run_id:
                    batch.tasks.append(msgspec.structs.replace(t, state="interrupted"))
            for r in self._index.runs.values():
                if r.status == "running" and r.run_id != run_id:
                    batch.runs.append(
                        msgspec.structs.replace(r, status="interrupted", ended_at=r.ended_at or now)
                    )
            if len(batch):
                self.commit(batch)
            return len(batch.pipelines)

    # -- reads --------------------------------------------------------------------------------------
    def _hydrated(self, row: ArtifactRecord) -> ArtifactRecord:
        where = self._index.artifact_lines.get(row.artifact_id)
        if where is None or self._fd is None:
            return copy(row)
        offset, length = where
        line = os.pread(self._fd, length, offset)
        if len(line) != length:
            raise StoreUnavailable(f"store {self.path}: {self.journal} is shorter than its index")
        try:
            full = decode_payload(line)
        except msgspec.DecodeError as exc:  # the replay reads artifact lines without their payload
            raise CorruptRow(
                f"{self.journal}, artifact {row.artifact_id!r} (the line at byte {offset}): {exc}", self.path
            ) from None
        full.is_final = row.is_final  # the index knows of a later unmarking (``unfinal`` lines)
        return full

    def lookup_pipelines(self, ids: Sequence[str]) -> dict[str, PipelineRecord]:
        with self._mutex:
            self._refresh()
            rows = self._index.pipelines
            return {pid: copy(rows[pid]) for pid in ids if pid in rows}

    def get_artifact(self, pipeline_id: str, seq: int) -> ArtifactRecord | None:
        with self._mutex:
            self._refresh()
            row = self._index.artifacts.get(f"{pipeline_id}:{seq}")
            return None if row is None else self._hydrated(row)

    def handoffs(self, pipeline_id: str) -> list[HandoffRecord]:
        """The pipeline's control ledger, oldest first."""
        with self._mutex:
            self._refresh()
            return [copy(h) for h in self._index.ledgers.get(pipeline_id, ())]

    def logs(
        self,
        *,
        run_id: str | None = None,
        pipeline_id: str | None = None,
        task: str | None = None,
        after: int | None = None,
        limit: int = 1000,
    ) -> list[LogRecord]:
        with self._mutex:
            self._refresh()
            rows = self._index.logs
            return select_logs(rows[max(0, after or 0) :], run_id, pipeline_id, task, after, limit)

    def count_handoffs(self, run_id: str | None = None) -> int:
        """Handoffs committed by ``run_id`` (restarts of a traversal are not counted)."""
        return sum(self.handoffs_by_operation(run_id).values())

    def handoffs_by_operation(self, run_id: str | None = None) -> dict[str, int]:
        """``{operation: count}`` of the handoffs of ``run_id`` (None: every run)."""
        with self._mutex:
            self._refresh()
            out: dict[str, int] = {}
            for run, ops in self._index.jumps_by_run.items():
                if run_id is None or run == run_id:
                    for op, count in ops.items():
                        out[op] = out.get(op, 0) + count
            return dict(sorted(out.items()))

    def pipeline_counts(self, run_id: str | None = None) -> dict[str, int]:
        """``{state: count}`` of the pipeline rows of ``run_id``, counted in the index the
        store keeps in memory anyway (no row copied)."""
        with self._mutex:
            self._refresh()
            return count_states(self._index.pipelines.values(), run_id)

    def final_artifacts(self, ids: Sequence[str]) -> dict[str, ArtifactRecord]:
        """``{pipeline_id: final artifact}`` for those of ``ids`` that have one (the first marked
        final in seq order), payload read back: ``export --rows results`` reads only these
        instead of decoding every artifact of every pipeline (optional method)."""
        with self._mutex:
            self._refresh()
            index = self._index
            out: dict[str, ArtifactRecord] = {}
            for pid in ids:
                marked = [index.artifacts[a] for a in index.finals.get(pid, ()) if a in index.artifacts]
                if marked:
                    out[pid] = self._hydrated(min(marked, key=lambda a: a.seq))
            return out

    def get_run(self, run_id: str) -> RunRecord | None:
        with self._mutex:
            self._refresh()
            row = self._index.runs.get(run_id)
            return None if row is None else copy(row)

    def run_note(self, run_id: str) -> NoteRecord | None:
        return read_notes(self.path).get(run_id) or config_note(self.get_run(run_id))

    def run_notes(self) -> dict[str, NoteRecord]:
        written = read_notes(self.path)
        found = ((r.run_id, written.get(r.run_id) or config_note(r)) for r in self.runs())
        return {run_id: note for run_id, note in found if note is not None}

    def write_note(
        self, run_id: str, text: str, *, expected_revision: int | None, author: str, now: float
    ) -> NoteRecord:
        with self._mutex:
            self._writable_fd()
            run = self._note_run(run_id)
            written = read_notes(self.path).get(run_id)
            current = written or config_note(run)
            note = next_note(self.path, run_id, current, text, expected_revision, author, now)
            # the config's notes become a line of their own, so every revision is in the file
            append_note(self.path, [note] if written or current is None else [current, note])
            return note

    def runs(self) -> list[RunRecord]:
        with self._mutex:
            self._refresh()
            rows = sorted(self._index.runs.values(), key=lambda r: (r.started_at, r.run_id))
            return [copy(r) for r in rows]

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
        if kind not in PAGE_KINDS:
            raise ValueError(f"unknown row kind {kind!r}; expected one of {', '.join(PAGE_KINDS)}")
        if after is not None and len(after) != len(PAGE_KINDS[kind]):
            raise ValueError(f"after for {kind} must be a tuple of {', '.join(PAGE_KINDS[kind])}")
        if limit <= 0:
            return []
        given = {"run_id": run_id, "pipeline_id": pipeline_id, "state": state}
        filters = {f: given[f] for f in _FILTERS[kind] if given[f] is not None}
        with self._mutex:
            self._refresh()
            index = self._index
            if kind in ("attempts", "events"):
                appended = index.attempts if kind == "attempts" else index.events
                start = 0 if after is None else int(after[0])
                rows = appended.page(run_id, pipeline_id, max(0, start), limit)
                return [copy(r) for r in rows]
            rows = index.page_keyed(kind, filters, after, limit)
            if kind == "artifacts":
                return [self._hydrated(r) for r in rows]
            return [copy(r) for r in rows]

    def metrics(self, run_id: str | None = None, pipeline_id: str | None = None) -> list[MetricRecord]:
        with self._mutex:
            self._refresh()
            rows = [
                m
                for m in self._index.metrics.values()
                if (run_id is None or m.run_id == run_id)
                and (pipeline_id is None or m.pipeline_id == pipeline_id)
            ]
            return [copy(m) for m in sorted(rows, key=lambda m: (m.run_id, m.pipeline_id, m.name))]

    def metric_points(
        self, run_id: str, pipeline_id: str, key: str | None = None, after_step: int = -1, limit: int = 1000
    ) -> list[MetricPoint]:
        with self._mutex:
            self._refresh()
            rows = [
                p
                for p in self._index.points
                if p.run_id == run_id
                and p.pipeline_id == pipeline_id
                and (key is None or p.key == key)
                and p.step > after_step
            ]
            rows.sort(key=lambda p: (p.step, p.key))
            return [copy(p) for p in rows[: max(0, limit)]]

    def resources(self, run_id: str | None = None) -> list[ResourceRecord]:
        with self._mutex:
            self._refresh()
            rows = [r for r in self._index.resources.values() if run_id is None or r.run_id == run_id]
            return [copy(r) for r in sorted(rows, key=lambda r: (r.pool, r.resource_id))]

    def find_pipelines(
        self, query: PipelineQuery, after: tuple[Any, Any] | None = None, limit: int = 50
    ) -> list[PipelineRecord]:
        """Filtered and ordered over the index's rows, keeping ``limit`` of them."""
        with self._mutex:
            self._refresh()
            found = select_pipelines(self._index.pipelines.values(), query, after, limit)
            return [copy(p) for p in found]

    def attempt_timeline(self, run_id: str | None, origin: float, width: float) -> list[TimeBucket]:
        with self._mutex:
            self._refresh()
            rows = [
                (a.attempt_id or 0, a.ended_at, a.duration_ms, a.outcome)
                for a in self._index.attempts.rows
                if run_id is None or a.run_id == run_id
            ]
        return bucket_attempts(rows, origin, width)

    def close(self) -> None:
        with self._mutex:
            self._closed = True
            if self.sync_behind is not None:
                self.sync_behind.stop()  # after the syncs requested so far
            fd, self._fd = self._fd, None
            try:
                if fd is not None:
                    os.close(fd)
            finally:
                if self._lock is not None:
                    self._lock.release()

    def __enter__(self) -> JsonlStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "read-only" if self.read_only else "writer"
        return f"JsonlStore({self.path!r}, {mode})"
