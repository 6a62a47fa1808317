"""The ``jsonl`` seed source: one JSON value per line of a file, streamed line by line.

``source: {kind: jsonl, path: data.jsonl, limit: 100, key_field: id}``. A relative ``path`` is
resolved from the config file's folder. Blank lines are skipped, and so is a UTF-8 byte order
mark at the start of the file (editors on Windows write one); a line that is not JSON is a
``ConfigError`` naming the file and line, because silently dropping a row would change the
experiment. ``key_field`` gives explicit keys ``str(row[key_field])``, so the same row keeps
its pipeline even if the task chain changes (a changed chain under an old key is rejected).
"""

from __future__ import annotations

import codecs
import itertools
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import msgspec

from pyattacker import ConfigError, hookimpl
from pyattacker.plugins.hookspecs import Register

__all__ = ["JsonlOptions", "JsonlSource"]


class JsonlOptions(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """``path`` (required), ``limit`` (first N rows), ``key_field`` (explicit keys)."""

    path: Annotated[str, msgspec.Meta(min_length=1)]
    limit: Annotated[int, msgspec.Meta(ge=1)] | None = None
    key_field: Annotated[str, msgspec.Meta(min_length=1)] | None = None


def resolve_path(options: JsonlOptions, base_dir: Path) -> Path:
    path = Path(os.path.expanduser(options.path))
    return path if path.is_absolute() else base_dir / path


class JsonlSource:
    """Streams ``(key_or_None, row)`` pairs; memory stays flat whatever the file size."""

    name = "jsonl"
    options = JsonlOptions

    def check(self, options: JsonlOptions, base_dir: Path) -> None:
        """Called by ``run`` before anything starts: a missing file is a config error (exit 2)."""
        path = resolve_path(options, base_dir)
        if path.is_dir():
            raise ConfigError(f"source.path: {path} is a directory, not a JSONL file")
        if not path.is_file():
            raise ConfigError(f"source.path: file not found: {path}")

    def open(self, options: JsonlOptions, base_dir: Path) -> Iterator[tuple[str | None, Any]]:
        path = resolve_path(options, base_dir)
        try:
            fh = open(path, "rb")  # noqa: SIM115 - closed by the generator's finally
        except FileNotFoundError:
            raise ConfigError(f"source.path: file not found: {path}") from None
        except OSError as exc:
            raise ConfigError(f"source.path: cannot read {path}: {exc}") from None
        decoder = msgspec.json.Decoder()
        emitted = 0
        try:
            first = fh.readline()
            if first.startswith(codecs.BOM_UTF8):  # not JSON: "invalid character" at line 1
                first = first[len(codecs.BOM_UTF8) :]
            for lineno, line in enumerate(itertools.chain((first,), fh), start=1):
                if options.limit is not None and emitted >= options.limit:
                    return
                if not line.strip():
                    continue
                try:
                    row = decoder.decode(line)
                except msgspec.DecodeError as exc:
                    raise ConfigError(
                        f"{path}:{lineno}: invalid JSON line: {exc}{_hint(line, lineno)}"
                    ) from None
                except RecursionError:  # (the decoder's depth limit: say where, like any bad line)
                    raise ConfigError(
                        f"{path}:{lineno}: invalid JSON line: nested too deeply to be read"
                        " (arrays or objects inside each other beyond the decoder's depth limit)"
                    ) from None
                yield self._key(row, options, path, lineno), row
                emitted += 1
        finally:
            fh.close()

    @staticmethod
    def _key(row: Any, options: JsonlOptions, path: Path, lineno: int) -> str | None:
        field = options.key_field
        if field is None:
            return None
        if not isinstance(row, dict):
            raise ConfigError(
                f"{path}:{lineno}: key_field {field!r} needs a JSON object on each line, got"
                f" {type(row).__name__ if row is not None else 'null'}"
            )
        if field not in row:
            raise ConfigError(f"{path}:{lineno}: key_field {field!r} is missing from this row")
        value = row[field]
        if value is None or isinstance(value, dict | list):
            raise ConfigError(
                f"{path}:{lineno}: key_field {field!r} must be a string or number, got {value!r}"
            )
        return str(value)


def _hint(line: bytes, lineno: int) -> str:
    """What a first line that is not JSON probably is (only on that error)."""
    if lineno == 1 and line.startswith(b"\x1f\x8b"):
        return " (the file is gzip-compressed: decompress it first, e.g. gunzip -k)"
    return ""


@hookimpl
def pyattacker_sources(register: Register) -> None:
    register("jsonl", JsonlSource())
