"""What a process pays before its first pipeline: plugin discovery imports what every command
needs and leaves the rest for the commands that use it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import types
from pathlib import Path

import pluggy
import pytest

from pyattacker import hookimpl
from pyattacker.model import RunRecord
from pyattacker.plugins import hookspecs
from pyattacker.plugins.manager import BUILTIN_PLUGINS, Plugins, _Manager, discover, installed_entry_points
from tests.support import REPO

ROOT = REPO


def _found(manager: pluggy.PluginManager, plugin: object) -> set[tuple[str, object]]:
    """(hook, function) of every implementation the manager registered for ``plugin``."""
    return {
        (caller.name, impl.function)
        for caller in manager.get_hookcallers(plugin) or ()
        for impl in caller.get_hookimpls()
        if impl.plugin is plugin
    }


def _both(plugin: object) -> tuple[set[tuple[str, object]], set[tuple[str, object]]]:
    managers = []
    for cls in (_Manager, pluggy.PluginManager):
        pm = cls("pyattacker")
        pm.add_hookspecs(hookspecs)
        pm.register(plugin, name="p")
        managers.append(_found(pm, plugin))
    return managers[0], managers[1]


def test_module_plugins_register_the_hooks_pluggy_itself_finds() -> None:
    """The fast look at a module's names skips only what pluggy would skip."""
    for ep in installed_entry_points("pyattacker.plugins"):
        if not ep.builtin:
            continue
        module = ep.load()
        fast, reference = _both(module)
        assert fast == reference and fast, ep.name

    odd = types.ModuleType("odd_plugin")

    def pyattacker_tasks(register):  # type: ignore[no-untyped-def]
        register("x", lambda value: value)

    def renamed(register):  # type: ignore[no-untyped-def]
        pass

    def unmarked(register):  # type: ignore[no-untyped-def]
        pass

    def in_a_wrapper(register):  # type: ignore[no-untyped-def]
        pass

    odd.pyattacker_tasks = hookimpl(pyattacker_tasks)  # type: ignore[attr-defined]
    odd.codecs_too = hookimpl(specname="pyattacker_codecs")(renamed)  # type: ignore[attr-defined]
    odd.pyattacker_sources = unmarked  # type: ignore[attr-defined]
    odd.wrapped = staticmethod(hookimpl(specname="pyattacker_stores")(in_a_wrapper))  # type: ignore[attr-defined]
    odd.number, odd.submodule, odd.cls = 3, json, Plugins  # type: ignore[attr-defined]
    fast, reference = _both(odd)
    assert fast == reference
    assert {name for name, _ in fast} == {"pyattacker_tasks", "pyattacker_codecs", "pyattacker_stores"}


def test_discovery_hooks_listing_is_unchanged_by_the_fast_path() -> None:
    plugins = discover()
    rows = {row.name: row for row in plugins.listing()}
    assert set(BUILTIN_PLUGINS) <= set(rows)
    assert rows["store-sqlite"].hooks == ["pyattacker_stores"]
    assert rows["store-jsonl"].hooks == ["pyattacker_stores"]
    assert all(row.status == "active" for name, row in rows.items() if name in BUILTIN_PLUGINS)


def test_discovery_leaves_optional_parts_unimported(tmp_path: Path) -> None:
    """A process that discovers plugins and opens no jsonl store, forks nothing and writes no
    artifact file never imports the jsonl store's code, nor ``pickle``, ``tempfile`` (with
    ``shutil`` behind it) or ``glob`` for the plugins (they load when a command needs them;
    what the kernel's own imports bring, as ``pathlib`` brings ``glob`` on Python 3.13, is not
    discovery's). The second of two processes is the one looked at: the first may scan the
    installed metadata, whose reader imports ``tempfile`` itself."""
    optional = ["pickle", "tempfile", "shutil", "glob", "importlib_metadata"]
    code = (
        "import json, sys\n"
        "from pyattacker.plugins.manager import get_plugins\n"
        "before = set(sys.modules)\n"
        "plugins = get_plugins()\n"
        "print(json.dumps({'failed': [r.name for r in plugins.failures()],"
        " 'modules': sorted(m for m in sys.modules if m.startswith('pyattacker')),"
        f" 'new': sorted(m for m in set(sys.modules) - before if m in {optional!r})}}))\n"
    )
    env = {**os.environ, "PYATTACKER_HOME": str(tmp_path)}
    env.pop("PYATTACKER_PLUGIN_CACHE", None)
    for _ in range(2):  # the first keeps the scan of entry points; the second reads it
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT, env=env
        )
    seen = json.loads(out.stdout)
    assert seen["failed"] == []
    modules = set(seen["modules"])
    assert "pyattacker_plugins.store_jsonl" in modules  # discovered...
    assert "pyattacker_plugins.store_jsonl.store" not in modules  # ...but its store not loaded
    # (``importlib_metadata`` absent: the kept scan was read, nothing else imported tempfile)
    assert seen["new"] == []


def test_jsonl_names_load_on_first_use(tmp_path: Path) -> None:
    import pyattacker_plugins.store_jsonl as package
    from pyattacker_plugins.store_jsonl import FORMAT_VERSION, JOURNAL, MARKER, JsonlStore, JsonlStoreOpener
    from pyattacker_plugins.store_jsonl import store as module

    assert (JsonlStore, FORMAT_VERSION, JOURNAL, MARKER) == (
        module.JsonlStore,
        module.FORMAT_VERSION,
        module.JOURNAL,
        module.MARKER,
    )
    with pytest.raises(AttributeError, match="no_such_name"):
        package.no_such_name  # noqa: B018
    opener = JsonlStoreOpener()
    where = tmp_path / "s"
    assert not opener.recognizes(str(where))
    opener.open(str(where)).close()
    assert opener.recognizes(str(where))
    opener.open(str(where), read_only=True).close()


def test_a_decoder_compiled_on_first_use_from_many_threads_at_once() -> None:
    """Row decoders compile on the first read; threads that race to it all get the record."""
    from pyattacker_plugins.store_sqlite import rows

    codec = rows.RowCodec("runs", RunRecord, rows.RUNS.plain, rows.RUNS.json_fields)
    row = ("run-1", "completed", "", 1.0, 2.0, 3.0, "host", 7, 0.5, "3.11", "0.1", "", None, "{}", "{}")
    assert len(row) == len(codec.columns)
    barrier = threading.Barrier(8)
    got: list[RunRecord] = []

    def read() -> None:
        barrier.wait()
        got.append(codec.decode(row))

    threads = [threading.Thread(target=read) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 8 and all(r == got[0] for r in got)
    assert got[0].run_id == "run-1" and got[0].pid == 7 and got[0].config == {}
    assert codec.decode(row) == got[0]
