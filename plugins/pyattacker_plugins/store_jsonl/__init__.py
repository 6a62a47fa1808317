"""The ``jsonl`` store plugin: a directory holding an append-only JSON Lines journal.

``jsonl:runs/x`` opens (or creates) the directory ``runs/x``; an existing directory that holds
the store's marker file is recognised without the scheme. Cheaper per row than SQLite and
trivially inspectable with text tools, at the price of replaying the journal on open.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyattacker import hookimpl
from pyattacker.plugins.api import StoreOpenerBase, location_path

from .marker import MARKER, is_store_dir

if TYPE_CHECKING:
    from .store import JsonlStore

__all__ = ["FORMAT_VERSION", "JOURNAL", "MARKER", "JsonlStore", "JsonlStoreOpener"]


def __getattr__(name: str) -> Any:
    """The store module's names, imported when first asked for: every process that discovers
    plugins imports this package, and only the ones that open a jsonl store need the store."""
    if name in ("FORMAT_VERSION", "JOURNAL", "JsonlStore"):
        from . import store

        return getattr(store, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class JsonlStoreOpener(StoreOpenerBase):
    """Opens ``JsonlStore`` directories."""

    name = "jsonl"
    schemes = ("jsonl",)
    suffixes: tuple[str, ...] = ()

    def open(self, location: str, *, read_only: bool = False) -> JsonlStore:
        from .store import JsonlStore  # start-up: as ``__getattr__`` above

        path = location_path(location)
        if read_only:
            return JsonlStore.open_reader(path)
        return JsonlStore.open_writer(path)

    def recognizes(self, path: str) -> bool:
        """An existing directory holding the jsonl store marker."""
        return is_store_dir(path)


@hookimpl
def pyattacker_stores(register: Any) -> None:
    register(JsonlStoreOpener())
