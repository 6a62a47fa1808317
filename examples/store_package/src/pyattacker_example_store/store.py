"""``SnapshotStore``: every row of a store in ONE file, rewritten atomically on each commit.

The folder holds two files:

* ``snapshot.msgpack``: a msgspec-msgpack ``Snapshot`` (lists of the record types). A commit
  builds the next snapshot from a *copy* of the current rows, writes it to a temporary file,
  fsyncs it, ``os.replace``-s it over the old one and fsyncs the folder. So a reader sees the old
  snapshot or the new one, never half of one, and a commit that raises leaves nothing behind.
* ``writer.lock``: ``pyattacker.store.writer_lock.WriterLock``, the one-writer rule. Holding it
  also proves that ``running`` rows left in the snapshot belong to a dead process, which is what
  makes ``interrupt_running`` safe.

A read-only store (a report, ``watch``, ``serve`` beside a running writer) loads the snapshot
again whenever the file changed, so it follows the writer without any lock.

Rewriting every row on every commit is O(rows) per checkpoint: fine for an example and for
small runs, not for millions of pipelines. It keeps the store obviously correct, which is the
point: only the seven required methods are written, every other read is ``StoreBase``'s default,
and the rows are kept by ``RowSet`` (the rules of applying a batch are written once, in pyattacker).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import Any

import msgspec

from pyattacker.errors import ConfigError, StoreUnavailable
from pyattacker.model import (
    ArtifactRecord,
    AttemptRecord,
    Batch,
    EventRecord,
    MetricPoint,
    MetricRecord,
    PipelineRecord,
    ResourceRecord,
    RunRecord,
    TaskRecord,
)
from pyattacker.plugins.api import RowSet, StoreBase
from pyattacker.store.writer_lock import WriterLock
from pyattacker_example_store.plugin import SNAPSHOT_FILE

__all__ = ["Snapshot", "SnapshotStore"]

LOCK_FILE = "writer.lock"
FORMAT = 1


class Snapshot(msgspec.Struct, kw_only=True):
    """What the file holds: every row, plus the counters that number appended rows."""

    format: int = FORMAT
    next_attempt_id: int = 1
    next_event_id: int = 1
    runs: list[RunRecord] = []
    pipelines: list[PipelineRecord] = []
    tasks: list[TaskRecord] = []
    artifacts: list[ArtifactRecord] = []
    attempts: list[AttemptRecord] = []
    events: list[EventRecord] = []
    metrics: list[MetricRecord] = []
    metric_points: list[MetricPoint] = []
    resources: list[ResourceRecord] = []


_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(Snapshot).decode


def _rows(snap: Snapshot) -> RowSet:
    """The rows of one snapshot, keyed for upserts (a ``RowSet`` does the keeping). Built fresh
    from the file's bytes, so a commit can change it freely and throw it away if anything fails."""
    rows = RowSet()
    saved = Batch()
    saved.runs, saved.pipelines, saved.tasks = snap.runs, snap.pipelines, snap.tasks
    saved.artifacts, saved.attempts, saved.events = snap.artifacts, snap.attempts, snap.events
    saved.metrics, saved.metric_points, saved.resources = snap.metrics, snap.metric_points, snap.resources
    rows.apply(saved)  # stored rows are numbered already: nothing is numbered here
    rows.next_attempt_id = max(rows.next_attempt_id, snap.next_attempt_id)
    rows.next_event_id = max(rows.next_event_id, snap.next_event_id)
    return rows


def _snapshot(rows: RowSet) -> Snapshot:
    return Snapshot(
        next_attempt_id=rows.next_attempt_id,
        next_event_id=rows.next_event_id,
        runs=list(rows.runs.values()),
        pipelines=list(rows.pipelines.values()),
        tasks=list(rows.tasks.values()),
        artifacts=list(rows.artifacts.values()),
        attempts=rows.attempts,
        events=rows.events,
        metrics=list(rows.metrics.values()),
        metric_points=rows.metric_points,
        resources=list(rows.resources.values()),
    )


def _copies(rows: list[Any]) -> list[Any]:
    """Deep copies of ``rows`` (all of one type): a caller that changes a row it read must not
    change the store (the contract suite checks it), and msgpack round trips are cheap."""
    if not rows:
        return rows
    copied: list[Any] = msgspec.msgpack.decode(_encode(rows), type=list[type(rows[0])])  # type: ignore[misc]
    return copied


class SnapshotStore(StoreBase):
    """A store in a folder: one snapshot file, one writer (see the module docstring)."""

    def __init__(self, location: str, *, folder: str, read_only: bool = False) -> None:
        self.location = location
        self.read_only = read_only
        self.folder, _, options = folder.partition("?")
        if options:  # it takes none: an option the user believes set must not be dropped in silence
            raise ConfigError(f"store {location!r}: unknown option(s) {options!r} (this store takes none)")
        if not self.folder:
            raise ConfigError(f"store {location!r}: no folder after the scheme")
        self.path = os.path.join(self.folder, SNAPSHOT_FILE)
        self._lock: WriterLock | None = None
        self._seen: tuple[int, int, int] | None = None  # (inode, size, mtime_ns) of what we loaded
        self._data = b""  # the bytes of the snapshot the rows came from
        if read_only:
            self._rows = self._load()  # a missing store is an error for a reader
            return
        try:
            os.makedirs(self.folder, exist_ok=True)
        except OSError as exc:
            raise StoreUnavailable(f"store {location}: cannot create folder {self.folder}: {exc}") from exc
        self._lock = WriterLock.acquire(os.path.join(self.folder, LOCK_FILE), location)
        try:
            if os.path.exists(self.path):
                self._rows = self._load()
            else:  # write an empty snapshot now, so a reader can open the store before the first commit
                self._data = _encode(Snapshot())
                self._write(self._data)
                self._rows = _rows(Snapshot())
        except BaseException:
            self.close()
            raise

    # -- the file -------------------------------------------------------------------------------------
    def _load(self) -> RowSet:
        try:
            with open(self.path, "rb") as f:
                st = os.fstat(f.fileno())
                data = f.read()
            rows = _rows(_decode(data))
        except FileNotFoundError as exc:
            raise ConfigError(f"store {self.location} does not exist (no {self.path})") from exc
        except (OSError, msgspec.DecodeError) as exc:
            raise StoreUnavailable(f"store {self.location}: cannot read {self.path}: {exc}") from exc
        self._seen = (st.st_ino, st.st_size, st.st_mtime_ns)
        if not self.read_only:
            self._data = data
        return rows

    def _write(self, data: bytes) -> None:
        """Temp file, fsync, ``os.replace``, fsync the folder: the old snapshot or the new one."""
        fd, tmp = tempfile.mkstemp(prefix=".snapshot-", suffix=".tmp", dir=self.folder)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        dir_fd = os.open(self.folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)  # the rename itself is durable only once the folder is
        finally:
            os.close(dir_fd)

    def _current(self) -> RowSet:
        """The rows to read: a writer's own; a reader reloads when the file was replaced."""
        if self.read_only:
            try:
                st = os.stat(self.path)
            except OSError as exc:
                raise StoreUnavailable(f"store {self.location}: cannot read {self.path}: {exc}") from exc
            if (st.st_ino, st.st_size, st.st_mtime_ns) != self._seen:
                self._rows = self._load()
        return self._rows

    def _check_writable(self) -> None:
        """Every write raises on a reader or a closed store, even one that would change nothing."""
        if self.read_only:
            raise StoreUnavailable(f"store {self.location} is opened read-only")
        if self._lock is None:
            raise StoreUnavailable(f"store {self.location} is closed")

    def _change(self, apply: Callable[[RowSet], Any]) -> Any:
        """Apply ``apply`` to a copy of the rows and write it; adopt the result only once it is on
        disk. The rows kept are decoded from the bytes written, so they share nothing with the
        caller's batch (a runner may reuse its record objects) and equal what a reader sees."""
        self._check_writable()
        try:
            draft = _rows(_decode(self._data))  # a deep copy of the current rows
            result = apply(draft)
            data = _encode(_snapshot(draft))  # a value msgpack cannot take raises here, before any file
            self._write(data)
            rows = _rows(_decode(data))
        except StoreUnavailable:
            raise
        except Exception as exc:
            raise StoreUnavailable(f"store {self.location}: commit failed: {exc}") from exc
        self._rows, self._data = rows, data
        return result

    # -- required: writes -----------------------------------------------------------------------------
    def commit(self, batch: Batch) -> None:
        """Every row of ``batch`` or none (docs/stores.md, ``commit``). The control ledger is not
        kept (``supports_handoffs`` is False), so ``handoffs`` and ``resets`` are ignored:
        pipelines with control never run on this store. ``finals_cleared`` is applied all the
        same (a pipeline keeps one final artifact; the contract suite checks it on every store)."""
        numbered: list[AttemptRecord | EventRecord] = []

        def apply(rows: RowSet) -> None:
            numbered.extend(rows.apply(batch))

        try:
            self._change(apply)
        except BaseException:
            RowSet.unnumber(numbered)  # the batch may be committed again: hand back unnumbered rows
            raise

    def interrupt_running(self, run_id: str, now: float) -> int:
        """``running`` rows of other runs become ``interrupted``; our writer lock proves that
        whoever wrote them is gone."""
        self._check_writable()
        if not self._stale(run_id, now):
            return 0  # nothing to change: no rewrite

        def apply(draft: RowSet) -> int:
            stale = draft.stale_running(run_id, now)
            draft.apply(stale)
            return len(stale.pipelines)

        changed: int = self._change(apply)
        return changed

    def _stale(self, run_id: str, now: float) -> bool:
        stale = self._current().stale_running(run_id, now)
        return bool(stale.pipelines or stale.tasks or stale.runs)

    # -- required: reads ------------------------------------------------------------------------------
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
        """Keyset paging over the rows in memory: filter, sort by the kind's order, cut."""
        found = self._current().page(
            kind, run_id=run_id, pipeline_id=pipeline_id, state=state, after=after, limit=limit
        )
        return _copies(found)

    def runs(self) -> list[RunRecord]:
        return _copies(self._current().run_rows())

    def metrics(self, run_id: str | None = None, pipeline_id: str | None = None) -> list[MetricRecord]:
        return _copies(self._current().metric_rows(run_id, pipeline_id))

    def metric_points(
        self, run_id: str, pipeline_id: str, key: str | None = None, after_step: int = -1, limit: int = 1000
    ) -> list[MetricPoint]:
        return _copies(self._current().point_rows(run_id, pipeline_id, key, after_step, limit))

    def resources(self, run_id: str | None = None) -> list[ResourceRecord]:
        return _copies(self._current().resource_rows(run_id))

    # -- lifecycle ------------------------------------------------------------------------------------
    def close(self) -> None:
        """Release the writer lock (idempotent); the snapshot on disk is already complete."""
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release()

    def __repr__(self) -> str:
        return f"<SnapshotStore {self.location!r}{' read-only' if self.read_only else ''}>"
