"""Keyset paging, the one read every store offers: the row kinds, their order, and a reader.

``page(kind, after=..., limit=...)`` returns rows in ``PAGE_KINDS[kind]`` order strictly after
the key ``after``; ``iter_rows`` walks every row that way, so memory stays flat on any store.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from pyattacker.errors import ConfigError

__all__ = ["PAGE_KINDS", "Pageable", "iter_rows"]

#: Row kinds with keyset paging, and the order each is returned in (the last key is unique).
PAGE_KINDS: dict[str, tuple[str, ...]] = {
    "pipelines": ("created_at", "pipeline_id"),
    "tasks": ("pipeline_id", "seq"),
    "attempts": ("attempt_id",),
    "events": ("event_id",),
    "artifacts": ("pipeline_id", "seq"),
}


class Pageable(Protocol):
    def page(
        self,
        kind: str,
        *,
        run_id: str | None = None,
        pipeline_id: str | None = None,
        state: str | None = None,
        after: tuple[Any, ...] | None = None,
        limit: int = 1000,
    ) -> list[Any]: ...


def iter_rows(store: Pageable, kind: str, *, batch: int = 1000, **filters: Any) -> Iterator[Any]:
    """Every row of ``kind`` in order, read in bounded keyset pages (memory stays flat)."""
    if kind not in PAGE_KINDS:
        raise ConfigError(f"unknown row kind {kind!r}; expected one of {', '.join(PAGE_KINDS)}")
    keys = PAGE_KINDS[kind]
    after: tuple[Any, ...] | None = None
    while True:
        rows = store.page(kind, after=after, limit=batch, **filters)
        yield from rows
        if len(rows) < batch:
            return
        last = rows[-1]
        after = tuple(getattr(last, k) for k in keys)
