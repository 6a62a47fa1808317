"""The runs of one or more stores, one summary row each: what ``pyattacker runs`` and the
viewer's runs page show.

Everything comes from aggregates (the run rows, their notes, pipeline counts per run and
state), never from a scan of the pipelines in Python where the store counts them itself.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from pyattacker.model import NoteRecord, RunRecord
from pyattacker.plugins.store_base import StoreBase
from pyattacker.views.common import read_only_store

__all__ = ["first_line", "list_runs", "run_duration_s", "run_summary", "store_runs"]


def first_line(text: str, limit: int = 80) -> str:
    """The first non-empty line of ``text``, cut to ``limit`` characters (with an ellipsis)."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def run_duration_s(run: RunRecord, now: float | None = None) -> float | None:
    """Seconds from start to end; for a run without an end, to its last heartbeat (a live run:
    to ``now``); None when it never started."""
    if not run.started_at:
        return None
    end = run.ended_at or (now if run.status == "running" and now is not None else run.heartbeat_at)
    return None if end is None else max(0.0, end - run.started_at)


def run_summary(
    run: RunRecord, counts: dict[str, int], note: NoteRecord | None, now: float | None = None
) -> dict[str, Any]:
    """One run as the listing shows it (JSON-ready)."""
    return {
        "run_id": run.run_id,
        "label": run.label,
        "status": run.status,
        "stop_reason": run.stop_reason,
        "started_at": run.started_at,
        "ended_at": run.ended_at,
        "duration_s": run_duration_s(run, now),
        "pipelines": {"total": sum(counts.values()), "by_state": dict(sorted(counts.items()))},
        "notes": first_line(note.text) if note is not None else "",
        "notes_revision": note.revision if note is not None else 0,
    }


def store_runs(store: StoreBase, now: float | None = None) -> list[dict[str, Any]]:
    """Every run of an open store, oldest first."""
    counts = store.run_state_counts()
    notes = store.run_notes()
    return [run_summary(r, counts.get(r.run_id, {}), notes.get(r.run_id), now) for r in store.runs()]


def list_runs(locations: Sequence[str]) -> dict[str, Any]:
    """``{"schema_version", "stores": [{"store", "runs"}]}`` of every store (each opened
    read-only; a missing or foreign one is a ``ConfigError`` naming it)."""
    now = time.time()
    out = []
    for location in locations:
        with read_only_store(location) as store:
            out.append({"store": location, "runs": store_runs(store, now)})
    return {"schema_version": 1, "stores": out}
