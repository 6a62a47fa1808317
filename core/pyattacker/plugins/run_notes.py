"""Notes on a run, kept as numbered revisions: the rule every store applies when one is written.

A run's notes start as the config's ``run.notes`` (revision 1, when it says anything). Each
write names the revision it edited; when that is no longer the latest (someone wrote since),
the write is refused with ``NoteConflict``, so two people editing never overwrite each other.
The stores keep every revision; these helpers hold the rule once for all of them.
"""

from __future__ import annotations

import getpass
import socket
import time

from pyattacker.errors import NoteConflict
from pyattacker.model import NoteRecord, RunRecord

__all__ = ["CONFIG_AUTHOR", "config_note", "next_note", "note_author"]

#: the author of revision 1 when it is the config's ``run.notes``
CONFIG_AUTHOR = "config (run.notes)"


def config_note(run: RunRecord | None) -> NoteRecord | None:
    """Revision 1 of a run whose config gave ``run.notes`` (None: no run, or no notes)."""
    if run is None or not run.notes:
        return None
    return NoteRecord(
        run_id=run.run_id, revision=1, text=run.notes, author=CONFIG_AUTHOR, written_at=run.started_at
    )


def note_author() -> str:
    """``user@host`` of this process: who a new revision says wrote it."""
    try:
        user = getpass.getuser()
    except Exception:  # no login name (a container without one): the host still says where
        user = "unknown"
    return f"{user}@{socket.gethostname()}"


def next_note(
    location: str,
    run_id: str,
    current: NoteRecord | None,
    text: str,
    expected_revision: int | None,
    author: str,
    now: float,
) -> NoteRecord:
    """The revision that follows ``current`` (None: there is none yet, revision 0).

    ``expected_revision`` is the revision the writer edited (None: whatever is latest); when it
    is not the latest, ``NoteConflict`` says who wrote the latest and when."""
    latest = current.revision if current is not None else 0
    if expected_revision is not None and expected_revision != latest:
        if current is None:
            who = "there are no notes yet"
        else:
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(current.written_at))
            who = f"revision {latest} was written by {current.author or 'unknown'} at {when}"
        raise NoteConflict(
            f"store {location}: the notes of run {run_id} changed since revision"
            f" {expected_revision} was read ({who}); nothing was written. Read them again"
            f" (`pyattacker note {location} {run_id}`) and redo the edit",
            current,
        )
    return NoteRecord(run_id=run_id, revision=latest + 1, text=text, author=author, written_at=now)
