"""The last scan of the installed entry points, kept on disk with a fingerprint of what it read.

Finding the plugins means reading the metadata of every installed distribution through
importlib-metadata: importing it and walking ``sys.path`` is a large part of discovery, in
every process, for an answer that changes only when something is installed, removed or edited.
So a scan is kept in the user cache folder (``$PYATTACKER_HOME/cache`` when that is set) with a
fingerprint of ``sys.path`` as it was scanned: for each folder on it, the name of every
distribution's metadata folder (``*.dist-info``, ``*.egg-info``, ``EGG-INFO``) with the size and
modification time of its ``entry_points.txt`` (and of ``PKG-INFO`` for the egg kinds, whose
folder name need not carry the version); for a file on it (a zip), its own size and time.

A process whose fingerprint matches uses the kept scan and never imports importlib-metadata.
An install, uninstall or upgrade changes a folder's names, and an edit in place changes a
file's time or size, so the next process scans again. The fingerprint is taken before the scan,
so an install during a scan is seen by the next process.

Not kept when something else finds distributions (a ``sys.meta_path`` finder of its own with
``find_distributions``): the fingerprint could not see what it would find. ``pyattacker plugins``
always scans (and keeps that scan); ``PYATTACKER_PLUGIN_CACHE=0`` turns it off. A cache folder
that cannot be written only costs the scan.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

__all__ = ["cache_file", "cached_scan", "enabled", "fingerprint"]

#: the layout of a kept scan; another value is a miss
FORMAT = 1
#: kept scans per cache folder (one per interpreter and ``sys.path``); the oldest go first
KEEP = 64


class _Kept(msgspec.Struct):
    """A kept scan: ``(name, value, group, dist, version)`` per entry point, per group."""

    format: int
    fingerprint: str
    groups: dict[str, list[tuple[str, str, str, str | None, str | None]]]


def enabled() -> bool:
    """False when switched off, or when a finder of its own could add distributions."""
    if os.environ.get("PYATTACKER_PLUGIN_CACHE", "1").strip().lower() in ("0", "off", "false", "no"):
        return False
    return all(
        getattr(finder, "find_distributions", None) is None or _searches_paths(finder)
        for finder in sys.meta_path
    )


def _searches_paths(finder: Any) -> bool:
    """The standard finders of distributions: they search ``sys.path``, as the fingerprint does
    (importlib-metadata, once imported, adds its own and switches the standard library's off)."""
    if finder is importlib.machinery.PathFinder:
        return True
    backport = sys.modules.get("importlib_metadata")
    return backport is not None and isinstance(finder, getattr(backport, "MetadataPathFinder", ()))


def fingerprint() -> str:
    """What a scan of ``sys.path`` would read, as a digest (see the module doc)."""
    h = hashlib.sha256(f"{FORMAT}\0{sys.version}\0{sys.executable}".encode())
    for entry in sys.path:
        where = entry or os.getcwd()  # "" on sys.path is the current folder
        h.update(b"\1" + os.fsencode(where))
        try:
            names = os.listdir(where)
        except NotADirectoryError:
            _add_stat(h, where, "")
            continue
        except OSError:
            h.update(b"\2")  # absent: its appearance changes the digest
            continue
        for name in sorted(names):
            low = name.lower()
            if low.endswith(".dist-info"):  # its name holds the version: an upgrade renames it
                files: tuple[str, ...] = ("entry_points.txt",)
            elif low.endswith(".egg-info") or name == "EGG-INFO":  # its name may not
                files = ("entry_points.txt", "PKG-INFO")
            else:
                continue
            h.update(b"\3" + os.fsencode(name))
            for file in files:
                _add_stat(h, os.path.join(where, name, file), file)
    return h.hexdigest()


def _add_stat(h: Any, path: str, label: str) -> None:
    try:
        st = os.stat(path)
    except OSError:
        return
    h.update(f"\4{label}\0{st.st_size}\0{st.st_mtime_ns}".encode())


def cache_file() -> Path:
    """This interpreter's and ``sys.path``'s kept scan."""
    home = os.environ.get("PYATTACKER_HOME")
    if home:
        base = Path(home) / "cache"
    elif sys.platform.startswith(("linux", "freebsd", "openbsd", "netbsd")):
        # platformdirs' rule for these, without importing it (the import costs much of what this saves)
        xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
        base = Path(xdg or os.path.expanduser("~/.cache")) / "pyattacker"
    else:
        import platformdirs  # start-up: only where the rule above does not apply

        base = Path(platformdirs.user_cache_dir("pyattacker", appauthor=False))
    key = hashlib.sha256("\0".join(str(p) for p in (sys.executable, *sys.path)).encode()).hexdigest()[:24]
    return base / "entry-points" / f"{key}.json"


def cached_scan(
    groups: tuple[str, ...],
    scan: Callable[[tuple[str, ...]], Any],
    make: Callable[..., Any],
    *,
    fresh: bool = False,
) -> Any:
    """``scan(groups)``, or the kept answer when nothing it read has changed since.

    ``make(name=, value=, group=, dist=, version=)`` rebuilds an entry point from a kept one.
    ``fresh``: scan whatever is kept, and keep that scan.
    """
    if not enabled():
        return scan(groups)
    try:
        mark = fingerprint()
        where = cache_file()
    except (OSError, ValueError, TypeError):  # a cwd that is gone, an entry that is no path
        return scan(groups)
    kept = None if fresh else _read(where)
    if kept is not None and kept.fingerprint == mark and set(kept.groups) == set(groups):
        return {
            group: [make(name=n, value=v, group=g, dist=d, version=ver) for n, v, g, d, ver in rows]
            for group, rows in kept.groups.items()
        }
    found = scan(groups)
    _write(
        where,
        _Kept(
            FORMAT,
            mark,
            {
                group: [(e.name, e.value, e.group, e.dist, e.version) for e in eps]
                for group, eps in found.items()
            },
        ),
    )
    return found


def _read(where: Path) -> _Kept | None:
    try:
        kept = msgspec.json.decode(where.read_bytes(), type=_Kept)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None  # absent, unreadable or damaged: scan as if there were none
    return kept if kept.format == FORMAT else None


def _write(where: Path, kept: _Kept) -> None:
    tmp = where.with_name(f".{where.name}.{os.getpid()}.{id(kept):x}.tmp")  # one per writer
    try:
        where.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(msgspec.json.encode(kept))
        os.replace(tmp, where)  # readers see the old file or the new one, never half of one
        _prune(where.parent)
    except OSError:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass


def _prune(folder: Path) -> None:
    """Keep the ``KEEP`` most recently written scans (one per interpreter and path)."""
    files = [p for p in folder.glob("*.json") if p.is_file()]
    if len(files) <= KEEP:
        return
    files.sort(key=lambda p: p.stat().st_mtime_ns)
    for old in files[: len(files) - KEEP]:
        old.unlink(missing_ok=True)
