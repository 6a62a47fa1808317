"""Shipping a shard store between the driver and a node that does not share its disk.

In ``ship`` mode a shard writes a private copy of its store on its node; the driver sends the
files it has of that store when the shard starts (a resume continues from them) and writes
back what the shard left when it ends (interrupted or failed shards included, so they stay
resumable). A store is its file plus its sidecars (``-wal``, ``.contents``, ...): every regular
file whose name starts with the store file's name.
"""

from __future__ import annotations

import os
import tempfile

__all__ = ["read_store_files", "write_store_files"]


def _siblings(path: str) -> list[str]:
    folder = os.path.dirname(path) or "."
    name = os.path.basename(path)
    try:
        entries = os.listdir(folder)
    except FileNotFoundError:
        return []
    return sorted(
        os.path.join(folder, e)
        for e in entries
        if e.startswith(name) and os.path.isfile(os.path.join(folder, e))
    )


def read_store_files(path: str) -> dict[str, bytes]:
    """The store ``path`` and its sidecars, by name relative to the store's name (``""``,
    ``"-wal"``, ``".contents"``); empty when there is no store yet."""
    name = os.path.basename(path)
    files: dict[str, bytes] = {}
    for file in _siblings(path):
        with open(file, "rb") as fh:
            files[os.path.basename(file)[len(name) :]] = fh.read()
    return files


def write_store_files(path: str, files: dict[str, bytes]) -> None:
    """Make ``path`` and its sidecars exactly ``files`` (``read_store_files``' form): each file
    written beside and renamed over, sidecars that are not in ``files`` removed (a stale
    ``-wal`` would otherwise be applied to the new file)."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    keep = {path + suffix for suffix in files}
    for stale in _siblings(path):
        if stale not in keep:
            os.unlink(stale)
    for suffix, data in files.items():
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".ship-")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, path + suffix)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
