"""The plugin author docs cannot fall behind the hook specs, and the example package works."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pyattacker.plugins.hookspecs import HOOK_KINDS
from pyattacker.plugins.manager import Plugins
from tests.support import REPO

DOCS = REPO / "docs" / "plugins.md"


def test_every_hook_is_documented_with_its_signature() -> None:
    text = DOCS.read_text()
    pm = Plugins().pm
    for name in HOOK_KINDS:
        caller = getattr(pm.hook, name)
        signature = f"{name}({', '.join(caller.spec.argnames)})"
        assert f"### `{signature}`" in text, f"docs/plugins.md lacks a section for {signature}"


def test_example_third_party_package_is_listed_active() -> None:
    """CI installs examples/plugin_package (see .ci/run); locally, install it the same way."""
    try:
        import pyattacker_example_plugin  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            raise
        pytest.skip("pip install --no-deps ./examples/plugin_package to run this test")
    env = {**os.environ, "PYATTACKER_ONLY_PLUGINS": "pyattacker-example-plugin"}
    out = subprocess.run(
        [sys.executable, "-m", "pyattacker", "plugins", "--json"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    rows = {r["name"]: r for r in json.loads(out.stdout)["plugins"]}
    assert rows["example"]["status"] == "active" and rows["example"]["builtin"] is False
    assert rows["example"]["dist"] == "pyattacker-example-plugin"
    assert rows["example"]["provides"] == {"algorithms": ["random_pick"], "tasks": ["reverse_text"]}
    assert rows["pyattacker.tasks:word_count"]["status"] == "active"
