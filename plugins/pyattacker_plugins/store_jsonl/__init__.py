"""The ``jsonl`` store plugin: a directory holding an append-only JSON Lines journal.

``jsonl:runs/x`` opens (or creates) the directory ``runs/x``; an existing directory that holds
the store's marker file is recognised without the scheme. Cheaper per row than SQLite and
trivially inspectable with text tools, at the price of replaying the journal on open.
"""

from __future__ import annotations

from typing import Any

from pyattacker.hookspecs import hookimpl

from .store import FORMAT_VERSION, JOURNAL, MARKER, JsonlStore, is_store_dir

__all__ = ["FORMAT_VERSION", "JOURNAL", "MARKER", "JsonlStore", "JsonlStoreOpener"]


class JsonlStoreOpener:
    """Opens ``JsonlStore`` directories."""

    name = "jsonl"
    schemes = ("jsonl",)
    suffixes: tuple[str, ...] = ()

    def open(self, location: str, *, read_only: bool = False) -> JsonlStore:
        if read_only:
            return JsonlStore.open_reader(location)
        return JsonlStore.open_writer(location)

    def recognizes(self, path: str) -> bool:
        """An existing directory holding the jsonl store marker."""
        return is_store_dir(path)


@hookimpl
def pyattacker_stores(register: Any) -> None:
    register(JsonlStoreOpener())
