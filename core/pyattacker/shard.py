"""Shards: which pipeline runs in which process, and where each shard writes.

A pipeline's shard is a pure function of its content-addressed key (BLAKE2b, never Python's
salted ``hash``), so the same dataset splits the same way in every process and on every
machine, and ``--resume`` puts every pipeline back into the store it ran in. Filtering is
lazy: a shard process walks the seed stream and keeps its share, it never materialises it.

Capacity sharing lives here too: N shards against one endpoint must not open N times the
leases the endpoint allows, so each *concurrently running* shard gets a slice of it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator
from typing import Any

from .errors import ConfigError

__all__ = [
    "SHARD_ENV",
    "capacity_share",
    "in_shard",
    "is_memory_store",
    "parse_capacity_share",
    "parse_shard",
    "shard_index",
    "shard_specs",
    "shard_store_path",
    "split_capacity",
]

#: Environment variable naming this process's shard ("I/N"); the spec's spelling (one T).
SHARD_ENV = "PYATACKER_SHARD"


def shard_index(key: str, n: int) -> int:
    """The shard (``0 <= i < n``) of a pipeline key: first 16 hex of BLAKE2b-128, modulo n."""
    if n < 1:
        raise ConfigError(f"shard count must be >= 1, got {n}")
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=16).hexdigest()
    return int(digest[:16], 16) % n


def in_shard(key: str, index: int, count: int) -> bool:
    """Whether ``key`` belongs to shard ``index`` of ``count`` (everything does when count <= 1)."""
    return count <= 1 or shard_index(key, count) == index


def shard_specs(specs: Iterable[Any], index: int, count: int, key: str = "pipeline_id") -> Iterator[Any]:
    """Lazily keep the specs of one shard (``key`` names the attribute holding the pipeline key)."""
    if count <= 1:
        yield from specs
        return
    for spec in specs:
        if shard_index(getattr(spec, key), count) == index:
            yield spec


def _parse_pair(value: str, flag: str, what: str) -> tuple[int, int]:
    text = value.strip() if isinstance(value, str) else value
    if not isinstance(text, str) or "/" not in text:
        raise ConfigError(f"{flag}: expected I/N (e.g. 0/4), got {value!r}")
    left, _, right = text.partition("/")
    try:
        i, n = int(left), int(right)
    except ValueError:
        raise ConfigError(f"{flag}: I and N must be integers, got {value!r}") from None
    if n < 1:
        raise ConfigError(f"{flag}: N (the number of {what}) must be >= 1, got {value!r}")
    if not 0 <= i < n:
        raise ConfigError(f"{flag}: I must satisfy 0 <= I < N, got {value!r}")
    return i, n


def parse_shard(value: str, flag: str = "--shard") -> tuple[int, int]:
    """``"I/N"`` -> ``(I, N)``; anything else is a ``ConfigError`` naming the flag."""
    return _parse_pair(value, flag, "shards")


def parse_capacity_share(value: str, flag: str = "--capacity-share") -> tuple[int, int]:
    """``"S/J"`` (slot S of J concurrently running shards) -> ``(S, J)``."""
    return _parse_pair(value, flag, "concurrent shards")


def is_memory_store(location: str | None) -> bool:
    """In-memory stores die with their process, so they cannot hold a shard to merge later."""
    return location is not None and (location in ("", ":memory:") or location.startswith("memory:"))


def shard_store_path(base: str, index: int, count: int) -> str:
    """``runs/qa.db`` -> ``runs/qa.shard1of4.db`` (a missing suffix becomes ``.db``).

    One shard (count <= 1) and in-memory stores are returned unchanged.
    """
    if count <= 1 or is_memory_store(base):
        return base
    root, ext = os.path.splitext(base)
    return f"{root}.shard{index}of{count}{ext or '.db'}"


def split_capacity(capacity: int, slots: int) -> list[int]:
    """One endpoint's capacity over ``slots`` concurrent shards: ``max(1, capacity // slots)``
    each, the remainder to the first slots, so the shares add up to the capacity whenever
    ``capacity >= slots`` (below that every slot still gets 1, and the sum exceeds it)."""
    if slots < 1:
        raise ConfigError(f"capacity must be split over >= 1 shard, got {slots}")
    base, extra = divmod(capacity, slots)
    return [max(1, base + (1 if s < extra else 0)) for s in range(slots)]


def capacity_share(capacity: int, slot: int, slots: int) -> int:
    """The share of slot ``slot`` (see ``split_capacity``)."""
    return split_capacity(capacity, slots)[slot]
