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
import re
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from pyattacker.errors import ConfigError
from pyattacker.store.location import list_stores, local_file, scheme_of

__all__ = [
    "SHARD_ENV",
    "capacity_share",
    "check_resume_layout",
    "in_shard",
    "is_memory_store",
    "parse_capacity_share",
    "parse_shard",
    "shard_index",
    "shard_keeper",
    "shard_layouts",
    "shard_specs",
    "shard_store_path",
    "shard_store_pattern",
    "split_capacity",
]

#: Environment variable naming this process's shard ("I/N"); the spec's spelling (one T).
SHARD_ENV = "PYATACKER_SHARD"

#: BLAKE2b-128 with nothing hashed yet, copied per key: cheaper than a new hasher, whose
#: keyword arguments are parsed on every call (a shard hashes every key of the dataset)
_EMPTY = hashlib.blake2b(digest_size=16)
_from_bytes = int.from_bytes


def _number(key: str) -> int:
    """The first 8 bytes of the key's BLAKE2b-128 digest, big-endian."""
    hasher = _EMPTY.copy()
    hasher.update(key.encode("utf-8"))
    return _from_bytes(hasher.digest()[:8], "big")


def shard_index(key: str, n: int) -> int:
    """The shard (``0 <= i < n``) of a pipeline key: first 16 hex of BLAKE2b-128, modulo n.

    Read as the digest's first 8 bytes, big-endian: the same number as parsing the hex, without
    the hex (a shard calls this for every seed of the dataset, a shard store's read for every
    pipeline in it)."""
    if n < 1:
        raise ConfigError(f"shard count must be >= 1, got {n}")
    return _number(key) % n


def in_shard(key: str, index: int, count: int) -> bool:
    """Whether ``key`` belongs to shard ``index`` of ``count`` (everything does when count <= 1)."""
    return count <= 1 or shard_index(key, count) == index


def shard_keeper(index: int, count: int) -> Callable[[str], bool]:
    """``in_shard`` for one shard, as a function of the key alone (the count checked once):
    what a shard's seed stream calls for every key of the dataset."""
    if count < 1:
        raise ConfigError(f"shard count must be >= 1, got {count}")
    return lambda key: _number(key) % count == index


def shard_specs(specs: Iterable[Any], index: int, count: int, key: str = "pipeline_id") -> Iterator[Any]:
    """Lazily keep the specs of one shard (``key`` names the attribute holding the pipeline key)."""
    if count <= 1:
        yield from specs
        return
    keep = shard_keeper(index, count)
    for spec in specs:
        if keep(getattr(spec, key)):
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
    """``runs/qa.db`` -> ``runs/qa.shard1of4.db`` (a missing suffix becomes ``.db``); a store
    plugin's location gets the mark at its end: ``s3://b/qa`` -> ``s3://b/qa.shard1of4``.

    One shard (count <= 1) and in-memory stores are returned unchanged.
    """
    if count <= 1 or is_memory_store(base):
        return base
    if local_file(base) is None:
        return f"{base}.shard{index}of{count}"
    root, ext = os.path.splitext(base)
    return f"{root}.shard{index}of{count}{ext or '.db'}"


def shard_layouts(base: str) -> dict[int, list[str]]:
    """The stores of ``base`` on this machine, by shard count: ``1`` is ``base`` itself (an
    unsharded run), ``N >= 2`` the ``<root>.shard{i}ofN<ext>`` files (``shard_store_path``).

    A resume only opens its own shard's store, so this is how it tells "nothing was run yet"
    from "it was run with another shard count". In-memory stores: ``{}``; a store plugin's
    location: what its opener's ``list_stores`` finds (``{}`` for openers that cannot list).
    """
    import glob  # here: the module is imported by every process that discovers the plugins

    if is_memory_store(base):
        return {}
    path = local_file(base)
    if path is None:
        return _listed_layouts(base)
    found: dict[int, list[str]] = {1: [path]} if os.path.exists(path) else {}
    root, ext = os.path.splitext(path)
    ext = ext or ".db"
    candidates = glob.glob(glob.escape(root) + ".shard*of*" + glob.escape(ext))
    _add_shards(found, candidates, re.escape(root), re.escape(ext))
    return {n: sorted(paths) for n, paths in sorted(found.items())}


def _listed_layouts(base: str) -> dict[int, list[str]]:
    """``shard_layouts`` of a store plugin's location, from its opener's ``list_stores``."""
    if scheme_of(base) is None:
        return {}
    listed = list_stores(base)
    found: dict[int, list[str]] = {1: [base]} if base in listed else {}
    _add_shards(found, listed, re.escape(base), "")
    return {n: sorted(paths) for n, paths in sorted(found.items())}


def _add_shards(found: dict[int, list[str]], candidates: Iterable[str], root: str, ext: str) -> None:
    pattern = re.compile(root + r"\.shard(\d+)of(\d+)" + ext)
    for candidate in candidates:
        match = pattern.fullmatch(candidate)
        if match and 0 <= int(match[1]) < int(match[2]) and int(match[2]) >= 2:
            found.setdefault(int(match[2]), []).append(candidate)


def shard_store_pattern(base: str, count: int) -> str:
    """``runs/qa.db``, 4 -> ``runs/qa.shard*of4.db``: every store of a ``count``-shard run."""
    return shard_store_path(base, 0, count).replace(".shard0of", ".shard*of")


def _layout_names(base: str, layouts: dict[int, list[str]]) -> str:
    """``a run with --shards 2 (runs/qa.shard*of2.db)``, ``a run without --shards (runs/qa.db)``."""
    names = [
        f"a run without --shards ({base})"
        if n == 1
        else f"a run with --shards {n} ({shard_store_pattern(base, n)})"
        for n in layouts
    ]
    return " and of ".join(names)


def _layout_hint(layouts: dict[int, list[str]]) -> str:
    hints = [
        "without --shards / --shard" if n == 1 else f"with --shards {n} (or --shard I/{n})" for n in layouts
    ]
    return " or ".join(hints)


def check_resume_layout(base: str, count: int, flag: str) -> None:
    """Refuse a resume (``flag``: how it was asked, e.g. ``--shards 3``) whose ``count`` finds
    none of its stores while the stores of another shard count (or of an unsharded run) exist.

    A pipeline's shard depends on N, and each shard resumes from its own store only: resuming
    with another N finds nothing to continue, so it would send every pipeline's tasks again
    (answers already paid for included) into a new set of stores. A resume of a run that never
    started (no store at all) is still allowed: that is a fresh run, as documented.
    """
    layouts = shard_layouts(base)
    if not layouts or count in layouts:
        return
    asked = f"resume {flag}" if flag else "resume"
    mine = (
        f"store {base} does not exist"
        if count <= 1
        else f"no store of a {count}-shard run exists ({shard_store_pattern(base, count)})"
    )
    raise ConfigError(
        f"{asked}: {mine}, but the stores of"
        f" {_layout_names(base, layouts)} do; resume {_layout_hint(layouts)}. A pipeline's shard"
        " depends on the shard count, so this resume would find nothing to continue and run every"
        " pipeline again (tasks already answered included) into new stores"
    )


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
