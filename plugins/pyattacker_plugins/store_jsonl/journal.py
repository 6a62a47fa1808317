"""The journal file format: one JSON array per line, batches closed by a commit marker.

A record line is ``["<kind>", {record}]``; a batch ends with ``["commit", <n>, <lines>]``. An
unknown kind inside the committed region is refused like corruption, never skipped: skipping a
``reset`` line, say, would show rows the writer deleted. Only
lines followed by their commit marker count: a crash mid-append leaves lines without a marker
(or a torn last line without its newline), and those are treated as never written. A line
inside the committed region that does not parse is corruption and is reported by line number.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import msgspec

from pyattacker.errors import ConfigError
from pyattacker.model import (
    ArtifactRecord,
    AttemptRecord,
    EventRecord,
    HandoffRecord,
    MetricPoint,
    MetricRecord,
    PipelineProgress,
    PipelineRecord,
    PipelineReset,
    ResourceRecord,
    RunRecord,
    TaskRecord,
)

__all__ = [
    "COMMIT_TAG",
    "TAGS",
    "Entry",
    "FinalsCleared",
    "ScanResult",
    "decode_payload",
    "encode_commit",
    "encode_line",
    "scan",
]

COMMIT_TAG = "commit"
_COMMIT_PREFIX = b'["commit",'
_CHUNK = 8 << 20


class _ArtifactMeta(msgspec.Struct, kw_only=True, gc=False):
    """An artifact line read without decoding its (possibly large) base64 payload."""

    artifact_id: str
    pipeline_id: str
    task_name: str
    seq: int
    type_name: str
    codec: str
    digest: str
    size: int
    created_at: float
    payload: msgspec.Raw = msgspec.Raw(b"null")
    is_final: bool = False
    blob_ref: str | None = None


class FinalsCleared(msgspec.Struct, kw_only=True, gc=False):
    """``Batch.finals_cleared`` as a line: the pipeline's earlier final artifacts are unmarked."""

    pipeline_id: str


#: line tag -> record type
TAGS: dict[str, type[Any]] = {
    "unfinal": FinalsCleared,
    "reset": PipelineReset,
    "handoff": HandoffRecord,
    "run": RunRecord,
    "pipeline": PipelineRecord,
    "progress": PipelineProgress,
    "task": TaskRecord,
    "artifact": ArtifactRecord,
    "attempt": AttemptRecord,
    "event": EventRecord,
    "metric": MetricRecord,
    "point": MetricPoint,
    "resource": ResourceRecord,
}


def _line_decoder(cls: type[Any]) -> msgspec.json.Decoder[Any]:
    row_type = _ArtifactMeta if cls is ArtifactRecord else cls
    return msgspec.json.Decoder(tuple[str, row_type])  # type: ignore[valid-type]


_DECODERS: dict[bytes, msgspec.json.Decoder[Any]] = {
    tag.encode(): _line_decoder(cls) for tag, cls in TAGS.items()
}
_COMMIT_DECODER = msgspec.json.Decoder(tuple[str, int, int])
_FULL_ARTIFACT = msgspec.json.Decoder(tuple[str, ArtifactRecord])
_encoder = msgspec.json.Encoder()


class Entry(msgspec.Struct, gc=False):
    """One committed record line: its tag, the record, and where the line sits in the file."""

    tag: str
    record: Any
    offset: int
    length: int
    has_payload: bool = False


def encode_line(tag: str, record: Any) -> bytes:
    return _encoder.encode((tag, record))


def encode_commit(number: int, lines: int) -> bytes:
    return _encoder.encode((COMMIT_TAG, number, lines))


def decode_payload(line: bytes) -> ArtifactRecord:
    """The full artifact (payload included) from its journal line."""
    return _FULL_ARTIFACT.decode(line)[1]


def _decode_record(line: bytes, offset: int) -> Entry:
    end = line.find(b'"', 2)
    decoder = _DECODERS.get(line[2:end]) if line[:2] == b'["' and end > 2 else None
    if decoder is None:
        if line[:2] == b'["' and end > 2 and line[2:end].isalpha():
            kind = line[2:end].decode("ascii", "replace")
            raise ValueError(f"unknown line kind {kind!r}: a newer pyattacker may have written it; upgrade")
        raise ValueError("unknown line kind")
    tag, record = decoder.decode(line)
    if isinstance(record, _ArtifactMeta):
        has_payload = bytes(record.payload) != b"null"
        record = ArtifactRecord(
            artifact_id=record.artifact_id,
            pipeline_id=record.pipeline_id,
            task_name=record.task_name,
            seq=record.seq,
            type_name=record.type_name,
            codec=record.codec,
            digest=record.digest,
            size=record.size,
            created_at=record.created_at,
            is_final=record.is_final,
            blob_ref=record.blob_ref,
        )
        return Entry(tag, record, offset, len(line), has_payload)
    return Entry(tag, record, offset, len(line))


def _lines(fd: int, start: int) -> Iterator[tuple[int, bytes]]:
    """``(offset, line)`` for every newline-terminated line from ``start`` (a torn tail is skipped)."""
    offset = start
    carry = b""
    while True:
        chunk = os.pread(fd, _CHUNK, offset + len(carry))
        if not chunk:
            return
        data = carry + chunk
        pos = 0
        while True:
            nl = data.find(b"\n", pos)
            if nl < 0:
                break
            yield offset + pos, data[pos:nl]
            pos = nl + 1
        offset += pos
        carry = data[pos:]


class ScanResult(msgspec.Struct):
    committed_end: int
    lines: int
    commits: int


def scan(fd: int, start: int, first_line: int, commits: int, name: str, apply: Any) -> ScanResult:
    """Apply every committed batch from byte ``start``; return where the committed region ends.

    ``apply(entries, at)`` is called once per committed batch, ``at`` the ``ScanResult`` just
    after it: a scan that raises part-way (a failed read, a tail truncated under a reader) has
    then recorded how far it got, so the next scan never applies a batch twice. ``first_line``
    and ``commits`` are the counts already consumed (for line numbers and the commit sequence
    check).
    """
    pending: list[Entry] = []
    bad: tuple[int, str] | None = None
    end = start
    line_no = first_line
    committed_lines = first_line
    for offset, line in _lines(fd, start):
        line_no += 1
        if line.startswith(_COMMIT_PREFIX):
            count = _commit_count(line)
            if bad is not None:
                raise ConfigError(
                    f"store {name}: line {bad[0]} is corrupt ({bad[1]}) inside a committed batch"
                )
            if count is None or count != len(pending):
                raise ConfigError(f"store {name}: line {line_no} is a corrupt commit marker")
            commits += 1
            end = offset + len(line) + 1
            committed_lines = line_no
            apply(pending, ScanResult(end, committed_lines, commits))
            pending = []
            continue
        if bad is not None:
            continue
        try:
            pending.append(_decode_record(line, offset))
        except (msgspec.DecodeError, ValueError) as exc:
            bad = (line_no, str(exc))
    return ScanResult(end, committed_lines, commits)


def _commit_count(line: bytes) -> int | None:
    try:
        _tag, _number, count = _COMMIT_DECODER.decode(line)
    except msgspec.DecodeError:
        return None
    return count
