"""The Store contract (``pyattacker.testing.StoreContract``) run against every built-in store,
through the installed store plugins, as a third-party store package runs it."""

from __future__ import annotations

import pytest

from pyattacker.model import Batch
from pyattacker.testing import StoreContract
from tests.support.store_contract import break_mid_batch


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
        break_mid_batch("memory", monkeypatch, batch)
