"""The artifact backend contract suite, for a backend package's own tests.

Subclass ``ArtifactBackendContract`` (the class name must start with ``Test``) and say which
registered backend to build and with what::

    from pyattacker.testing import ArtifactBackendContract

    class TestMyBackend(ArtifactBackendContract):
        kind = "s3"
        params = {"bucket": "test", "prefix": "{tmp}"}   # {tmp}: a new folder per test

The backend is built as a run builds it (``run.artifact_backend: {kind: ..., ...}``), through
the installed plugins, and rebuilt from its own ``describe()`` as ``export`` does.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import msgspec
import pytest

from pyattacker.digest import digest_bytes
from pyattacker.model import ArtifactRecord
from pyattacker.plugins.manager import get_plugins
from pyattacker.store.backends import resolve_backend

__all__ = ["ArtifactBackendContract"]

#: payloads every backend must give back byte for byte
PAYLOADS = (b"", b"x", bytes(range(256)) * 3, os.urandom(1 << 20))


def record(payload: bytes, seq: int = 0, pipeline_id: str = "p1") -> ArtifactRecord:
    """An artifact row as the runner makes it (real digest and size)."""
    return ArtifactRecord(
        artifact_id=f"{pipeline_id}:{seq}",
        pipeline_id=pipeline_id,
        task_name="t",
        seq=seq,
        type_name="bytes",
        codec="bytes",
        digest=digest_bytes(payload),
        size=len(payload),
        created_at=1.0,
        payload=payload,
    )


class ArtifactBackendContract:
    """The contract suite; see the module docstring for how to use it."""

    #: the registered kind (``register(kind, factory)``)
    kind: ClassVar[str] = ""
    #: the factory's parameters; ``{tmp}`` in a string is replaced by a new folder per test
    params: ClassVar[Mapping[str, Any]] = {}

    def spec(self, tmp_path: Path) -> dict[str, Any]:
        def fill(value: Any) -> Any:
            return value.format(tmp=tmp_path) if isinstance(value, str) else value

        return {"kind": self.kind, **{k: fill(v) for k, v in self.params.items()}}

    @pytest.fixture
    def backend(self, tmp_path: Path) -> Any:
        if not self.kind:
            raise AssertionError(f"{type(self).__name__}: set the class attribute kind")
        return resolve_backend(self.spec(tmp_path), get_plugins().artifact_backends)

    def test_registered_under_its_kind(self, backend: Any) -> None:
        assert self.kind in get_plugins().artifact_backends
        assert backend.describe()["kind"] == self.kind

    def test_describe_is_json_and_rebuilds_a_reader(self, backend: Any) -> None:
        """``describe()`` is stored in the run row; ``export`` rebuilds the backend from it (for
        reading, without ``prepare_to_write``) and must read back what the first one put."""
        described = backend.describe()
        assert msgspec.json.decode(msgspec.json.encode(described)) == described
        rows = [backend.put(record(p, seq)) for seq, p in enumerate(PAYLOADS)]
        reader = resolve_backend(described, get_plugins().artifact_backends, for_writing=False)
        for row, payload in zip(rows, PAYLOADS, strict=True):
            assert reader.hydrate(row).payload == payload

    @pytest.mark.parametrize("size", [len(p) for p in PAYLOADS])
    def test_put_then_hydrate_gives_the_bytes_back(self, backend: Any, size: int) -> None:
        payload = next(p for p in PAYLOADS if len(p) == size)
        original = record(payload)
        stored = backend.put(original)
        assert (stored.digest, stored.size, stored.seq) == (original.digest, original.size, original.seq)
        if stored.payload is None:
            assert stored.blob_ref, "put moved the bytes out without saying where (blob_ref)"
        else:
            assert stored.payload == payload
        assert backend.hydrate(stored).payload == payload

    def test_identity_put_means_put_returns_its_argument(self, backend: Any) -> None:
        if getattr(backend, "identity_put", False) is not True:
            pytest.skip("put may move bytes (identity_put is not declared)")
        original = record(b"abc")
        assert backend.put(original) is original

    def test_the_same_bytes_twice_both_hydrate(self, backend: Any) -> None:
        payload = os.urandom(4096)
        first, second = backend.put(record(payload, 0)), backend.put(record(payload, 1, "p2"))
        assert backend.hydrate(first).payload == payload == backend.hydrate(second).payload

    def test_never_hands_back_bytes_of_another_digest(self, backend: Any) -> None:
        """A row whose digest the stored bytes do not match (damage, a reused reference) is
        unavailable (payload None: resume recomputes it), never another value."""
        stored = backend.put(record(os.urandom(2048)))
        if stored.payload is not None:
            pytest.skip("this backend keeps the bytes in the row")
        other = msgspec.structs.replace(stored, digest=digest_bytes(b"other"), size=5)
        assert backend.hydrate(other).payload is None
