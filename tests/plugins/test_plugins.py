"""Discovery and composition of plugins (issue 2): real entry points through fake dist-infos."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from pyattacker import hookimpl
from pyattacker.plugins.manager import BUILTIN_PLUGINS, EntryPointInfo, Plugins, discover
from tests.support import REPO
from tests.support.plugins import make_fake_dist

ROOT = REPO

GOOD = """
from pyattacker import hookimpl
from pyattacker import task

@task(name="shout")
def shout(value):
    return str(value).upper()

class Pick:
    name = "pick_first"
    async def acquire(self, pool, *, ctx, where, timeout, selector):
        return await pool.acquire(ctx, algorithm="immediate", where=where, **(selector or {}))
    def fingerprint(self):
        return {"name": "pick_first"}

@hookimpl
def pyattacker_tasks(register):
    register("shout", shout)

@hookimpl
def pyattacker_algorithms(register):
    register("pick_first", Pick)
"""


def _discover(only: set[str] | None = None, block: set[str] | None = None) -> Plugins:
    return discover(
        only=only
        or {"pyattacker", "fake-good", "fake-bad", "fake-typo", "fake-clash", "fake-shadow", "fake-typed"},
        block=block or set(),
    )


def test_every_declared_builtin_is_in_the_kernel_list() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"][
        "pyattacker.plugins"
    ]
    assert sorted(declared) == sorted(BUILTIN_PLUGINS)
    for value in declared.values():
        assert value.startswith("pyattacker_plugins.")


def test_builtins_are_separate_active_plugins() -> None:
    plugins = _discover()
    rows = {r.name: r for r in plugins.listing()}
    for name in ("task-echo", "algo-backoff", "algo-failover", "store-sqlite", "codec-json", "backend-file"):
        assert rows[name].status == "active", rows[name]
        assert rows[name].builtin and rows[name].dist == "pyattacker"
    assert rows["algo-backoff"].provides == {"algorithms": ["backoff"]}
    assert rows["algo-failover"].provides == {"algorithms": ["failover"]}
    assert plugins.tasks.provider("echo").plugin == "task-echo"  # type: ignore[union-attr]


def test_third_party_plugin_is_discovered_and_usable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_fake_dist(
        tmp_path,
        monkeypatch,
        dist="fake-good",
        modules={"fake_good": GOOD},
        entry_points={"pyattacker.plugins": {"good": "fake_good"}},
    )
    plugins = _discover()
    row = {r.name: r for r in plugins.listing()}["good"]
    assert row.status == "active" and not row.builtin and row.dist == "fake-good" and row.version == "1.0"
    assert row.provides == {"algorithms": ["pick_first"], "tasks": ["shout"]}
    shout = plugins.tasks.get("shout")
    assert shout.fn("hi") == "HI"
    assert plugins.algorithms.provider("pick_first").plugin == "good"  # type: ignore[union-attr]


def test_broken_import_is_reported_and_others_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_fake_dist(
        tmp_path,
        monkeypatch,
        dist="fake-bad",
        modules={"fake_bad": "import not_installed_dependency_xyz\n", "fake_good": GOOD},
        entry_points={"pyattacker.plugins": {"bad": "fake_bad", "good": "fake_good"}},
    )
    plugins = _discover()
    rows = {r.name: r for r in plugins.listing()}
    assert rows["bad"].status == "failed"
    assert "not_installed_dependency_xyz" in (rows["bad"].error or "")
    assert rows["good"].status == "active"
    assert "echo" in plugins.tasks and "shout" in plugins.tasks


def test_blocked_plugin_is_never_imported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "imported.txt"
    make_fake_dist(
        tmp_path / "d",
        monkeypatch,
        dist="fake-good",
        modules={"fake_blocked": f"open({str(marker)!r}, 'w').write('x')\n"},
        entry_points={"pyattacker.plugins": {"blocked-one": "fake_blocked"}},
    )
    plugins = _discover(block={"blocked-one"})
    assert {r.name: r for r in plugins.listing()}["blocked-one"].status == "blocked"
    assert not marker.exists()
    monkeypatch.setenv("PYATTACKER_BLOCK_PLUGINS", "blocked-one")
    plugins = discover(only={"fake-good"})
    assert {r.name: r for r in plugins.listing()}["blocked-one"].status == "blocked"
    assert not marker.exists()


def test_only_list_limits_third_parties_but_keeps_builtins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_fake_dist(
        tmp_path,
        monkeypatch,
        dist="fake-good",
        modules={"fake_good": GOOD},
        entry_points={"pyattacker.plugins": {"good": "fake_good"}},
    )
    plugins = discover(only={"something-else"}, block=set())
    rows = {r.name: r for r in plugins.listing()}
    assert rows["good"].status == "blocked"
    assert rows["task-echo"].status == "active"


def test_name_clash_names_both_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    other = GOOD.replace('register("pick_first", Pick)', "pass")
    make_fake_dist(
        tmp_path,
        monkeypatch,
        dist="fake-clash",
        modules={"fake_a": GOOD, "fake_b": other},
        entry_points={"pyattacker.plugins": {"a-plugin": "fake_a", "b-plugin": "fake_b"}},
    )
    plugins = _discover()
    rows = {r.name: r for r in plugins.listing()}
    assert rows["a-plugin"].status == "active"
    assert rows["b-plugin"].status == "failed"
    assert "a-plugin" in (rows["b-plugin"].error or "") and "b-plugin" in (rows["b-plugin"].error or "")
    assert plugins.tasks.provider("shout").plugin == "a-plugin"  # type: ignore[union-attr]


def test_third_party_cannot_shadow_a_builtin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = GOOD.replace('register("shout", shout)', 'register("echo", shout)')
    make_fake_dist(
        tmp_path,
        monkeypatch,
        dist="fake-shadow",
        modules={"fake_shadow": source},
        entry_points={"pyattacker.plugins": {"aaa-shadow": "fake_shadow"}},
    )
    plugins = _discover()
    row = {r.name: r for r in plugins.listing()}["aaa-shadow"]
    assert row.status == "failed" and "built-in" in (row.error or "") and "task-echo" in (row.error or "")
    assert plugins.tasks.provider("echo").plugin == "task-echo"  # type: ignore[union-attr]
    assert "pick_first" not in plugins.algorithms  # the failed plugin's registrations are rolled back


def test_misspelled_hook_is_that_plugins_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = GOOD.replace("def pyattacker_tasks(register)", "def pyattacker_task(register)")
    make_fake_dist(
        tmp_path,
        monkeypatch,
        dist="fake-typo",
        modules={"fake_typo": source, "fake_good": GOOD},
        entry_points={"pyattacker.plugins": {"typo": "fake_typo", "good": "fake_good"}},
    )
    plugins = _discover()
    rows = {r.name: r for r in plugins.listing()}
    assert rows["typo"].status == "failed"
    assert "pyattacker_task" in (rows["typo"].error or "") and "pyattacker_tasks" in (
        rows["typo"].error or ""
    )
    assert rows["good"].status == "active"


def test_hookimpl_with_unknown_argument_fails_only_that_plugin() -> None:
    class Bad:
        @hookimpl
        def pyattacker_tasks(self, register, extra):  # type: ignore[no-untyped-def]
            pass

    plugins = discover(entry_points=[])
    row = plugins.add_plugin(Bad(), "bad-args")
    assert row.status == "failed" and "extra" in (row.error or "")
    assert plugins.pm.get_plugin("bad-args") is None


def test_protocol_violation_is_a_failure() -> None:
    class BadCodec:
        @hookimpl
        def pyattacker_codecs(self, register):  # type: ignore[no-untyped-def]
            register(object())

    plugins = discover(entry_points=[])
    row = plugins.add_plugin(BadCodec(), "bad-codec")
    assert row.status == "failed" and "codecs" in (row.error or "")


def test_typed_group_bridge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    make_fake_dist(
        tmp_path,
        monkeypatch,
        dist="fake-typed",
        modules={"fake_typed": GOOD, "fake_typed_bad": "raise RuntimeError('boom at import')\n"},
        entry_points={"pyattacker.tasks": {"yell": "fake_typed:shout", "broken": "fake_typed_bad:x"}},
    )
    plugins = _discover()
    rows = {r.name: r for r in plugins.listing()}
    assert rows["pyattacker.tasks:yell"].status == "active"
    assert rows["pyattacker.tasks:yell"].dist == "fake-typed"
    assert rows["pyattacker.tasks:yell"].provides == {"tasks": ["yell"]}
    assert rows["pyattacker.tasks:broken"].status == "failed" and "boom at import" in (
        rows["pyattacker.tasks:broken"].error or ""
    )
    assert plugins.tasks.get("yell").fn("a") == "A"


#: what the typed groups point at besides GOOD's task and algorithm: a codec and a store factory
TYPED_EXTRA = """
class Rot13:
    name = "rot13"
    types = (str,)
    priority = 100
    def can_encode(self, value):
        return isinstance(value, str)
    def encode(self, value):
        return value.encode()
    def decode(self, data, type_name, types):
        return data.decode()

class MemoryLike:
    def __init__(self, location, read_only=False):
        self.location = location
"""


def test_every_typed_group_the_docs_name_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A package needing no pluggy code registers through the typed groups docs/plugins.md lists;
    each group's name is the public contract (a renamed group silently drops such packages)."""
    groups = {
        "pyattacker.tasks": ("yell", "fake_typed:shout", "tasks"),
        "pyattacker.algorithms": ("pick_first", "fake_typed:Pick", "algorithms"),
        "pyattacker.codecs": ("rot13", "fake_typed:Rot13", "codecs"),
        "pyattacker.stores": ("likemem", "fake_typed:MemoryLike", "stores"),
    }
    documented = (ROOT / "docs" / "plugins.md").read_text()
    for group in groups:
        assert f"| `{group}` |" in documented, group
    make_fake_dist(
        tmp_path,
        monkeypatch,
        dist="fake-typed",
        modules={"fake_typed": GOOD + TYPED_EXTRA},
        entry_points={group: {name: target} for group, (name, target, _) in groups.items()},
    )
    rows = {r.name: r for r in _discover().listing()}
    for group, (name, _, kind) in groups.items():
        row = rows[f"{group}:{name}"]
        assert row.status == "active" and row.dist == "fake-typed", row
        assert kind in row.provides, row


def test_missing_builtin_says_reinstall() -> None:
    plugins = discover(
        entry_points=[
            EntryPointInfo(name="task-echo", value="pyattacker_plugins.task_echo", dist="pyattacker")
        ]
    )
    plugins.check_builtins(("task-echo", "store-imaginary"))
    row = {r.name: r for r in plugins.listing()}["store-imaginary"]
    assert row.status == "failed" and "reinstall" in (row.error or "")


def test_kernel_works_with_zero_plugins() -> None:
    """No entry points at all: the test registers the store, codec and task it needs by hand."""
    import asyncio

    from pyattacker import Runner, pipeline, task
    from pyattacker.store.codecs import CodecRegistry

    class Store:
        @hookimpl
        def pyattacker_stores(self, register):  # type: ignore[no-untyped-def]
            from pyattacker_plugins.store_memory import MemoryStoreOpener

            register(MemoryStoreOpener())

    class Codec:
        name, types, priority = "json", (dict, int), 0

        def can_encode(self, value):  # type: ignore[no-untyped-def]
            return True

        def encode(self, value):  # type: ignore[no-untyped-def]
            return repr(value).encode()

        def decode(self, data, type_name, types):  # type: ignore[no-untyped-def]
            import ast

            return ast.literal_eval(data.decode())

    plugins = discover(entry_points=[])
    assert not plugins.listing()
    assert plugins.add_plugin(Store(), "test-store").status == "active"

    @task
    async def double(x: int) -> int:
        await asyncio.sleep(0)
        return x * 2

    codecs = CodecRegistry([Codec()])
    template = pipeline("zero", double, double, codecs=codecs)
    with Runner(store=":memory:", plugins=plugins, codecs=codecs) as runner:
        report = runner.run(template.map(range(5)))
    assert report.succeeded == 5 and report.exit_code == 0


def test_plugins_json_cli() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pyattacker", "plugins", "--json"], capture_output=True, text=True, check=True
    )
    document = json.loads(out.stdout)
    assert set(document) == {"plugins", "errors"}  # the reference's shape
    rows = document["plugins"]
    assert isinstance(rows, list) and rows == sorted(rows, key=lambda r: r["name"])
    assert document["errors"] == {r["name"]: r["error"] for r in rows if r["status"] == "failed"}
    for row in rows:
        assert set(row) >= {
            "name",
            "dist",
            "version",
            "module",
            "builtin",
            "status",
            "error",
            "hooks",
            "provides",
        }
        assert row["status"] in ("active", "blocked", "failed")
    names = {r["name"] for r in rows if r["builtin"]}
    assert {"algo-backoff", "algo-failover", "store-sqlite", "task-echo"} <= names


def test_plugins_text_cli_lists_failures_and_exits_0(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "pyattacker", "plugins"], capture_output=True, text=True)
    assert out.returncode == 0
    assert "task-echo" in out.stdout


def test_discovery_reads_each_distributions_metadata_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A distribution's name and version are parsed from its METADATA file on every access; a
    package with many entry points must not pay that per entry point (start-up of every
    command and of every shard process)."""
    import importlib_metadata

    from pyattacker.plugins import manager as plugins_mod

    reads = {"n": 0}

    class Dist:
        def __init__(self, name: str) -> None:
            self._name = name

        @property
        def name(self) -> str:
            reads["n"] += 1
            return self._name

        @property
        def version(self) -> str:
            reads["n"] += 1
            return "1.0"

    one, two = Dist("one"), Dist("two")

    class EP:
        def __init__(self, name: str, dist: Dist) -> None:
            self.name, self.value, self.group, self.dist = name, f"mod_{name}:x", plugins_mod.GROUP, dist

    eps = [EP(f"a{i}", one) for i in range(5)] + [EP(f"b{i}", two) for i in range(3)]
    monkeypatch.setattr(importlib_metadata, "entry_points", lambda: eps)
    found = plugins_mod.installed_entry_points(plugins_mod.GROUP)
    assert sorted((e.name, e.dist, e.version) for e in found) == sorted(
        [(f"a{i}", "one", "1.0") for i in range(5)] + [(f"b{i}", "two", "1.0") for i in range(3)]
    )
    assert reads["n"] == 4  # name + version, once per distribution


def test_distribution_name_and_version_come_from_the_metadata_head() -> None:
    """Discovery reads ``Name`` and ``Version`` from the top of METADATA instead of parsing the
    whole file with the e-mail package: the same answer as ``dist.name`` / ``dist.version`` for
    every installed distribution, and the full parse as the fallback when the head lacks one."""
    import importlib_metadata

    from pyattacker.plugins.manager import _name_and_version

    dists = list(importlib_metadata.distributions())
    assert dists
    for dist in dists:
        assert _name_and_version(dist) == (dist.name, dist.version), dist

    class Fake:
        def __init__(self, text: str | None) -> None:
            self.text = text
            self.name, self.version = "parsed-name", "9.9"

        def read_text(self, filename: str) -> str | None:
            return self.text if filename == "METADATA" else None

    head = "Metadata-Version: 2.1\nname: lower-case\nVERSION: 1.2.3\n\nName: in-the-body\n"
    assert _name_and_version(Fake(head)) == ("lower-case", "1.2.3")
    assert _name_and_version(Fake("Metadata-Version: 2.1\nName: only-name\n\nVersion: 1\n")) == (
        "parsed-name",
        "9.9",
    )
    assert _name_and_version(Fake(None)) == ("parsed-name", "9.9")
