"""Shared plumbing of the read-only views (report, export, watch and the serve plugin).

Views never write: every store is opened read-only, so they can run beside a live run, and
they all pick "which run" the same way (the latest *started* run unless told otherwise), so
two views of one store never silently disagree about what they show.
"""

from __future__ import annotations

import base64
import glob
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import msgspec

from pyattacker.digest import payload_mismatch
from pyattacker.errors import ConfigError
from pyattacker.model import ArtifactRecord, RunRecord
from pyattacker.plugins.store_base import StoreBase
from pyattacker.store.location import local_file, open_store, rebase_local, scheme_of
from pyattacker.views.blobs import ViewCodecs

__all__ = [
    "ALL_RUNS",
    "DAMAGED",
    "RunChoice",
    "choose_run",
    "encode_json",
    "expand_locations",
    "latest_run",
    "open_view",
    "read_only_store",
    "render_payload",
    "to_plain",
]

#: the ``payload_encoding`` of an artifact whose bytes do not match its stored digest
DAMAGED = "damaged"
#: ``--run-id all``: every run of the store, aggregated.
ALL_RUNS = "all"
_GLOB_CHARS = frozenset("*?[")
_json = msgspec.json.Encoder(order="deterministic")


def to_plain(row: Any) -> Any:
    """A record (or anything msgspec knows) as JSON-ready builtins; bytes become base64, and
    dict keys that are not strings (a payload kept exactly by msgpack) become strings, as JSON
    requires."""
    return msgspec.to_builtins(row, enc_hook=_enc_hook, str_keys=True)


def _enc_hook(value: Any) -> Any:
    if isinstance(value, set | frozenset):
        return sorted(value, key=repr)
    return repr(value)


def encode_json(value: Any) -> bytes:
    """Compact, deterministic JSON (keys in a stable order); raw text stays raw, never HTML."""
    return _json.encode(to_plain(value))


def encode_plain(value: Any) -> bytes:
    """``encode_json`` of a value that is builtins already (no second conversion unless a
    decoded payload holds what JSON cannot: keys that are not strings)."""
    try:
        return _json.encode(value)
    except TypeError:
        return _json.encode(to_plain(value))


def expand_locations(args: Sequence[str]) -> list[str]:
    """STORE arguments with glob patterns expanded (sorted); a pattern matching nothing is an error.

    A literal path that exists is taken as is even if it contains glob characters.
    """
    out: list[str] = []
    for arg in args:
        if scheme_of(arg) is not None:
            out.extend(_expand_scheme(arg))
        elif _GLOB_CHARS & set(arg) and not os.path.exists(arg):
            out.extend(_matches(arg, arg))
        else:
            out.append(arg)
    return out


def _matches(pattern: str, arg: str) -> list[str]:
    matches = sorted(m for m in glob.glob(pattern) if not m.endswith(("-wal", "-shm", ".lock")))
    if not matches:
        raise ConfigError(f"store pattern {arg!r} matches no file")
    return matches


def _expand_scheme(arg: str) -> list[str]:
    """A location with a scheme: only its path is a pattern (``sqlite:runs/*.db?synchronous=full``);
    the ``?`` of its options is not a glob character (else ``sqlite:x.db?synchronous=full`` would be
    a pattern that matches nothing). Locations that are not local files are taken as they are."""
    path = local_file(arg)
    if path is None or not (_GLOB_CHARS & set(path)) or os.path.exists(path):
        return [arg]
    return [rebase_local(arg, _constant(match)) for match in _matches(path, arg)]


def _constant(path: str) -> Callable[[str], str]:
    return lambda _old: path


def open_view(location: str) -> StoreBase:
    """Open a store read-only; missing or foreign stores raise ``ConfigError`` (exit 2)."""
    if location in ("", ":memory:") or location.startswith("memory:"):
        raise ConfigError(f"store {location!r}: an in-memory store cannot be viewed from another process")
    return open_store(location, read_only=True)


@contextmanager
def read_only_store(location: str) -> Iterator[StoreBase]:
    """``open_view`` as a context manager that always closes the connection."""
    store = open_view(location)
    try:
        yield store
    finally:
        store.close()


def latest_run(runs: Iterable[RunRecord]) -> RunRecord | None:
    """The run that started last (ties broken by id, like the store's own order)."""
    best: RunRecord | None = None
    for run in runs:
        if best is None or (run.started_at, run.run_id) >= (best.started_at, best.run_id):
            best = run
    return best


class RunChoice(msgspec.Struct, kw_only=True):
    """Which run a view shows, and why (``latest``, ``explicit``, ``all`` or ``empty``)."""

    run_id: str | None
    how: str
    run: RunRecord | None = None

    def describe(self) -> str:
        if self.how == "all":
            return "all runs (aggregate)"
        if self.run_id is None:
            return "no run recorded yet"
        status = f", {self.run.status}" if self.run is not None else ""
        label = f", label {self.run.label!r}" if self.run is not None and self.run.label else ""
        why = "latest started run" if self.how == "latest" else "chosen with --run-id"
        return f"run {self.run_id} ({why}{status}{label})"


def choose_run(store: StoreBase, requested: str | None) -> RunChoice:
    """Resolve ``--run-id``: None = latest started run, ``all`` = aggregate, else that run."""
    if requested == ALL_RUNS:
        return RunChoice(run_id=None, how="all")
    if requested:
        run = store.get_run(requested)
        if run is None:
            raise ConfigError(
                f"store {store.location}: no run {requested!r}"
                f" (`pyattacker runs {store.location}` lists them)"
            )
        return RunChoice(run_id=requested, how="explicit", run=run)
    run = latest_run(store.runs())
    if run is None:
        return RunChoice(run_id=None, how="empty")
    return RunChoice(run_id=run.run_id, how="latest", run=run)


def render_payload(artifact: ArtifactRecord, codecs: Any) -> tuple[Any, str]:
    """``(value, encoding)`` of an artifact for a view: decoded JSON-ready data when a codec can
    decode it (``"decoded"``), else base64 of the raw bytes (``"base64"``); ``(None, "absent")``
    when the bytes were never kept, or live in a blob no backend could read back (``codecs`` a
    ``ViewCodecs``, whose blob reader is asked first); ``(None, "damaged")`` when the bytes do
    not match the artifact's stored digest (changed on disk: never shown as a value).
    """
    if artifact.payload is None and artifact.blob_ref and isinstance(codecs, ViewCodecs):
        artifact = codecs.blobs.hydrate(artifact)
    if artifact.payload is None:
        return None, "absent"
    if payload_mismatch(artifact.digest, artifact.payload) is not None:
        if isinstance(codecs, ViewCodecs):
            codecs.damaged += 1
        return None, DAMAGED
    try:
        value = codecs.decode(artifact.codec, artifact.type_name, artifact.payload)
        plain = to_plain(value)
        if isinstance(plain, str) and isinstance(value, bytes | bytearray):
            return base64.b64encode(bytes(value)).decode("ascii"), "base64"
        return plain, "decoded"
    except Exception:  # a view must never fail on one odd artifact
        return base64.b64encode(artifact.payload).decode("ascii"), "base64"
