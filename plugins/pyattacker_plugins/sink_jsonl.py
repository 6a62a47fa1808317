"""The ``jsonl`` event sink: every committed event appended as one JSON line to ``path``.

Lines are written per committed batch and flushed, so a crash loses at most the batch being
written; ``tail -f`` on the file follows a run without touching its store.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import msgspec

from pyattacker import ConfigError, hookimpl
from pyattacker.model import EventRecord
from pyattacker.paths import unwritable

__all__ = ["JsonlSink"]


class JsonlSink:
    """Appends events to ``path`` (parent directories are created; the file is opened lazily)."""

    def __init__(self, path: str | os.PathLike[str], fsync: bool = False) -> None:
        problems = self.validate({"path": path, "fsync": fsync})
        if problems:
            raise ConfigError(f"event sink 'jsonl': {'; '.join(problems)}")
        self.path = os.fspath(path)
        self.fsync = fsync
        # looked at when the run starts: a path that cannot be written (a directory, under a
        # file) would lose every event of the run, with one warning, while the run goes on
        problem = unwritable(self.path, directory=False)
        if problem:
            raise ConfigError(f"event sink 'jsonl': path: {problem}")
        self._fh: Any = None
        self._encoder = msgspec.json.Encoder()

    @staticmethod
    def validate(options: Mapping[str, Any]) -> list[str]:
        """Option problems as ``"field: message"``, for ``validate`` to report before a run: a
        number as ``path`` would only fail when the run builds the sink (a traceback), and a
        string as ``fsync`` ("no") would be true."""
        problems = []
        path = options.get("path")
        if not isinstance(path, str | os.PathLike) or not os.fspath(path):
            problems.append(f"path: must be a non-empty path string, got {path!r}")
        fsync = options.get("fsync", False)
        if not isinstance(fsync, bool):
            problems.append(f"fsync: must be true or false, got {fsync!r}")
        return problems

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
