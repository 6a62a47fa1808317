"""The ``file`` artifact backend: large payloads go to content-addressed files under ``root``.

A payload of at least ``min_bytes`` is written to ``<root>/<2 hex>/<rest of digest>`` through a
temp file in the same directory (fsynced, atomically renamed, directory fsynced), so a path that
exists always holds complete bytes and identical payloads share one file. Smaller payloads stay
inline. A missing file on read is not an error: the artifact is unavailable and resume
recomputes it. Bytes are checked on read (size and digest) and before a file is shared: a blob
truncated or replaced after it was written is never taken for the artifact, and the next
identical payload writes it again. There is no garbage collection; ``delete`` exists for
operators only.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any

import msgspec

from pyattacker import hookimpl
from pyattacker.digest import DIGEST_SIZE, digest_bytes
from pyattacker.model import ArtifactRecord
from pyattacker.paths import unwritable

__all__ = ["DEFAULT_MIN_BYTES", "FileBackend"]

DEFAULT_MIN_BYTES = 262_144
_TMP_PREFIX = ".tmp-"
_HEX = re.compile(r"[0-9a-f]{8,128}")
#: a digest made by ``digest_bytes`` (what the runner stores): hydrate checks the bytes against it
_OURS = re.compile(rf"[0-9a-f]{{{2 * DIGEST_SIZE}}}")
_REF = "file://"


class FileBackend:
    """Spills payloads of ``size >= min_bytes`` to files under ``root`` (created lazily)."""

    name = "file"

    def __init__(self, root: str | os.PathLike[str], min_bytes: int = DEFAULT_MIN_BYTES) -> None:
        problems = self.validate({"root": root, "min_bytes": min_bytes})
        if problems:
            raise ValueError("; ".join(problems))
        self.root = os.path.abspath(os.path.expanduser(os.fspath(root)))
        self.min_bytes = min_bytes

    def prepare_to_write(self) -> None:
        """Called when a run starts (not by views that only read blobs back): a root that is a
        file (or under one), or a folder this process cannot write, is found then, not after
        each pipeline's first task ran."""
        problem = unwritable(self.root, directory=True)
        if problem:
            raise ValueError(f"root: {problem}")

    @staticmethod
    def validate(params: Mapping[str, Any]) -> list[str]:
        """Parameter problems as ``"field: message"``; touches nothing on disk."""
        problems = []
        root = params.get("root")
        if not isinstance(root, str | os.PathLike) or not os.fspath(root):
            problems.append("root: required for kind 'file' (a directory path)")
        min_bytes = params.get("min_bytes", DEFAULT_MIN_BYTES)
        if isinstance(min_bytes, bool) or not isinstance(min_bytes, int) or min_bytes < 0:
            problems.append(f"min_bytes: must be a non-negative integer, got {min_bytes!r}")
        return problems

    # -- the backend protocol -------------------------------------------------------------
    def put(self, artifact: ArtifactRecord) -> ArtifactRecord:
        payload = artifact.payload
        if payload is None or len(payload) < self.min_bytes:
            return artifact
        path = self.path_for(_address(artifact.digest, payload))
        if not _holds(path, payload):  # absent, or damaged since it was written: (re)write it
            _write_atomically(path, payload)
        return msgspec.structs.replace(artifact, payload=None, blob_ref=_REF + path)

    def hydrate(self, artifact: ArtifactRecord) -> ArtifactRecord:
        if artifact.payload is not None or not artifact.blob_ref or not artifact.blob_ref.startswith(_REF):
            return artifact
        path = artifact.blob_ref[len(_REF) :]
        if not os.path.isabs(path):
            path = os.path.join(self.root, path)
        data = _read(path)
        if data is None and _HEX.fullmatch(artifact.digest):
            # not where the row says: the blob folder moved; its address under this root
            data = _read(self.path_for(artifact.digest))
        if data is None or not _is_payload_of(artifact, data):
            return artifact  # unavailable, truncated or replaced: resume recomputes
        return msgspec.structs.replace(artifact, payload=data)

    def describe(self) -> dict[str, Any]:
        return {"kind": self.name, "root": self.root, "min_bytes": self.min_bytes}

    # -- operator helpers -----------------------------------------------------------------
    def path_for(self, digest: str) -> str:
        return os.path.join(self.root, digest[:2], digest[2:])

    def stats(self) -> dict[str, int]:
        """Blob files and bytes under ``root`` (temp files ignored)."""
        files = total = 0
        for dirpath, _dirs, names in os.walk(self.root):
            for name in names:
                if name.startswith(_TMP_PREFIX):
                    continue
                try:
                    total += os.stat(os.path.join(dirpath, name)).st_size
                except OSError:
                    continue
                files += 1
        return {"files": files, "bytes": total}

    def delete(self, digest: str) -> bool:
        """Remove one blob (never called by the kernel); True when a file was removed."""
        try:
            os.unlink(self.path_for(digest))
        except FileNotFoundError:
            return False
        return True


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None


def _address(digest: str, payload: bytes) -> str:
    """The digest to file under: the row's, unless it is not plain hex (never trust a path)."""
    return digest if _HEX.fullmatch(digest) else digest_bytes(payload)


def _is_payload_of(artifact: ArtifactRecord, data: bytes) -> bool:
    """Whether ``data`` are the artifact's bytes: its size, and its digest when the row holds one
    of ``digest_bytes``'s (a blob replaced by other bytes of the same length is not it)."""
    if len(data) != artifact.size:
        return False
    return not _OURS.fullmatch(artifact.digest) or digest_bytes(data) == artifact.digest


def _holds(path: str, payload: bytes) -> bool:
    """Whether ``path`` already holds exactly ``payload`` (identical payloads share one file).

    Only a file of the right size is read and compared, so the usual case (no file yet) costs
    one ``stat``; a file truncated or replaced since it was written is not trusted."""
    try:
        if os.stat(path).st_size != len(payload):
            return False
        with open(path, "rb") as fh:
            return fh.read() == payload
    except OSError:
        return False


def _write_atomically(path: str, payload: bytes) -> None:
    import tempfile  # here: it imports ``shutil``, too slow for every process's plugin discovery

    directory = os.path.dirname(path)
    created = not os.path.isdir(directory)
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=_TMP_PREFIX, dir=directory)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(directory)
    if created:
        _fsync_dir(os.path.dirname(directory))


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@hookimpl
def pyattacker_artifact_backends(register: Any) -> None:
    register("file", FileBackend)
