"""Content addressing: canonical JSON and BLAKE2b-128 digests used for every identity."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import msgspec

_encoder = msgspec.json.Encoder(order="sorted")


def canonical_json(value: Any) -> bytes:
    """Sorted keys, compact separators, UTF-8: the same value always gives the same bytes."""
    return _encoder.encode(value)


def digest_bytes(data: bytes) -> str:
    """Hex BLAKE2b with a 16-byte digest (32 hex characters)."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def digest_of(value: Any) -> str:
    """Digest of a JSON-able value through its canonical encoding."""
    return digest_bytes(canonical_json(value))


def prefixed_digest(prefix: bytes = b"") -> Callable[[bytes], str]:
    """``digest_bytes(prefix + data)`` for many ``data``: binding a million seeds pays the
    hasher's set-up (and the prefix) once, then copies its state (about a third cheaper)."""
    base = hashlib.blake2b(prefix, digest_size=16)

    def digest(data: bytes) -> str:
        hasher = base.copy()
        hasher.update(data)
        return hasher.hexdigest()

    return digest
