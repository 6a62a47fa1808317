"""Keyset paging, the one read every store offers: the row kinds, their order, and a reader.

``page(kind, after=..., limit=...)`` returns rows in ``PAGE_KINDS[kind]`` order strictly after
the key ``after``; ``iter_rows`` walks every row that way, so memory stays flat on any store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from pyattacker.errors import ConfigError

__all__ = ["PAGE_KINDS", "Pageable", "iter_rows", "page_of"]

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


#: each kind's full sort key for stores that hold rows in memory (``PAGE_KINDS`` plus the row's
#: unique id, so rows that tie on the order a pager keeps still come out in one order)
_SORT_KEYS: dict[str, Callable[[Any], tuple[Any, ...]]] = {
    "pipelines": lambda r: (r.created_at, r.pipeline_id),
    "tasks": lambda r: (r.pipeline_id, r.seq, r.task_run_id),
    "attempts": lambda r: (r.attempt_id,),
    "events": lambda r: (r.event_id,),
    "artifacts": lambda r: (r.pipeline_id, r.seq, r.artifact_id),
}


def page_of(
    kind: str,
    rows: Iterable[Any],
    *,
    run_id: str | None = None,
    pipeline_id: str | None = None,
    state: str | None = None,
    after: tuple[Any, ...] | None = None,
    limit: int = 1000,
) -> list[Any]:
    """``page`` over rows a store holds in memory: the filters as ``StoreBase.page`` defines
    them (artifacts have no run; ``state`` applies to pipelines and tasks; ``after`` may be a
    prefix of the order), sorted by the kind's order, cut at ``limit``. The rows themselves are
    returned: a store copies them if callers may change what it holds."""
    if kind not in _SORT_KEYS:
        raise ValueError(f"unknown row kind {kind!r} (one of {', '.join(_SORT_KEYS)})")
    key = _SORT_KEYS[kind]
    found = [
        r
        for r in rows
        if (pipeline_id is None or r.pipeline_id == pipeline_id)
        and (run_id is None or kind == "artifacts" or r.run_id == run_id)
        and (state is None or kind not in ("pipelines", "tasks") or r.state == state)
        and (after is None or key(r)[: len(after)] > tuple(after))
    ]
    found.sort(key=key)
    return found[:limit]
