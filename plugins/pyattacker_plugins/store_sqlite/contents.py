"""What a store file has held: ``<file>.contents`` beside it, so that losing committed data is
named instead of re-run in silence.

A commit is durable in the ``-wal`` file before it is copied into the database. When the log is
lost (the file copied without it) or damaged (a flipped bit: SQLite then ignores that frame and
every later one), the file opens as an older or empty store, and a resume would run again every
task whose output was in the lost part. The writer therefore records how many runs, pipelines,
attempts and events the file holds after every commit that changes one of them (from its first
commit carrying a run record on: a writer that never started a run leaves the record alone), and
every later open (writer or reader) compares the file with that record. The counts only grow
(rows of those kinds are never deleted) and come from counters the store keeps anyway.

The record is one fixed-size block (JSON padded with spaces, with a CRC of its counts)
overwritten in place by one positioned write, never synced: the page cache outlives a killed
process, and a power loss is outside what ``synchronous=normal`` promises anyway (an older
record only proves less). So it costs one ``pwrite`` per commit, and it lags the file by at
most the commit during which the process died. A reader that catches the block half-written
finds the CRC wrong and reads it again.

The record is read before the file is counted, and written after the commit it describes, so a
reader beside a live writer never finds the file holding less than the record says.
"""

from __future__ import annotations

import json
import os
import zlib
from typing import Any

__all__ = [
    "KINDS",
    "RECORD_SIZE",
    "SUFFIX",
    "ContentsRecord",
    "keep_log_aside",
    "marker_path",
    "read_marker",
    "shortfall",
]

#: the record's name: the store file's name plus this
SUFFIX = ".contents"
#: what the record counts, in the order a message names them
KINDS = ("runs", "pipelines", "attempts", "events")
#: the block's size in bytes: within one page, so one ``pwrite`` replaces it whole
RECORD_SIZE = 512
#: reads of a block whose CRC does not hold (a write in progress) before it proves nothing
_READS = 3


def marker_path(path: str) -> str:
    return path + SUFFIX


def _checked(counts: tuple[int, ...]) -> tuple[str, int]:
    """The counts as the block spells them, and their CRC (what a reader checks)."""
    body = ", ".join(f'"{k}": {v}' for k, v in zip(KINDS, counts, strict=True))
    return body, zlib.crc32(body.encode())


def read_marker(path: str) -> dict[str, int] | None:
    """The counts recorded beside ``path``; None without a record (a store written before it
    existed) or with one that cannot be read (then it proves nothing)."""
    for _ in range(_READS):
        try:
            with open(marker_path(path), encoding="utf-8") as fh:
                data: Any = json.load(fh)
        except (OSError, ValueError):
            continue  # (missing, or caught half-written)
        if not isinstance(data, dict):
            return None
        counts = tuple(data.get(k) for k in KINDS)
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in counts):
            return None
        check = data.get("check")
        if check is not None and check != _checked(counts)[1]:  # type: ignore[arg-type]
            continue
        return dict(zip(KINDS, counts, strict=True))  # type: ignore[arg-type]
    return None


class ContentsRecord:
    """The writer's record: one open file, overwritten in place with one positioned write of a
    fixed-size block when the counts changed (see the module docstring)."""

    def __init__(self, path: str) -> None:
        name = os.path.basename(path)
        self._head = f'{{"store": {json.dumps(name)}, ' if len(name) < RECORD_SIZE // 2 else "{"
        self._fd: int | None = os.open(marker_path(path), os.O_RDWR | os.O_CREAT, 0o644)
        self._last: tuple[int, ...] = ()

    def write(self, counts: tuple[int, ...]) -> None:
        """Record ``counts`` (in ``KINDS`` order) unless they are what it holds already."""
        if counts == self._last or self._fd is None:
            return
        body, check = _checked(counts)
        block = f'{self._head}{body}, "check": {check}}}'.ljust(RECORD_SIZE - 1).encode() + b"\n"
        os.pwrite(self._fd, block, 0)
        if not self._last:  # the first block: cut what an older, longer record left past it
            os.ftruncate(self._fd, RECORD_SIZE)
        self._last = counts

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def shortfall(path: str, recorded: dict[str, int] | None, held: dict[str, int]) -> str | None:
    """None when the file holds at least what ``recorded`` says; else a message naming the file,
    what is missing and what to do."""
    if recorded is None:
        return None
    missing = [f"{held[k]} of {recorded[k]} {k}" for k in KINDS if held[k] < recorded[k]]
    if not missing:
        return None
    return (
        f"store {path} holds less than it once did: it has {', '.join(missing)} recorded in"
        f" {marker_path(path)}. Committed data was lost, most likely its write-ahead log"
        f" {path}-wal (lost, damaged, or the file copied without it after a crash). Nothing was"
        " changed. Put the original -wal file back beside it if you still have it; or resume with"
        " --fresh-restart to accept the loss (pipelines that are not succeeded start again from"
        " their seed)"
    )


def keep_log_aside(path: str) -> str:
    """Copy the ``-wal`` file as it is to ``<file>-wal.lost`` before a writer adds to it (its
    first write overwrites the frames past a damaged one, and its close deletes the file); the
    text to add to the message."""
    log = f"{path}-wal"
    if not os.path.exists(log):
        return ""
    kept = f"{log}.lost"
    import shutil  # start-up: only a store that lost data needs it

    try:
        shutil.copyfile(log, kept)
    except OSError as exc:
        return f" (its log could not be kept aside: {exc})"
    return f" (its log as it was is kept as {kept})"
