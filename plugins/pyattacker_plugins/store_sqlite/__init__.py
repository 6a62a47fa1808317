"""The ``sqlite`` store plugin: the embedded default store (one file, WAL, one writer).

Locations: ``runs/x.db`` (suffixes ``.db``, ``.sqlite``, ``.sqlite3``), ``sqlite:runs/x``, or
any path no other plugin claims. ``?synchronous=full`` (or ``PYATTACKER_SQLITE_SYNCHRONOUS=full``)
trades one fsync per commit for durability of the last commit across power loss.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl

from pyattacker import ConfigError, hookimpl
from pyattacker.plugins.api import StoreOpenerBase, location_path

from .opening import synchronous_mode
from .schema import APPLICATION_ID, SCHEMA_VERSION
from .store import SqliteStore

__all__ = ["APPLICATION_ID", "SCHEMA_VERSION", "SqliteStore", "SqliteStoreOpener", "split_location"]

_OPTIONS = ("synchronous",)


def split_location(location: str) -> tuple[str, dict[str, str]]:
    """``path?opt=v`` -> (path, options); unknown options are a ``ConfigError``."""
    path, _, query = location.partition("?")
    options = dict(parse_qsl(query, keep_blank_values=True))
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        raise ConfigError(f"store {location!r}: unknown sqlite option(s) {', '.join(unknown)}")
    if not path:
        raise ConfigError(f"store {location!r}: missing file path")
    return path, options


class SqliteStoreOpener(StoreOpenerBase):
    """Opens ``SqliteStore`` files; the fallback for locations nobody else recognises."""

    name = "sqlite"
    schemes = ("sqlite",)
    suffixes = (".db", ".sqlite", ".sqlite3")

    def open(self, location: str, *, read_only: bool = False) -> SqliteStore:
        path, options = split_location(location_path(location))
        if read_only:
            return SqliteStore.open_reader(path)
        return SqliteStore.open_writer(path, synchronous_mode(options))


@hookimpl
def pyattacker_stores(register: Any) -> None:
    register(SqliteStoreOpener())
