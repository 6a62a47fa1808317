"""Notes on runs in a JSONL store: ``notes.jsonl`` beside the journal, one line per revision.

Notes are few and written by hand, so they stay out of the journal (whose batches the run
writes): a write appends one line and syncs it, under the store's writer lock (the only
writer); a reader reads the file whole. A torn last line (a crash mid-write) is ignored: that
revision was never acknowledged.
"""

from __future__ import annotations

import os

import msgspec

from pyattacker.errors import StoreUnavailable
from pyattacker.model import NoteRecord

__all__ = ["NOTES", "append_note", "read_notes"]

NOTES = "notes.jsonl"
_decode = msgspec.json.Decoder(NoteRecord)


def read_notes(folder: str) -> dict[str, NoteRecord]:
    """``{run_id: latest revision}`` of the notes written in the store at ``folder``."""
    try:
        with open(os.path.join(folder, NOTES), "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise StoreUnavailable(f"store {folder}: cannot read {NOTES}: {exc}") from exc
    latest: dict[str, NoteRecord] = {}
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            note = _decode.decode(line)
        except msgspec.ValidationError:
            continue  # the torn tail of a write that never returned
        old = latest.get(note.run_id)
        if old is None or note.revision > old.revision:
            latest[note.run_id] = note
    return latest


def append_note(folder: str, notes: list[NoteRecord]) -> None:
    """Append ``notes`` (one line each) and sync them before returning."""
    path = os.path.join(folder, NOTES)
    data = b"".join(msgspec.json.encode(n) + b"\n" for n in notes)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size and not _ends_with_newline(path):
                data = b"\n" + data  # after a torn line, start a line of our own
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise StoreUnavailable(f"store {folder}: writing {NOTES} failed: {exc}") from exc


def _ends_with_newline(path: str) -> bool:
    with open(path, "rb") as fh:
        fh.seek(-1, os.SEEK_END)
        return fh.read(1) == b"\n"
