"""The ``jsonl`` event sink: every committed event appended as one JSON line to ``path``.

Lines are written per committed batch and flushed, so a crash loses at most the batch being
written; ``tail -f`` on the file follows a run without touching its store.
"""

from __future__ import annotations

import os
from typing import Any

import msgspec

from pyattacker.errors import ConfigError
from pyattacker.hookspecs import hookimpl
from pyattacker.model import EventRecord

__all__ = ["JsonlSink"]


class JsonlSink:
    """Appends events to ``path`` (parent directories are created; the file is opened lazily)."""

    def __init__(self, path: str | os.PathLike[str], fsync: bool = False) -> None:
        if not path:
            raise ConfigError("event sink 'jsonl' needs a path option")
        self.path = os.fspath(path)
        self.fsync = fsync
        self._fh: Any = None
        self._encoder = msgspec.json.Encoder()

    def handle(self, events: list[EventRecord]) -> None:
        if not events:
            return
        if self._fh is None:
            parent = os.path.dirname(os.path.abspath(self.path))
            os.makedirs(parent, exist_ok=True)
            self._fh = open(self.path, "ab")  # noqa: SIM115 - lives until close()
        self._fh.write(b"".join(self._encoder.encode(ev) + b"\n" for ev in events))
        self._fh.flush()
        if self.fsync:
            os.fsync(self._fh.fileno())

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


@hookimpl
def pyattacker_event_sinks(register: Any) -> None:
    register("jsonl", JsonlSink)
