"""pyattacker's pytest plugin (entry point ``pytest11``): fixtures for plugin authors' tests.

Loaded by pytest in every environment where pyattacker is installed, so it imports nothing
heavy at module level.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.register_assert_rewrite("pyattacker.testing.store_contract", "pyattacker.testing.backend_contract")


@pytest.fixture
def pyattacker_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private ``PYATTACKER_HOME`` for one test: default store, caches and demo databases
    go under it, never into the user's folders."""
    home = tmp_path / "pyattacker-home"
    home.mkdir()
    monkeypatch.setenv("PYATTACKER_HOME", str(home))
    return home


@pytest.fixture
def pyattacker_plugins(pyattacker_home: Path) -> Iterator[Any]:
    """The plugins discovered from what is installed, fresh for this test (the process-wide
    registry is restored afterwards); ``Runner(plugins=...)`` takes it."""
    from pyattacker.plugins.manager import discover, get_plugins, reset_plugins

    before = get_plugins()
    plugins = discover()
    reset_plugins(plugins)
    try:
        yield plugins
    finally:
        reset_plugins(before)
