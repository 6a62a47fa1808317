"""Small helpers for runner tests: run on a virtual clock against a memory store."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pyattacker import Runner, VirtualClock
from pyattacker.model import Batch
from pyattacker_plugins.store_memory import MemoryStore


def vrunner(store: Any = None, **kwargs: Any) -> Runner:
    kwargs.setdefault("clock", VirtualClock())
    kwargs.setdefault("handle_signals", False)
    return Runner(store=store if store is not None else MemoryStore(), **kwargs)


class RecordingStore(MemoryStore):
    """A memory store that keeps a copy of what each commit carried (``batches``)."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[Batch] = []

    def commit(self, batch: Batch) -> None:
        super().commit(batch)
        copy = Batch()
        copy.extend(batch)
        self.batches.append(copy)


def rows(store: Any, kind: str, **filters: Any) -> list[Any]:
    from pyattacker.store.base import iter_rows

    return list(iter_rows(store, kind, **filters))


def events(store: Any, kind: str | None = None) -> list[Any]:
    return [e for e in rows(store, "events") if kind is None or e.kind == kind]


def states(store: Any) -> dict[str, str]:
    return {p.pipeline_id: p.state for p in rows(store, "pipelines")}


def seeds(n: int) -> Iterable[dict[str, int]]:
    return ({"i": i} for i in range(n))


def count_succeeded(store: Any) -> int:
    """Succeeded pipelines in a SQLite store file, read-only (0 while it does not exist yet)."""
    import sqlite3
    from pathlib import Path

    path = Path(store)
    if not path.exists():
        return 0
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1)
        try:
            return int(con.execute("select count(*) from pipelines where state='succeeded'").fetchone()[0])
        finally:
            con.close()
    except sqlite3.Error:
        return 0
