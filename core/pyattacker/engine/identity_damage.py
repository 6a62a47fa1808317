"""Telling a damaged pipeline row from a changed configuration.

A stored pipeline whose seed or chain digest differs from the admitted one is normally a changed
configuration (``PipelineIdentityConflict``). When the digests themselves show that the stored
bytes changed (a digest that is not one, a key that the stored digests do not derive, a seed
row whose digest is the admitted seed's), saying "stored with a different seed" would send the
user looking for a change nobody made. Only asked once a conflict is found (never per pipeline).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from pyattacker.digest import DIGEST_SIZE, digest_bytes
from pyattacker.model import PipelineRecord

if TYPE_CHECKING:
    from pyattacker.flow.chain import PipelineSpec

__all__ = ["damage_of"]

_HEX = re.compile(rf"[0-9a-f]{{{2 * DIGEST_SIZE}}}")
_SPEC = re.compile(rf"v2:[0-9a-f]{{{2 * DIGEST_SIZE}}}")


def damage_of(spec: PipelineSpec, row: PipelineRecord, store: Any) -> str | None:
    """Why ``row`` (whose identity differs from ``spec``'s) must be damaged, or None when the
    evidence is that of a changed configuration."""
    if not _HEX.fullmatch(row.seed_digest):
        return f"its seed_digest {row.seed_digest!r} is not a digest"
    if not _SPEC.fullmatch(row.spec_digest):
        return f"its spec_digest {row.spec_digest!r} is not a digest"
    template = spec.template
    derived = digest_bytes(f"{template.spec_digest}|{spec.seed_digest}|{spec.repeat}".encode())
    if spec.key == derived:  # a key made from the identity: another seed or chain has another key
        return (
            "its key is derived from this seed and chain, so the stored"
            f" {'spec' if row.spec_digest != template.spec_digest else 'seed'}_digest cannot differ"
        )
    if row.seed_digest != spec.seed_digest:
        try:
            seed = store.get_artifact(spec.key, -1)
        except Exception:  # (a seed row that cannot be read proves nothing either way)
            return None
        if seed is not None and seed.digest == spec.seed_digest:
            return "the seed stored with it has this very seed's digest, unlike the row's seed_digest"
    return None
