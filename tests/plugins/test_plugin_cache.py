"""The kept scan of the installed entry points (``pyattacker.plugins.cache``): used while nothing
it read has changed, scanned again as soon as something is installed, removed or edited."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from pyattacker.plugins import cache as plugin_cache
from pyattacker.plugins.manager import GROUP, discover, get_plugins
from tests.support import REPO
from tests.support.plugins import make_fake_dist

ROOT = REPO
ONLY = {"pyattacker", "fake-cached", "fake-later"}

PLUGIN = """
from pyattacker import hookimpl
from pyattacker import task

@task(name="{task}")
def fn(value):
    return value

@hookimpl
def pyattacker_tasks(register):
    register("{task}", fn)
"""


def _tasks() -> set[str]:
    return set(discover(only=ONLY).tasks.names())


def _bump(path: Path) -> None:
    """A time the file never had: an edit in the same clock tick still counts as an edit."""
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def _fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, dist: str, task: str, where: str = "d") -> Path:
    return make_fake_dist(
        tmp_path / where,
        monkeypatch,
        dist=dist,
        modules={f"{dist.replace('-', '_')}_mod": PLUGIN.format(task=task)},
        entry_points={GROUP: {dist: f"{dist.replace('-', '_')}_mod"}},
    )


def test_a_kept_scan_is_used_and_holds_what_the_scan_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake(tmp_path, monkeypatch, "fake-cached", "cached_task")
    assert not plugin_cache.cache_file().exists()
    first = discover(only=ONLY)
    kept = json.loads(plugin_cache.cache_file().read_bytes())
    assert kept["fingerprint"] == plugin_cache.fingerprint()
    assert ["fake-cached", "fake_cached_mod", GROUP, "fake-cached", "1.0"] in kept["groups"][GROUP]

    import importlib_metadata

    def no_scan() -> None:
        raise AssertionError("scanned although nothing changed")

    monkeypatch.setattr(importlib_metadata, "entry_points", no_scan)
    second = discover(only=ONLY)
    assert [(r.name, r.dist, r.version, r.module, r.status, r.provides) for r in second.listing()] == [
        (r.name, r.dist, r.version, r.module, r.status, r.provides) for r in first.listing()
    ]
    assert "cached_task" in second.tasks.names()


def test_an_install_an_edit_and_an_uninstall_are_each_seen_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _fake(tmp_path, monkeypatch, "fake-cached", "cached_task")
    assert "cached_task" in _tasks()
    # installed next to it (a new metadata folder in a folder already on sys.path)
    info = root / "fake_later-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-later\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{GROUP}]\nfake-later = fake_later_mod\n")
    (root / "fake_later_mod.py").write_text(PLUGIN.format(task="later_task"))
    importlib.invalidate_caches()
    assert {"cached_task", "later_task"} <= _tasks()
    # its entry point edited in place: same folder, another target module
    (root / "fake_other_mod.py").write_text(PLUGIN.format(task="other_task"))
    importlib.invalidate_caches()
    points = info / "entry_points.txt"
    points.write_text(f"[{GROUP}]\nfake-later = fake_other_mod\n")
    _bump(points)
    found = _tasks()
    assert "other_task" in found and "later_task" not in found
    # uninstalled
    for file in info.iterdir():
        file.unlink()
    info.rmdir()
    found = _tasks()
    assert "cached_task" in found and "other_task" not in found


def test_a_new_folder_on_sys_path_is_seen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake(tmp_path, monkeypatch, "fake-cached", "cached_task")
    assert "later_task" not in _tasks()
    _fake(tmp_path, monkeypatch, "fake-later", "later_task", where="e")
    assert {"cached_task", "later_task"} <= _tasks()


def test_a_damaged_kept_scan_is_scanned_again_and_rewritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake(tmp_path, monkeypatch, "fake-cached", "cached_task")
    _tasks()
    where = plugin_cache.cache_file()
    for damage in (b"", b"{not json", b'{"format": 1}', where.read_bytes()[: len(where.read_bytes()) // 2]):
        where.write_bytes(damage)
        assert "cached_task" in _tasks()
        assert json.loads(where.read_bytes())["fingerprint"] == plugin_cache.fingerprint()


def test_a_forged_scan_with_the_right_fingerprint_is_used_but_plugins_command_rescans(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What proves the kept scan is read (discovery believes it) and that ``pyattacker plugins``
    reads the installed metadata instead (it never lists the forged entry)."""
    from pyattacker.cli.main import cli

    _tasks()
    where = plugin_cache.cache_file()
    kept = json.loads(where.read_bytes())
    kept["groups"][GROUP].append(["ghost", "no_such_module_anywhere", GROUP, "ghost-dist", "9"])
    where.write_text(json.dumps(kept))
    rows = {r.name: r for r in discover(only={"pyattacker", "ghost-dist"}).listing()}
    assert rows["ghost"].status == "failed" and "no_such_module_anywhere" in (rows["ghost"].error or "")
    monkeypatch.setenv("PYATTACKER_ONLY_PLUGINS", "pyattacker,ghost-dist")
    res = CliRunner().invoke(cli, ["plugins", "--json"])
    assert res.exit_code == 0, res.output
    assert "ghost" not in {row["name"] for row in json.loads(res.output)["plugins"]}
    assert "ghost" not in {r.name for r in get_plugins().listing()}  # the rescan is now current
    assert ["ghost", "no_such_module_anywhere", GROUP, "ghost-dist", "9"] not in json.loads(
        where.read_bytes()
    )["groups"][GROUP]


def test_switched_off_and_foreign_finders_mean_no_kept_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYATTACKER_PLUGIN_CACHE", "0")
    _tasks()
    assert not plugin_cache.cache_file().exists()
    monkeypatch.delenv("PYATTACKER_PLUGIN_CACHE")

    class Finder:
        """A finder that could add distributions no folder listing shows."""

        @staticmethod
        def find_spec(*args: object) -> None:
            return None

        @staticmethod
        def find_distributions(*args: object) -> list[object]:
            return []

    monkeypatch.setattr(sys, "meta_path", [Finder, *sys.meta_path])
    assert not plugin_cache.enabled()
    _tasks()
    assert not plugin_cache.cache_file().exists()


def test_an_unwritable_cache_folder_costs_only_the_scan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "cache").write_text("a file where the folder would go")
    monkeypatch.setenv("PYATTACKER_HOME", str(home))
    _fake(tmp_path, monkeypatch, "fake-cached", "cached_task")
    assert "cached_task" in _tasks()
    assert "cached_task" in _tasks()


def test_cache_folder_follows_the_platform_rule(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("PYATTACKER_HOME")
    if sys.platform.startswith("linux"):
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
        assert plugin_cache.cache_file().parent == tmp_path / "xdg" / "pyattacker" / "entry-points"
        monkeypatch.setenv("XDG_CACHE_HOME", "  ")
    import platformdirs

    assert plugin_cache.cache_file().parent.parent == Path(
        platformdirs.user_cache_dir("pyattacker", appauthor=False)
    )


def test_old_kept_scans_are_pruned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _tasks()
    folder = plugin_cache.cache_file().parent
    for i in range(plugin_cache.KEEP + 5):
        old = folder / f"old{i}.json"
        old.write_text("{}")
        os.utime(old, ns=(1_000_000_000 * (i + 1), 1_000_000_000 * (i + 1)))
    plugin_cache.cache_file().unlink()
    _tasks()
    files = sorted(p.name for p in folder.glob("*.json"))
    assert len(files) == plugin_cache.KEEP and plugin_cache.cache_file().name in files
    assert "old0.json" not in files and f"old{plugin_cache.KEEP + 4}.json" in files


def test_a_second_process_starts_from_the_kept_scan_without_importlib_metadata(tmp_path: Path) -> None:
    code = (
        "import json, sys\n"
        "from pyattacker.plugins.manager import get_plugins\n"
        "rows = get_plugins().listing()\n"
        "print(json.dumps({'metadata': 'importlib_metadata' in sys.modules,"
        " 'rows': [[r.name, r.status, r.provides] for r in rows]}))\n"
    )
    env = {**os.environ, "PYATTACKER_HOME": str(tmp_path)}
    runs = [
        json.loads(
            subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT, env=env
            ).stdout
        )
        for _ in range(2)
    ]
    assert runs[0]["metadata"] is True and runs[1]["metadata"] is False
    assert runs[0]["rows"] == runs[1]["rows"] and len(runs[0]["rows"]) >= 26


def test_an_upgrade_that_keeps_the_entry_points_file_shows_the_new_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An upgrade renames the metadata folder (its name holds the version), and a rename keeps
    the times of the files inside: the folder's name alone must change the fingerprint."""
    root = _fake(tmp_path, monkeypatch, "fake-cached", "cached_task")
    rows = {r.name: r for r in discover(only=ONLY).listing()}
    assert rows["fake-cached"].version == "1.0"
    (root / "fake_cached-1.0.dist-info").rename(root / "fake_cached-2.0.dist-info")
    (root / "fake_cached-2.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: fake-cached\nVersion: 2.0\n"
    )
    rows = {r.name: r for r in discover(only=ONLY).listing()}
    assert rows["fake-cached"].version == "2.0"


def test_a_path_object_on_sys_path_is_fingerprinted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Some tools put ``Path`` objects on ``sys.path`` (the import system skips them): the kept
    scan is keyed and fingerprinted all the same, and discovery finds what it found before."""
    _fake(tmp_path, monkeypatch, "fake-cached", "cached_task")
    expected = _tasks()
    assert "cached_task" in expected
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.setattr(sys, "path", [*sys.path, elsewhere])
    mark = plugin_cache.fingerprint()
    assert _tasks() == expected
    assert json.loads(plugin_cache.cache_file().read_bytes())["fingerprint"] == mark
    (elsewhere / "other-1.0.dist-info").mkdir()
    assert plugin_cache.fingerprint() != mark
    assert _tasks() == expected
