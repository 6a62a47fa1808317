"""Shared test setup: every test gets its own PYATTACKER_HOME and its own copy of ``sys.path``,
and no third-party plugin a developer happens to have installed can change the results (only
built-ins load unless a test says otherwise)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyattacker.plugins.manager import reset_plugins


@pytest.fixture(autouse=True)
def _isolated_home(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    home = tmp_path_factory.mktemp("pyattacker-home")
    monkeypatch.setenv("PYATTACKER_HOME", str(home))
    monkeypatch.setenv("PYATTACKER_ONLY_PLUGINS", os.environ.get("PYATTACKER_TEST_PLUGINS", "pyattacker"))
    # a config's folder goes on sys.path for its `use:` targets: each test ends with the path it had
    path = list(sys.path)
    reset_plugins()
    yield home
    sys.path[:] = path
    reset_plugins()


@pytest.fixture(scope="session")
def view_store(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A finished 20-pipeline store (retries, failures with markup, metrics) that the viewer
    tests only read: ``serve``'s HTTP tests and the dashboard's browser tests share it."""
    from tests.support.views import build_store

    return build_store(tmp_path_factory.mktemp("views") / "a.db", 20)
