"""The ``write_jsonl`` task factory: writes its input as one JSON line to a file.

``use: write_jsonl`` with ``kwargs: {path: out/results.jsonl, mode: a}``. ``mode: a`` (the
default) appends a line per pipeline; ``w`` rewrites the file each time (the last pipeline's
line stays). The folder is created; a relative ``path`` is relative to the folder the run is
started from. The result is ``{"written": <path>, "bytes": <bytes written>}``.

Each line is written with one ``write`` on a file opened for appending, so lines of concurrent
pipelines, and of shards writing to one file, never interleave. Like any side effect, a line is
written at least once: a crash after the write and before the task's checkpoint writes it again
on resume.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pyattacker import ConfigError, TaskSpec, hookimpl
from pyattacker.flow.taskspec import factory_task
from pyattacker.plugins.hookspecs import Register

__all__ = ["write_jsonl"]

_FLAGS = {"a": os.O_WRONLY | os.O_CREAT | os.O_APPEND, "w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC}


@factory_task
def write_jsonl(path: str, mode: str = "a") -> TaskSpec:
    """Build the task; ``path`` and ``mode`` are checked here (``validate``)."""
    if not isinstance(path, str) or not path.strip():
        raise ConfigError(f"write_jsonl: path must be a file path, got {path!r}")
    if mode not in _FLAGS:
        raise ConfigError(f"write_jsonl: mode must be a (append) or w (rewrite), got {mode!r}")
    flags = _FLAGS[mode]

    def write(value: Any) -> dict[str, Any]:
        line = (json.dumps(value, ensure_ascii=False, default=str) + "\n").encode("utf-8")
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, flags, 0o666)
        try:
            written = os.write(fd, line)
        finally:
            os.close(fd)
        return {"written": path, "bytes": written}

    write.__qualname__ = "write_jsonl.write"
    return TaskSpec(write, name="write_jsonl")


@hookimpl
def pyattacker_tasks(register: Register) -> None:
    register("write_jsonl", write_jsonl)
