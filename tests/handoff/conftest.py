"""What every handoff test may ask for."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.handoff import Where


@pytest.fixture(params=["memory", "sqlite", "jsonl"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> Where:
    """One store of each kind (memory, SQLite, JSONL) for several runs."""
    return Where(request.param, tmp_path)
