"""The journal file format: one JSON array per line, batches closed by a commit marker.

A record line is ``["<kind>", {record}]``; a batch ends with ``["commit", <n>, <lines>]``. An
unknown kind inside the committed region is refused like corruption, never skipped: skipping a
``reset`` line, say, would show rows the writer deleted. Only
lines followed by their commit marker count: a crash mid-append leaves lines without a marker
(or a torn last line without its newline), and those are treated as never written. A line
inside the committed region that does not parse is corruption and is reported by line number.

A marker may carry a fourth number, ``["commit", <n>, <lines>, <durable>]``: the byte offset up
to which the journal was known synced when the batch was written. The writer syncs behind its
appends (``sync_behind``), so after a power loss a batch written after an unsynced one may be
on disk while the earlier one is not (a hole, which reads as zeros: the journal is only ever
appended to). A batch damaged by zeros at offset X is therefore a torn tail, never written as
far as anyone was told, unless some later marker says the journal was synced past X: then X
had been durable and the damage is corruption. Damage of any other kind (an unknown line kind
above all) is corruption wherever it is. A marker without the number (written by an older
version, which synced inside every commit) vouches for everything before it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import msgspec

from pyattacker import ConfigError
from pyattacker.model import (
    ArtifactRecord,
    AttemptRecord,
    EventRecord,
    HandoffRecord,
    LogRecord,
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
    "log": LogRecord,
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
_COMMIT_DECODER = msgspec.json.Decoder(list[str | int])
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


def encode_commit(number: int, lines: int, durable: int) -> bytes:
    """The marker closing batch ``number`` of ``lines`` lines, written when the journal was known
    synced up to byte ``durable``."""
    return _encoder.encode((COMMIT_TAG, number, lines, durable))


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
    #: where the first damaged batch starts (None: none so far); past it nothing is applied
    hole: int | None = None
    corruption = ""  # the error a hole becomes if a later marker vouches for it
    bad_zeros = False
    batch_start = start
    end = start
    line_no = first_line
    committed_lines = first_line
    for offset, line in _lines(fd, start):
        line_no += 1
        if line.startswith(_COMMIT_PREFIX):
            marker = _commit_marker(line)
            marker_end = offset + len(line) + 1
            # how far this marker says the journal was synced (an older marker: all before it; a
            # marker that does not decode vouches for nothing)
            durable = -1 if marker is None else marker_end if marker[1] is None else marker[1]
            if hole is not None:
                if durable > hole:  # the damaged batch had been synced: corruption, not a hole
                    raise ConfigError(corruption)
                continue
            if bad is not None or marker is None or marker[0] != len(pending):
                corruption = (
                    f"store {name}: line {bad[0]} is corrupt ({bad[1]}) inside a committed batch"
                    if bad is not None
                    else f"store {name}: line {line_no} is a corrupt commit marker"
                )
                # a hole reads as zeros (never in a line we write: control bytes are escaped);
                # anything else, an unknown line kind above all, is refused wherever it is
                zeros = bad_zeros if bad is not None else b"\0" in line
                if durable > batch_start or not zeros:
                    raise ConfigError(corruption)
                hole = batch_start  # written after the last sync and damaged: a torn tail
                continue
            commits += 1
            end = batch_start = marker_end
            committed_lines = line_no
            apply(pending, ScanResult(end, committed_lines, commits))
            pending = []
            continue
        if bad is not None or hole is not None:
            continue
        try:
            pending.append(_decode_record(line, offset))
        except (msgspec.DecodeError, ValueError) as exc:
            bad = (line_no, str(exc))
            bad_zeros = b"\0" in line
    return ScanResult(end, committed_lines, commits)


def _commit_marker(line: bytes) -> tuple[int, int | None] | None:
    """``(lines, durable)`` of a commit marker (``durable`` None in an older marker); None if
    the line does not decode as one."""
    try:
        decoded = _COMMIT_DECODER.decode(line)
    except msgspec.DecodeError:
        return None
    if len(decoded) not in (3, 4) or not all(type(v) is int for v in decoded[1:]):
        return None
    count, durable = decoded[2], (decoded[3] if len(decoded) == 4 else None)
    assert isinstance(count, int) and (durable is None or isinstance(durable, int))  # (for mypy)
    return count, durable
