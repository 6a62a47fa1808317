"""Compaction: every ``compact_every`` segments, one object that holds them all.

Opening a store replays its history; with one object per PUT, a long run means tens of
thousands of GETs before the first answer. The writer therefore also writes
``compacted/<first>-<last>.seg`` (12-digit numbers), a msgpack array of every commit part of
segments ``first`` to ``last``, once each run of ``compact_every`` segments is complete and
for what is left when it closes. A reader applies the compacted objects that continue where
it stands and only then the single segments after them, so opening costs one GET per
``compact_every`` segments. The single segments are kept: a reader that listed them before
the compaction still finds them, and a compacted object is only ever a copy (written with
``If-None-Match: *``, so two writers cannot disagree about one).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from pyattacker_store_s3.rows import encode_segment

if TYPE_CHECKING:
    from pyattacker_store_s3.store import S3Store

__all__ = ["COMPACTED", "DEFAULT_EVERY", "Compactor", "apply_compacted", "compacted_range"]

COMPACTED = "compacted/"
DEFAULT_EVERY = 64
_parts = msgspec.msgpack.Decoder(list[msgspec.Raw]).decode


def compacted_name(first: int, last: int) -> str:
    return f"{COMPACTED}{first:012d}-{last:012d}.seg"


def compacted_range(key: str) -> tuple[int, int] | None:
    """``(first, last)`` of a compacted object's key; None for anything else."""
    name = key.rsplit("/", 1)[-1].removesuffix(".seg")
    first, sep, last = name.partition("-")
    if not sep or not first.isdigit() or not last.isdigit():
        return None
    return int(first), int(last)


class Compactor:
    """The writer's side: collects the bodies of the segments it writes, PUTs each full run."""

    def __init__(self, store: S3Store, every: int) -> None:
        self.store, self.every = store, every
        self._first = 0  # the number of the first collected segment
        self._bodies: list[bytes] = []

    def written(self, number: int, body: bytes) -> None:
        """Segment ``number`` is durable: collect it (``due`` once a run of ``every`` is full)."""
        if self.every <= 0:
            return
        if not self._bodies or number != self._first + len(self._bodies):
            self._first, self._bodies = number, []  # a gap (a segment adopted, not written): restart
        self._bodies.append(body)

    @property
    def due(self) -> bool:
        return 0 < self.every <= len(self._bodies)

    def flush(self) -> None:
        """Compact what is collected (two segments or more; one is its own object already)."""
        bodies, self._bodies = self._bodies, []
        if len(bodies) < 2:
            return
        parts = [raw for body in bodies for raw in _parts(body)]
        last = self._first + len(bodies) - 1
        key = self.store._key(compacted_name(self._first, last))
        try:
            self.store.client.put_object(
                Bucket=self.store.bucket, Key=key, Body=encode_segment(parts), IfNoneMatch="*"
            )
        except Exception:  # a copy: not writing it costs later readers GETs, never data
            return


def apply_compacted(store: S3Store, after: str) -> str:
    """Apply the compacted objects that continue from the store's next segment (listed after
    the key ``after``); return the last compacted key looked at."""
    pages = store.client.get_paginator("list_objects_v2").paginate(
        Bucket=store.bucket, Prefix=store._key(COMPACTED), StartAfter=after or store._key(COMPACTED)
    )
    seen = after
    for page in pages:
        for item in page.get("Contents", ()):
            span = compacted_range(item["Key"])
            if span is None:
                continue
            first, last = span
            if first > store._next:
                return seen  # a gap: the single segments come first
            seen = item["Key"]
            if last < store._next:
                continue  # already applied
            if first == store._next:
                body: Any = store.client.get_object(Bucket=store.bucket, Key=item["Key"])["Body"].read()
                store._apply(body, store._segment_key(last), last)
    return seen
