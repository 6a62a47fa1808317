"""Random streams keyed by what they are for, so that two algorithms see the same luck.

``random.Random`` seeded with a string hashes it with SHA-512 (seed version 2), which is stable
across processes and Python builds; ``hash()`` is salted per process and is never used here.
"""

from __future__ import annotations

import random

__all__ = ["keyed_rng"]


def keyed_rng(*parts: object) -> random.Random:
    """A generator determined only by ``parts`` (joined with ``|``)."""
    return random.Random("|".join(str(p) for p in parts))
