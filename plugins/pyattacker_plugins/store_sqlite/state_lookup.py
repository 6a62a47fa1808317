"""What a resume asks for every chunk of seeds: the stored state of each pipeline id.

Pipeline ids are random digests, so finding a row by id costs a descent of the id index with a
32-character comparison at every level, one id at a time. But a resume usually meets its seeds
in the order the first run stored them, because keys are numbered in admission order. So the
rows for the next chunk of ids are most likely the next rows in key order, and a range read
returns them at the cost of a sequential scan. ``StateLookup`` reads ahead from where the last
chunk matched, probes the index only for the ids the read missed, and stops reading ahead as
soon as most of a chunk is not where it predicted (seeds in another order), until a chunk found
through the index is contiguous again. Whatever the order, the answer is exact: a range read
only saves probes, it never decides that an id is absent.

A probe also tells which ids have no key at all: those are added to ``absent`` (the writer's
set), so that the first commit of such a pipeline registers its key without looking it up again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

__all__ = ["StateLookup"]

_RANGE_SQL = (
    "SELECT pipeline_id, state, spec_digest, seed_digest, run_id, pk FROM pipelines"
    " WHERE pk >= ? ORDER BY pk LIMIT ?"
)

State = tuple[str, str, str, str]


@lru_cache(maxsize=64)
def _probe_sql(n: int, ids: str) -> str:
    marks = ", ".join("?" for _ in range(n))
    return (
        "SELECT k.pipeline_id, p.state, p.spec_digest, p.seed_digest, p.run_id, p.pk"
        f" FROM {ids} AS k LEFT JOIN pipelines AS p ON p.pk = k.pk WHERE k.pipeline_id IN ({marks})"
    )


class StateLookup:
    """``(state, spec_digest, seed_digest, run_id)`` per stored id, reading ahead in key order."""

    def __init__(
        self,
        query: Callable[[str, Sequence[Any]], list[Any]],
        chunk: int,
        absent: set[str] | None = None,
        source: Callable[[Sequence[str]], str] = lambda ids: "pipeline_keys",
    ) -> None:
        self._query = query
        self._source = source  # where a chunk of ids is looked up (the store knows its schema)
        self._chunk = chunk  # ids per ``IN (...)`` probe (below SQLite's bound-parameter limit)
        self._next_pk: int | None = None  # where the next chunk's rows probably start
        self._absent = absent  # ids a probe found without a key row

    def __call__(self, ids: Sequence[str]) -> dict[str, State]:
        found: dict[str, State] = {}
        rest = ids
        if self._next_pk is not None and ids:
            rest = self._read_ahead(ids, found)
        if rest:
            self._probe(rest, found)
        return found

    def _read_ahead(self, ids: Sequence[str], found: dict[str, State]) -> Sequence[str]:
        wanted = set(ids)
        last = None
        # a little more than the chunk: keys were numbered at first commit, not at admission
        for row in self._query(_RANGE_SQL, (self._next_pk, len(wanted) + len(wanted) // 8 + 8)):
            if row[0] in wanted:
                found[row[0]] = row[1:5]
                last = row[5]
        if last is None or 2 * len(found) < len(wanted):
            self._next_pk = None  # not in storage order (or past the stored rows): probe instead
        else:
            self._next_pk = last + 1
        return [key for key in ids if key not in found] if found else ids

    def _probe(self, ids: Sequence[str], found: dict[str, State]) -> None:
        pks: list[int] = []
        for start in range(0, len(ids), self._chunk):
            chunk = ids[start : start + self._chunk]
            rows = self._query(_probe_sql(len(chunk), self._source(chunk)), chunk)
            for row in rows:
                if row[5] is not None:  # (None: a key without a pipeline row)
                    found[row[0]] = row[1:5]
                    pks.append(row[5])
            if self._absent is not None:
                self._absent.update(set(chunk).difference([row[0] for row in rows]))
        if self._next_pk is None and pks and 2 * len(pks) >= len(ids):
            low, high = min(pks), max(pks)
            if high - low < 2 * len(pks):  # contiguous: the next chunk probably follows
                self._next_pk = high + 1
