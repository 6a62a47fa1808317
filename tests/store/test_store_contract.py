"""The Store contract (``pyattacker.testing.StoreContract``) run against every built-in store,
through the installed store plugins, as a third-party store package runs it."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from pyattacker.model import Batch
from pyattacker.testing import StoreContract
from pyattacker_plugins import store_memory


class TestSqliteStore(StoreContract):
    location = "{tmp}/store.db"


class TestSqliteStoreByScheme(StoreContract):
    location = "sqlite:{tmp}/store"


class TestJsonlStore(StoreContract):
    location = "jsonl:{tmp}/store"


class TestMemoryStore(StoreContract):
    location = ":memory:"
    persistent = False
    wraps_commit_errors = False

    def break_mid_batch(self, monkeypatch: pytest.MonkeyPatch, batch: Batch) -> None:
        """The memory store copies rows (any value is accepted): fail the third copy."""
        real = store_memory._copy
        calls = itertools.count()

        def failing(row: Any) -> Any:
            if next(calls) == 2:
                raise RuntimeError("injected failure")
            return real(row)

        monkeypatch.setattr(store_memory, "_copy", failing)
