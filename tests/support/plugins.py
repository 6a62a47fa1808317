"""A fake installed distribution: a ``*.dist-info`` with ``entry_points.txt`` and its module,
put on ``sys.path`` for one test (so discovery sees it exactly as it sees a pip-installed one)."""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest


def make_fake_dist(
    root: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    dist: str,
    modules: dict[str, str],
    entry_points: dict[str, dict[str, str]],
    version: str = "1.0",
) -> Path:
    """Write modules and ``<dist>-<version>.dist-info`` under ``root`` and prepend it to sys.path."""
    root.mkdir(parents=True, exist_ok=True)
    for name, source in modules.items():
        (root / f"{name}.py").write_text(textwrap.dedent(source))
    info = root / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    lines = []
    for group, eps in entry_points.items():
        lines.append(f"[{group}]")
        lines.extend(f"{k} = {v}" for k, v in eps.items())
        lines.append("")
    (info / "entry_points.txt").write_text("\n".join(lines))
    monkeypatch.syspath_prepend(str(root))
    importlib.invalidate_caches()
    for name in modules:
        sys.modules.pop(name, None)
    return root


FakeDist = Callable[..., Path]
