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
point: only the seven required methods are written, every other read is ``StoreBase``'s default.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable
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
from pyattacker.plugins.api import PAGE_KINDS, StoreBase, page_of
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


class _Rows:
    """The rows of one snapshot, keyed for upserts. Built fresh from the file's bytes, so a
    commit can change it freely and throw it away if anything fails."""

    def __init__(self, snap: Snapshot) -> None:
        self.next_attempt_id = snap.next_attempt_id
        self.next_event_id = snap.next_event_id
        self.runs = {r.run_id: r for r in snap.runs}
        self.pipelines = {p.pipeline_id: p for p in snap.pipelines}
        self.tasks = {t.task_run_id: t for t in snap.tasks}
        self.artifacts = {a.artifact_id: a for a in snap.artifacts}
        self.attempts = snap.attempts
        self.events = snap.events
        self.metrics = {(m.run_id, m.pipeline_id, m.name): m for m in snap.metrics}
        self.metric_points = snap.metric_points
        self.op_ids = {p.op_id for p in snap.metric_points}
        self.resources = {(r.run_id, r.pool, r.resource_id): r for r in snap.resources}

    def snapshot(self) -> Snapshot:
        return Snapshot(
            next_attempt_id=self.next_attempt_id,
            next_event_id=self.next_event_id,
            runs=list(self.runs.values()),
            pipelines=list(self.pipelines.values()),
            tasks=list(self.tasks.values()),
            artifacts=list(self.artifacts.values()),
            attempts=self.attempts,
            events=self.events,
            metrics=list(self.metrics.values()),
            metric_points=self.metric_points,
            resources=list(self.resources.values()),
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
                self._rows = _Rows(Snapshot())
        except BaseException:
            self.close()
            raise

    # -- the file -------------------------------------------------------------------------------------
    def _load(self) -> _Rows:
        try:
            with open(self.path, "rb") as f:
                st = os.fstat(f.fileno())
                data = f.read()
            rows = _Rows(_decode(data))
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

    def _current(self) -> _Rows:
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

    def _change(self, apply: Callable[[_Rows], Any]) -> Any:
        """Apply ``apply`` to a copy of the rows and write it; adopt the result only once it is on
        disk. The rows kept are decoded from the bytes written, so they share nothing with the
        caller's batch (a runner may reuse its record objects) and equal what a reader sees."""
        self._check_writable()
        try:
            draft = _Rows(_decode(self._data))  # a deep copy of the current rows
            result = apply(draft)
            data = _encode(draft.snapshot())  # a value msgpack cannot take raises here, before any file
            self._write(data)
            rows = _Rows(_decode(data))
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
        assigned: list[AttemptRecord | EventRecord] = []

        def apply(rows: _Rows) -> None:
            for run in batch.runs:
                rows.runs[run.run_id] = run
            for p in batch.pipelines:
                old = rows.pipelines.get(p.pipeline_id)
                rows.pipelines[p.pipeline_id] = (
                    p if old is None else msgspec.structs.replace(p, created_at=old.created_at)
                )
            for prog in batch.progress:
                old = rows.pipelines.get(prog.pipeline_id)
                if old is not None:  # an unknown id is ignored
                    rows.pipelines[prog.pipeline_id] = msgspec.structs.replace(
                        old, cursor=prog.cursor, attempts_total=prog.attempts_total
                    )
            for t in batch.tasks:
                rows.tasks[t.task_run_id] = t
            cleared = set(batch.finals_cleared)  # before this batch's artifacts (see the docstring)
            for a in [a for a in rows.artifacts.values() if a.pipeline_id in cleared and a.is_final]:
                rows.artifacts[a.artifact_id] = msgspec.structs.replace(a, is_final=False)
            for a in batch.artifacts:
                rows.artifacts[a.artifact_id] = a
            for attempt in batch.attempts:
                attempt.attempt_id = rows.next_attempt_id
                rows.next_attempt_id += 1
                assigned.append(attempt)
                rows.attempts.append(attempt)
            for event in batch.events:
                event.event_id = rows.next_event_id
                rows.next_event_id += 1
                assigned.append(event)
                rows.events.append(event)
            for m in batch.metrics:
                rows.metrics[(m.run_id, m.pipeline_id, m.name)] = m
            for point in batch.metric_points:
                if point.op_id not in rows.op_ids:  # appends are idempotent by op_id
                    rows.op_ids.add(point.op_id)
                    rows.metric_points.append(point)
            for r in batch.resources:
                rows.resources[(r.run_id, r.pool, r.resource_id)] = r

        try:
            self._change(apply)
        except BaseException:
            for row in assigned:  # the batch may be committed again: hand back unnumbered rows
                if isinstance(row, AttemptRecord):
                    row.attempt_id = None
                else:
                    row.event_id = None
            raise

    def interrupt_running(self, run_id: str, now: float) -> int:
        """``running`` rows of other runs become ``interrupted``; our writer lock proves that
        whoever wrote them is gone."""

        def stale(rows: Iterable[Any], state: str = "state") -> list[Any]:
            return [r for r in rows if getattr(r, state) == "running" and r.run_id != run_id]

        self._check_writable()
        rows = self._current()
        if not any(
            (stale(rows.pipelines.values()), stale(rows.tasks.values()), stale(rows.runs.values(), "status"))
        ):
            return 0  # nothing to change: no rewrite

        def apply(draft: _Rows) -> int:
            pipelines = stale(draft.pipelines.values())
            for p in pipelines:
                draft.pipelines[p.pipeline_id] = msgspec.structs.replace(p, state="interrupted")
            for t in stale(draft.tasks.values()):
                draft.tasks[t.task_run_id] = msgspec.structs.replace(t, state="interrupted")
            for r in stale(draft.runs.values(), "status"):
                ended = now if r.ended_at is None else r.ended_at
                draft.runs[r.run_id] = msgspec.structs.replace(r, status="interrupted", ended_at=ended)
            return len(pipelines)

        changed: int = self._change(apply)
        return changed

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
        if kind not in PAGE_KINDS:
            raise ValueError(f"unknown row kind {kind!r} (one of {', '.join(PAGE_KINDS)})")
        rows = self._current()
        table: Iterable[Any] = {
            "pipelines": rows.pipelines.values(),
            "tasks": rows.tasks.values(),
            "attempts": rows.attempts,
            "events": rows.events,
            "artifacts": rows.artifacts.values(),
        }[kind]
        found = page_of(
            kind, table, run_id=run_id, pipeline_id=pipeline_id, state=state, after=after, limit=limit
        )
        return _copies(found)

    def runs(self) -> list[RunRecord]:
        return _copies(sorted(self._current().runs.values(), key=lambda r: (r.started_at, r.run_id)))

    def metrics(self, run_id: str | None = None, pipeline_id: str | None = None) -> list[MetricRecord]:
        found = [
            m
            for m in self._current().metrics.values()
            if (run_id is None or m.run_id == run_id)
            and (pipeline_id is None or m.pipeline_id == pipeline_id)
        ]
        return _copies(sorted(found, key=lambda m: (m.run_id, m.pipeline_id, m.name)))

    def metric_points(
        self, run_id: str, pipeline_id: str, key: str | None = None, after_step: int = -1, limit: int = 1000
    ) -> list[MetricPoint]:
        found = [
            p
            for p in self._current().metric_points
            if p.run_id == run_id
            and p.pipeline_id == pipeline_id
            and (key is None or p.key == key)
            and p.step > after_step
        ]
        found.sort(key=lambda p: (p.step, p.key))
        return _copies(found[:limit])

    def resources(self, run_id: str | None = None) -> list[ResourceRecord]:
        found = [r for r in self._current().resources.values() if run_id is None or r.run_id == run_id]
        return _copies(sorted(found, key=lambda r: (r.pool, r.resource_id)))

    # -- lifecycle ------------------------------------------------------------------------------------
    def close(self) -> None:
        """Release the writer lock (idempotent); the snapshot on disk is already complete."""
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.release()

    def __repr__(self) -> str:
        return f"<SnapshotStore {self.location!r}{' read-only' if self.read_only else ''}>"
