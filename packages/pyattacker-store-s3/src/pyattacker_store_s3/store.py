"""``S3Store``: a run store under ``s3://bucket/prefix``, one immutable segment object per PUT.

The object layout (the package README draws it):

* ``<prefix>/store.json``: a marker the first writer creates (a reader of a prefix without one
  is told the store does not exist);
* ``<prefix>/writer.lease``: the one-writer lease (``lease.py``);
* ``<prefix>/segments/<12-digit number>.seg``: one per PUT, a msgspec-msgpack array of
  ``Segment`` parts (one per commit batch), written once with ``If-None-Match: *``. The
  kernel's recorder groups checkpoints into commit batches and overlaps them
  (``commit_behind``); the batches queued while a PUT is in flight go out together in the next
  one (``writer.py``), each durable when S3 acknowledges its PUT. A failed PUT leaves nothing a
  reader could see half of.

* ``<prefix>/compacted/<first>-<last>.seg``: copies of runs of segments (``compaction.py``).

Opening replays the compacted objects, then the segments after them, in order, into rows held
in memory (``rows.Rows``); a writer then
appends, a reader lists the segments after the last one it applied before every read, so it
follows a running writer without ever talking to it.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any

import msgspec

from pyattacker.errors import ConfigError, StoreUnavailable
from pyattacker.model import (
    Batch,
    MetricPoint,
    MetricRecord,
    PipelineRecord,
    ResourceRecord,
    RunRecord,
)
from pyattacker.plugins.api import StoreBase
from pyattacker_store_s3.client import is_missing, is_precondition_failed, make_client, split_url
from pyattacker_store_s3.compaction import DEFAULT_EVERY, Compactor, apply_compacted
from pyattacker_store_s3.lease import DEFAULT_TTL, S3Lease
from pyattacker_store_s3.rows import FORMAT, Rows, decode_segments, encode_segment
from pyattacker_store_s3.writer import SegmentWriter

__all__ = ["S3Store"]

OPTIONS = ("endpoint_url", "region", "profile", "lease_ttl", "commit_interval_ms", "compact_every")
SEGMENTS = "segments/"


def _copies(rows: list[Any]) -> list[Any]:
    """Deep copies (a caller that changes a row it read must not change the store)."""
    if not rows:
        return rows
    copied: list[Any] = msgspec.msgpack.decode(encode_segment(rows), type=list[type(rows[0])])  # type: ignore[misc]
    return copied


def _number(location: str, options: dict[str, str], name: str, default: float, what: str) -> float:
    """A numeric ``?option``: a ``ConfigError`` naming it when it is not ``what``."""
    try:
        value = float(options.get(name, default))
    except ValueError:
        value = -1.0
    if value < 0 or (value == 0 and name == "lease_ttl"):
        raise ConfigError(f"store {location!r}: {name} must be {what}, got {options.get(name)!r}")
    return value


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
        ttl = _number(location, options, "lease_ttl", DEFAULT_TTL, "a number of seconds > 0")
        interval = _number(location, options, "commit_interval_ms", 0.0, "a number of milliseconds >= 0")
        every = _number(location, options, "compact_every", DEFAULT_EVERY, "a number of segments >= 0")
        self.client = client or make_client(
            endpoint_url=options.get("endpoint_url"),
            region=options.get("region"),
            profile=options.get("profile"),
        )
        self.rows = Rows()
        self._last_key = ""  # the last segment applied
        self._compacted_key = ""  # the last compacted object looked at
        self._compactor = Compactor(self, int(every))
        self._next = 1  # the number of the next segment a writer writes
        self._unsure: int | None = None  # a segment whose PUT failed without an answer
        self._lease: S3Lease | None = None
        self._writer: SegmentWriter | None = None
        self._lock = threading.Lock()  # rows change on the writer thread while reads go on
        self._closed = False
        if read_only:
            self._exists_or_fail()
            self._refresh()
            return
        try:
            self._create_marker()
            self._lease = S3Lease.acquire(self.client, self.bucket, self._key("writer.lease"), location, ttl)
            self._refresh()
            self._writer = SegmentWriter(self, self._lease.token, min_interval_s=interval / 1000.0)
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
        """Apply the segments written since the last one applied, in order: first the
        compacted objects that continue from there, then the single segments after them."""
        try:
            self._compacted_key = apply_compacted(self, self._compacted_key)
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket,
                Prefix=self._key(SEGMENTS),
                StartAfter=self._last_key or self._key(SEGMENTS),
            )
            for page in pages:
                for item in page.get("Contents", ()):
                    body = self.client.get_object(Bucket=self.bucket, Key=item["Key"])["Body"].read()
                    number = int(item["Key"].rsplit("/", 1)[-1].split(".")[0])
                    self._apply(body, item["Key"], number)
        except Exception as exc:
            raise self._unavailable("cannot read its segments", exc) from exc

    @contextmanager
    def _reading(self) -> Iterator[Rows]:
        """The rows to read, held still: a reader first applies what was written since."""
        if self.read_only:
            self._refresh()
        with self._lock:
            yield self.rows

    def _check_writable(self) -> S3Lease:
        if self.read_only:
            raise StoreUnavailable(f"store {self.location} is opened read-only")
        if self._closed or self._lease is None:
            raise StoreUnavailable(f"store {self.location} is closed")
        self._lease.check()
        return self._lease

    # -- required: writes -------------------------------------------------------------------------------
    def commit(self, batch: Batch) -> None:
        """The batch in the next segment PUT (``writer.py``); durable on return. ``handoffs``
        and ``resets`` are not kept (``supports_handoffs`` is False)."""
        self.commit_behind(batch).result()

    def commit_behind(self, batch: Batch) -> Future[None]:
        """Queue the batch for the next segment PUT; the future resolves once S3 acknowledged it."""
        self._check_writable()
        assert self._writer is not None
        return self._writer.submit(batch)

    def put_parts(self, parts: list[bytes]) -> None:
        """PUT ``parts`` as the next segment (``If-None-Match: *``), then apply them (the
        writer thread calls this)."""
        lease = self._check_writable()
        if self._unsure is not None:
            self._settle(lease)
        number = self._next
        key = self._segment_key(number)
        data = encode_segment([msgspec.Raw(p) for p in parts])
        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=data, IfNoneMatch="*")
        except Exception as exc:
            if is_precondition_failed(exc):
                lease.lost = f"segment {number} was written by another writer (this one lost its lease)"
                raise StoreUnavailable(f"store {self.location}: {lease.lost}") from exc
            if self._landed(key, data):  # the answer was lost, not the write: it is durable
                self._apply(data, key, number)
                self._compactor.written(number, data)
                return
            self._unsure = number  # the PUT may still land: the next commit looks
            raise self._unavailable("commit failed (the object store did not acknowledge it)", exc) from exc
        self._apply(data, key, number)
        self._compactor.written(number, data)

    def compact_if_due(self) -> None:
        """Write the compacted object of the last ``compact_every`` segments (``compaction.py``)."""
        if self._compactor.due:
            self._compactor.flush()

    def _landed(self, key: str, data: bytes) -> bool:
        """Whether a PUT whose answer failed stored exactly ``data`` after all (one GET).

        Asked before the commit is reported failed, so a batch whose answer was lost is
        acknowledged rather than handed back (committed again, its history rows would be
        stored twice). Unanswerable (the store is down): False, and ``_settle`` asks again."""
        try:
            body: bytes = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except Exception:
            return False
        return body == data

    def _apply(self, data: bytes, key: str, number: int) -> None:
        segments = decode_segments(data)
        with self._lock:
            for seg in segments:
                self.rows.apply(seg)
            self._last_key, self._next = key, number + 1

    def _settle(self, lease: S3Lease) -> None:
        """After a PUT without an answer: if it landed after all (it is ours), adopt it and fail
        this commit too, so the batches queued meanwhile are numbered again after it."""
        number = self._unsure
        assert number is not None
        key = self._segment_key(number)
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except Exception as exc:
            if not is_missing(exc):
                raise self._unavailable("cannot reach the object store", exc) from exc
            self._unsure = None
            return
        if any(seg.writer != lease.token for seg in decode_segments(body)):
            lease.lost = f"segment {number} was written by another writer (this one lost its lease)"
            raise StoreUnavailable(f"store {self.location}: {lease.lost}")
        self._apply(body, key, number)
        self._unsure = None
        raise StoreUnavailable(
            f"store {self.location}: segment {number}, reported failed, was stored after all; commit again"
        )

    def interrupt_running(self, run_id: str, now: float) -> int:
        """``running`` rows of other runs become ``interrupted`` (one segment; none when nothing
        changes). Holding the lease proves whoever wrote them is gone."""
        lease = self._check_writable()
        assert self._writer is not None
        with self._lock:
            seg, changed = self.rows.interrupted(run_id, now)
        if seg.pipelines or seg.tasks or seg.runs:
            seg.writer = lease.token
            self._writer.submit(None, seg).result()
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
        with self._reading() as rows:
            found = rows.page(
                kind, run_id=run_id, pipeline_id=pipeline_id, state=state, after=after, limit=limit
            )
        return _copies(found)

    def runs(self) -> list[RunRecord]:
        with self._reading() as rows:
            found = rows.run_rows()
        return _copies(found)

    def metrics(self, run_id: str | None = None, pipeline_id: str | None = None) -> list[MetricRecord]:
        with self._reading() as rows:
            found = rows.metric_rows(run_id, pipeline_id)
        return _copies(found)

    def metric_points(
        self, run_id: str, pipeline_id: str, key: str | None = None, after_step: int = -1, limit: int = 1000
    ) -> list[MetricPoint]:
        with self._reading() as rows:
            found = rows.point_rows(run_id, pipeline_id, key, after_step, limit)
        return _copies(found)

    def resources(self, run_id: str | None = None) -> list[ResourceRecord]:
        with self._reading() as rows:
            found = rows.resource_rows(run_id)
        return _copies(found)

    # -- faster optional reads (one listing for many ids) ---------------------------------------------------
    def lookup_pipelines(self, ids: Sequence[str]) -> dict[str, PipelineRecord]:
        with self._reading() as rows:
            found = rows.pipeline_rows(ids)
        return {p.pipeline_id: p for p in _copies(found)}

    # -- lifecycle ----------------------------------------------------------------------------------------
    def close(self) -> None:
        """Release the lease (idempotent); every commit is already in the object store."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()  # what is queued is written first
            if self._lease is not None and not self._lease.lost:
                self._compactor.flush()  # the rest of this writer's segments in one object
        self._closed = True
        lease, self._lease = self._lease, None
        if lease is not None:
            lease.release()

    def __repr__(self) -> str:
        return f"<S3Store {self.location!r}{' read-only' if self.read_only else ''}>"
