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


def _table_rows(text: str, header: str) -> dict[str, str]:
    """First cell -> whole row, of the markdown table that starts with ``header``."""
    lines = text[text.index(header) :].splitlines()
    rows = {}
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        rows[line.split("|")[1].strip()] = line
    return rows


def _members(cls: type) -> set[str]:
    """What a contract class names for plugin authors: its annotations and its own methods."""
    own = {n for n, v in vars(cls).items() if callable(v) or isinstance(v, (staticmethod, property))}
    names = set(vars(cls).get("__annotations__", {})) | own
    return {n for n in names if not n.startswith("_")}


def test_the_plugin_api_table_names_every_kind_and_every_required_member() -> None:
    """docs/plugins.md's table is checked against ``pyattacker.plugins.api``: one row per kind,
    and each kind's Protocol members (what the kernel calls) named in its row."""
    from pyattacker.plugins import api

    rows = _table_rows(DOCS.read_text(), "| kind | `register(...)` |")
    assert list(rows) == list(api.KIND_CONTRACTS) == list(HOOK_KINDS.values())
    for kind, classes in api.KIND_CONTRACTS.items():
        for cls in classes:
            assert f"`{cls.__name__}`" in rows[kind], f"{kind}: the row does not name {cls.__name__}"
            if cls.__name__ in ("Store", "StoreBase", "TaskFactory"):
                continue  # the store's members are on docs/stores.md (checked below)
            missing = [m for m in sorted(_members(cls)) if f"`{m}" not in rows[kind]]
            assert not missing, f"{kind}: {cls.__name__}'s {missing} are not in its row of docs/plugins.md"


def test_the_store_page_lists_every_store_method() -> None:
    from pyattacker.plugins.store_base import OPTIONAL_READS, REQUIRED_METHODS

    text = (REPO / "docs" / "stores.md").read_text()
    section = text[text.index("## The Store protocol (for plugin authors)") :]
    for name in (*REQUIRED_METHODS, *OPTIONAL_READS, "commit_behind"):
        assert f"`{name}(" in section, f"docs/stores.md does not describe {name}"
    for capability in ("supports_handoffs", "commits_behind", "has_ledger"):
        assert f"`{capability}" in section


def test_every_contract_version_is_described() -> None:
    from pyattacker.plugins import api

    rows = _table_rows(DOCS.read_text(), "| version | change |")
    assert set(rows) == {str(v) for v in range(api.OLDEST_API_VERSION, api.API_VERSION + 1)}
