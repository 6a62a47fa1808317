"""Store factories for pyattacker's own store tests, and the row builders of
``pyattacker.testing.rows`` under the names these tests import them by."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pyattacker.model import (
    Batch,
)
from pyattacker.store.base import Store
from pyattacker.testing.rows import (  # noqa: F401 - re-exported for the tests
    artifact,
    attempt,
    batch_of,
    commit,
    event,
    metric,
    pipeline,
    point,
    resource,
    run,
    task,
)
from pyattacker_plugins import store_memory
from pyattacker_plugins.store_jsonl import JsonlStoreOpener
from pyattacker_plugins.store_sqlite import SqliteStoreOpener

STORE_KINDS = ("memory", "sqlite", "jsonl")


class StoreFactory:
    """Opens stores of one kind at one location; ``reopen`` proves persistence."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        self.persistent = kind != "memory"
        self.location = {
            "memory": ":memory:",
            "sqlite": str(tmp_path / "store.db"),
            "jsonl": str(tmp_path / "store"),
        }[kind]
        self.opened: list[Store] = []

    def open(self, *, read_only: bool = False) -> Store:
        store: Store
        if self.kind == "memory":
            store = store_memory.MemoryStoreOpener().open(self.location)
        elif self.kind == "sqlite":
            store = SqliteStoreOpener().open(self.location, read_only=read_only)
        else:
            store = JsonlStoreOpener().open(self.location, read_only=read_only)
        self.opened.append(store)
        return store

    def reopen(self, store: Store, *, read_only: bool = False) -> Store:
        store.close()
        return self.open(read_only=read_only)

    def break_mid_batch(self, monkeypatch: pytest.MonkeyPatch, batch: Batch) -> None:
        break_mid_batch(self.kind, monkeypatch, batch)

    def close_all(self) -> None:
        for store in self.opened:
            try:
                store.close()
            except Exception:
                pass


def break_mid_batch(kind: str, monkeypatch: pytest.MonkeyPatch, batch: Batch) -> None:
    """Make a built-in store of ``kind`` fail the commit of ``batch`` after some of its rows
    were already applied (``StoreContract.break_mid_batch`` for the built-ins)."""
    if kind == "memory":  # it copies rows and accepts any value: fail the third copy
        real = store_memory._copy
        calls = itertools.count()

        def failing(row: Any) -> Any:
            if next(calls) == 2:
                raise RuntimeError("injected failure")
            return real(row)

        monkeypatch.setattr(store_memory, "_copy", failing)
    elif kind == "sqlite":
        # runs and pipelines are applied before tasks: a task row sqlite3 cannot bind fails
        # the transaction half-way through
        monkeypatch.setattr(batch.tasks[0], "attempts_used", object())
    else:
        from pyattacker_plugins.store_jsonl import store as jsonl_module

        real_line = jsonl_module.encode_line

        def failing_line(tag: str, record: Any) -> bytes:
            if tag == "task":
                raise RuntimeError("injected failure")
            return real_line(tag, record)

        monkeypatch.setattr(jsonl_module, "encode_line", failing_line)


Factory = Callable[[], StoreFactory]
