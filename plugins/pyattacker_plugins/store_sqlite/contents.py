"""What a store file has held: ``<file>.contents`` beside it, so that losing committed data is
named instead of re-run in silence.

A commit is durable in the ``-wal`` file before it is copied into the database. When the log is
lost (the file copied without it) or damaged (a flipped bit: SQLite then ignores that frame and
every later one), the file opens as an older or empty store, and a resume would run again every
task whose output was in the lost part. The writer therefore records, after each commit that
carries the run record (a run's start, its heartbeats, its end), how many runs, pipelines,
attempts and events the file holds; every later open (writer or reader) compares the file with
that record. The counts only grow (rows of those kinds are never deleted) and come from
counters the store keeps anyway, so writing the record costs one small file every heartbeat.

The record is read before the file is counted, and written after the commit it describes, so a
reader beside a live writer never finds the file holding less than the record says.
"""

from __future__ import annotations

import json
import os
from typing import Any

__all__ = ["SUFFIX", "KINDS", "keep_log_aside", "marker_path", "read_marker", "shortfall", "write_marker"]

#: the record's name: the store file's name plus this
SUFFIX = ".contents"
#: what the record counts, in the order a message names them
KINDS = ("runs", "pipelines", "attempts", "events")


def marker_path(path: str) -> str:
    return path + SUFFIX


def read_marker(path: str) -> dict[str, int] | None:
    """The counts recorded beside ``path``; None without a record (a store written before it
    existed) or with one that cannot be read (then it proves nothing)."""
    try:
        with open(marker_path(path), encoding="utf-8") as fh:
            data: Any = json.load(fh)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    counts = {k: data.get(k) for k in KINDS}
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in counts.values()):
        return None
    return counts  # type: ignore[return-value]


def write_marker(path: str, counts: dict[str, int]) -> None:
    """Replace the record atomically (a rename: a crash leaves the old one or the new one).
    Not synced: after a power loss an older record only proves less."""
    target = marker_path(path)
    tmp = f"{target}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump({"store": os.path.basename(path), **counts}, fh)
    os.replace(tmp, target)


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
