"""``S3Store``: a run store under ``s3://bucket/prefix``, one immutable segment object per commit.

The object layout (the package README draws it):

* ``<prefix>/store.json``: a marker the first writer creates (a reader of a prefix without one
  is told the store does not exist);
* ``<prefix>/writer.lease``: the one-writer lease (``lease.py``);
* ``<prefix>/segments/<12-digit number>.seg``: one per commit, a msgspec-msgpack ``Segment``,
  written once with ``If-None-Match: *``. A commit is ONE PUT (the kernel's recorder groups a
  run's checkpoints into commit batches), durable when S3 acknowledges it; a failed PUT leaves
  nothing a reader could see half of.

Opening replays the segments in order into rows held in memory (``rows.Rows``); a writer then
appends, a reader lists the segments after the last one it applied before every read, so it
follows a running writer without ever talking to it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from pyattacker.errors import ConfigError, StoreUnavailable
from pyattacker.model import (
    AttemptRecord,
    Batch,
    EventRecord,
    MetricPoint,
    MetricRecord,
    PipelineRecord,
    ResourceRecord,
    RunRecord,
)
from pyattacker.plugins.api import StoreBase
from pyattacker_store_s3.client import is_missing, is_precondition_failed, make_client, split_url
from pyattacker_store_s3.lease import DEFAULT_TTL, S3Lease
from pyattacker_store_s3.rows import FORMAT, Rows, decode_segment, encode_segment, segment_of

__all__ = ["S3Store"]

OPTIONS = ("endpoint_url", "region", "profile", "lease_ttl")
SEGMENTS = "segments/"

#: each page kind's order (docs/stores.md, "Page orders": the last key is unique)
_ORDER: dict[str, Callable[[Any], tuple[Any, ...]]] = {
    "pipelines": lambda r: (r.created_at, r.pipeline_id),
    "tasks": lambda r: (r.pipeline_id, r.seq, r.task_run_id),
    "attempts": lambda r: (r.attempt_id,),
    "events": lambda r: (r.event_id,),
    "artifacts": lambda r: (r.pipeline_id, r.seq, r.artifact_id),
}


def _copies(rows: list[Any]) -> list[Any]:
    """Deep copies (a caller that changes a row it read must not change the store)."""
    if not rows:
        return rows
    copied: list[Any] = msgspec.msgpack.decode(encode_segment(rows), type=list[type(rows[0])])  # type: ignore[misc]
    return copied


class S3Store(StoreBase):
    """A store under an S3 prefix (see the module docstring)."""

    def __init__(self, location: str, *, read_only: bool = False, client: Any = None) -> None:
        self.location = location
        self.read_only = read_only
        try:
            self.bucket, self.prefix, options = split_url(location)
        except ValueError as exc:
            raise ConfigError(f"store {location!r}: {exc}") from None
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise ConfigError(
                f"store {location!r}: unknown option(s) {', '.join(unknown)} (known: {', '.join(OPTIONS)})"
            )
        try:
            ttl = float(options.get("lease_ttl", DEFAULT_TTL))
        except ValueError:
            raise ConfigError(f"store {location!r}: lease_ttl must be a number of seconds") from None
        self.client = client or make_client(
            endpoint_url=options.get("endpoint_url"),
            region=options.get("region"),
            profile=options.get("profile"),
        )
        self.rows = Rows()
        self._last_key = ""  # the last segment applied
        self._next = 1  # the number of the next segment a writer writes
        self._unsure: int | None = None  # a segment whose PUT failed without an answer
        self._lease: S3Lease | None = None
        self._closed = False
        if read_only:
            self._exists_or_fail()
            self._refresh()
            return
        try:
            self._create_marker()
            self._lease = S3Lease.acquire(self.client, self.bucket, self._key("writer.lease"), location, ttl)
            self._refresh()
        except BaseException as exc:
            self.close()  # a lease already taken is handed back
            if isinstance(exc, StoreUnavailable) or not isinstance(exc, Exception):
                raise
            raise self._unavailable("cannot open for writing", exc) from exc

    # -- objects ----------------------------------------------------------------------------------------
    def _key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def _segment_key(self, number: int) -> str:
        return self._key(f"{SEGMENTS}{number:012d}.seg")

    def _unavailable(self, what: str, exc: BaseException) -> StoreUnavailable:
        if is_missing(exc) and "Bucket" in str(exc):
            return StoreUnavailable(f"store {self.location}: bucket {self.bucket!r} does not exist")
        return StoreUnavailable(f"store {self.location}: {what}: {exc}")

    def _create_marker(self) -> None:
        body = msgspec.json.encode({"format": FORMAT, "layout": "pyattacker-store-s3 segments"})
        try:
            self.client.put_object(
                Bucket=self.bucket, Key=self._key("store.json"), Body=body, IfNoneMatch="*"
            )
        except Exception as exc:
            if not is_precondition_failed(exc):  # already there: a store we continue
                raise

    def _exists_or_fail(self) -> None:
        try:
            self.client.head_object(Bucket=self.bucket, Key=self._key("store.json"))
        except Exception as exc:
            if is_missing(exc):
                raise ConfigError(
                    f"store {self.location} does not exist (no s3://{self.bucket}/{self._key('store.json')})"
                ) from None
            raise self._unavailable("cannot read", exc) from exc

    def _refresh(self) -> None:
        """Apply the segments written since the last one applied, in order."""
        try:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket,
                Prefix=self._key(SEGMENTS),
                StartAfter=self._last_key or self._key(SEGMENTS),
            )
            for page in pages:
                for item in page.get("Contents", ()):
                    body = self.client.get_object(Bucket=self.bucket, Key=item["Key"])["Body"].read()
                    self.rows.apply(decode_segment(body))
                    self._last_key = item["Key"]
                    self._next = int(item["Key"].rsplit("/", 1)[-1].split(".")[0]) + 1
        except Exception as exc:
            raise self._unavailable("cannot read its segments", exc) from exc

    def _current(self) -> Rows:
        if self.read_only:
            self._refresh()
        return self.rows

    def _check_writable(self) -> S3Lease:
        if self.read_only:
            raise StoreUnavailable(f"store {self.location} is opened read-only")
        if self._closed or self._lease is None:
            raise StoreUnavailable(f"store {self.location} is closed")
        self._lease.check()
        return self._lease

    # -- required: writes -------------------------------------------------------------------------------
    def commit(self, batch: Batch) -> None:
        """One PUT of the batch as the next segment (``If-None-Match: *``); durable on return.
        ``handoffs`` and ``resets`` are not kept (``supports_handoffs`` is False)."""
        lease = self._check_writable()
        assigned: list[AttemptRecord | EventRecord] = []
        try:
            for attempt in batch.attempts:
                attempt.attempt_id = self.rows.next_attempt_id + len(assigned)
                assigned.append(attempt)
            for i, event in enumerate(batch.events):
                event.event_id = self.rows.next_event_id + i
                assigned.append(event)
            try:
                data = encode_segment(segment_of(batch, lease.token))
            except Exception as exc:
                raise StoreUnavailable(f"store {self.location}: commit failed: {exc}") from exc
            self._write(data, lease)
        except BaseException:
            for row in assigned:  # the batch may be committed again: hand back unnumbered rows
                if isinstance(row, AttemptRecord):
                    row.attempt_id = None
                else:
                    row.event_id = None
            raise

    def _write(self, data: bytes, lease: S3Lease) -> None:
        if self._unsure is not None:
            self._settle(lease)
        number = self._next
        key = self._segment_key(number)
        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=data, IfNoneMatch="*")
        except Exception as exc:
            if is_precondition_failed(exc):
                lease.lost = f"segment {number} was written by another writer (this one lost its lease)"
                raise StoreUnavailable(f"store {self.location}: {lease.lost}") from exc
            self._unsure = number  # the PUT may have landed after all: the next commit looks
            raise self._unavailable("commit failed (the object store did not acknowledge it)", exc) from exc
        self.rows.apply(decode_segment(data))
        self._last_key, self._next = key, number + 1

    def _settle(self, lease: S3Lease) -> None:
        """After a PUT without an answer: adopt the segment if it landed (it is ours)."""
        number = self._unsure
        assert number is not None
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=self._segment_key(number))["Body"].read()
        except Exception as exc:
            if not is_missing(exc):
                raise self._unavailable("cannot reach the object store", exc) from exc
            self._unsure = None
            return
        seg = decode_segment(body)
        if seg.writer != lease.token:
            lease.lost = f"segment {number} was written by another writer (this one lost its lease)"
            raise StoreUnavailable(f"store {self.location}: {lease.lost}")
        self.rows.apply(seg)
        self._last_key, self._next, self._unsure = self._segment_key(number), number + 1, None

    def interrupt_running(self, run_id: str, now: float) -> int:
        """``running`` rows of other runs become ``interrupted`` (one segment; none when nothing
        changes). Holding the lease proves whoever wrote them is gone."""
        lease = self._check_writable()
        seg, changed = self.rows.interrupted(run_id, now)
        if seg.pipelines or seg.tasks or seg.runs:
            seg.writer = lease.token
            self._write(encode_segment(seg), lease)
        return changed

    # -- required: reads -----------------------------------------------------------------------------------
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
        if kind not in _ORDER:
            raise ValueError(f"unknown row kind {kind!r} (one of {', '.join(_ORDER)})")
        key = _ORDER[kind]
        found = [
            r
            for r in self._current().table(kind)
            if (pipeline_id is None or r.pipeline_id == pipeline_id)
            and (run_id is None or kind == "artifacts" or r.run_id == run_id)
            and (state is None or kind not in ("pipelines", "tasks") or r.state == state)
            and (after is None or key(r)[: len(after)] > tuple(after))
        ]
        found.sort(key=key)
        return _copies(found[:limit])

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

    # -- faster optional reads (one listing for many ids) ---------------------------------------------------
    def lookup_pipelines(self, ids: Sequence[str]) -> dict[str, PipelineRecord]:
        rows = self._current().pipelines
        found = [rows[pid] for pid in dict.fromkeys(ids) if pid in rows]
        return {p.pipeline_id: p for p in _copies(found)}

    # -- lifecycle ----------------------------------------------------------------------------------------
    def close(self) -> None:
        """Release the lease (idempotent); every commit is already in the object store."""
        self._closed = True
        lease, self._lease = self._lease, None
        if lease is not None:
            lease.release()

    def __repr__(self) -> str:
        return f"<S3Store {self.location!r}{' read-only' if self.read_only else ''}>"
