"""Creating the folder a file goes into, with an error that names the setting it came from.

A store, an export or a starter config whose folder cannot be created (a parent that is a
regular file, a read-only or virtual file system) is the user's configuration, so it is a
``ConfigError`` naming the setting (exit code 2), not an ``OSError`` traceback.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import ConfigError

__all__ = ["make_parent"]


def make_parent(path: str | os.PathLike[str], what: str) -> None:
    """Create ``path``'s parent folder (and its parents); ``what`` names the setting or flag."""
    parent = Path(path).parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(f"{what}: cannot create the folder {parent} for {path}: {reason}") from None
