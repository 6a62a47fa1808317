"""The plugin module: registers the ``snapshot`` store opener.

Every pyattacker process imports every plugin module, so this one stays cheap: the store itself
(``pyattacker_example_store.store``) is imported only when a snapshot store is opened.

Use it from a config (``run: {store: "snapshot:runs/x"}``) or a command line
(``pyattacker run -c cfg.yaml --store snapshot:runs/x``).
"""

from __future__ import annotations

from typing import Any

from pyattacker import hookimpl
from pyattacker.plugins.api import StoreBase, StoreOpenerBase, location_path

#: the version of the plugin API this module was written for (docs/plugins.md, "The plugin API")
PYATTACKER_PLUGIN_API = 2

#: the file in the store's folder that holds every row
SNAPSHOT_FILE = "snapshot.msgpack"


class SnapshotOpener(StoreOpenerBase):
    """Opens ``snapshot:path`` and ``snapshot://path`` (a folder, created by a writer)."""

    name = "snapshot"
    schemes = ("snapshot",)
    # no file suffix: the store is a folder, which ``recognizes`` claims once it holds a snapshot

    def open(self, location: str, *, read_only: bool = False) -> StoreBase:
        from pyattacker_example_store.store import SnapshotStore  # only when a store is opened

        return SnapshotStore(location, folder=location_path(location), read_only=read_only)

    def recognizes(self, path: str) -> bool:
        """Claim an existing folder given without the scheme (``pyattacker report runs/x``)."""
        import os

        return os.path.isfile(os.path.join(path, SNAPSHOT_FILE))


@hookimpl
def pyattacker_stores(register: Any) -> None:
    register(SnapshotOpener())
