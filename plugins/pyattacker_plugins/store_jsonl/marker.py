"""What makes a directory a jsonl store, without the store: recognising a location is asked of
every store plugin whenever a store is opened, and importing the store for it would put the
journal's code into the start-up of every process, which mostly open SQLite files."""

from __future__ import annotations

import os

__all__ = ["MARKER", "is_store_dir"]

#: the file at the top of a store directory that says whose it is and in which format
MARKER = "pyattacker-store.json"


def is_store_dir(path: str) -> bool:
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, MARKER))
