"""Creating the folder a file goes into, with an error that names the setting it came from.

A store, an export or a starter config whose folder cannot be created (a parent that is a
regular file, a read-only or virtual file system) is the user's configuration, so it is a
``ConfigError`` naming the setting (exit code 2), not an ``OSError`` traceback.
"""

from __future__ import annotations

import os
from pathlib import Path

from pyattacker.errors import ConfigError

__all__ = ["make_parent", "unwritable"]


def make_parent(path: str | os.PathLike[str], what: str) -> None:
    """Create ``path``'s parent folder (and its parents); ``what`` names the setting or flag."""
    parent = Path(path).parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(f"{what}: cannot create the folder {parent} for {path}: {reason}") from None


def unwritable(path: str | os.PathLike[str], *, directory: bool) -> str | None:
    """Why ``path`` (a folder when ``directory``, else a file) cannot be written, or None.

    It only looks: nothing is created. For a path that does not exist yet, its nearest
    existing ancestor must be a folder this process can write. Plugins call it when they are
    built (a run's start), so a place that cannot work is a config error before any task runs.
    """
    path = os.path.abspath(os.fspath(path))
    if os.path.exists(path):
        if directory and not os.path.isdir(path):
            return f"{path} exists and is not a directory"
        if not directory and os.path.isdir(path):
            return f"{path} is a directory"
        if not os.access(path, os.W_OK | os.X_OK if directory else os.W_OK):
            return f"{path} is not writable"
        return None
    parent = os.path.dirname(path)
    while not os.path.exists(parent):
        up = os.path.dirname(parent)
        if up == parent:
            break
        parent = up
    if not os.path.isdir(parent):
        return f"{path} cannot be created: {parent} is not a directory"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{path} cannot be created: {parent} is not writable"
    return None
