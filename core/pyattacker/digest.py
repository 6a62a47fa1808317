"""Content addressing: canonical JSON and BLAKE2b-128 digests used for every identity."""

from __future__ import annotations

import hashlib
from typing import Any

import msgspec

_encoder = msgspec.json.Encoder(order="sorted")


def canonical_json(value: Any) -> bytes:
    """Sorted keys, compact separators, UTF-8: the same value always gives the same bytes."""
    return _encoder.encode(value)


#: every identity is a BLAKE2b digest of this many bytes (changing it orphans every stored pipeline)
DIGEST_SIZE = 16


#: a fresh hasher to copy: a copy skips the set-up and the keyword parsing of a new one (the
#: runner digests every task's output)
_FRESH = hashlib.blake2b(digest_size=DIGEST_SIZE)


def digest_bytes(data: bytes) -> str:
    """Hex BLAKE2b with a 16-byte digest (32 hex characters)."""
    hasher = _FRESH.copy()
    hasher.update(data)
    return hasher.hexdigest()


def digest_of(value: Any) -> str:
    """Digest of a JSON-able value through its canonical encoding."""
    return digest_bytes(canonical_json(value))


def blake2b_hasher(prefix: bytes = b"") -> Any:
    """A hasher of ``digest_bytes``'s kind that has consumed ``prefix``: ``copy()`` it, ``update``
    the copy with ``data``, and its ``hexdigest()`` is ``digest_bytes(prefix + data)``. Copying
    skips the set-up (and the prefix), much of a small digest's cost."""
    return hashlib.blake2b(prefix, digest_size=DIGEST_SIZE)


def payload_mismatch(digest: str, data: bytes) -> str | None:
    """None when ``data`` hash to ``digest`` (an artifact's stored digest); else what was found,
    for an event or a view. Every stored payload is checked this way when it is read back: bytes
    changed on disk must never pass for a task's output."""
    found = digest_bytes(data)
    if found == digest:
        return None
    return f"its {len(data)} stored bytes hash to {found}, not to the stored digest {digest!r} (damaged)"
