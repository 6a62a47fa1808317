"""The Store protocol that store plugins implement, and paged reads over any store.

A store applies a ``Batch`` atomically (``commit``) and answers a small set of reads. All
methods are synchronous on purpose: a critical write must not be interruptible by task
cancellation. Everything fancier (group commit, write-behind) lives in the kernel's recorder,
so a third-party store only has to be correct, not clever.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

from pyattacker.errors import ConfigError
from pyattacker.model import (
    ArtifactRecord,
    Batch,
    MetricPoint,
    MetricRecord,
    PipelineRecord,
    ResourceRecord,
    RunRecord,
)

__all__ = ["PAGE_KINDS", "Store", "iter_rows"]

#: Row kinds with keyset paging, and the order each is returned in (the last key is unique).
PAGE_KINDS: dict[str, tuple[str, ...]] = {
    "pipelines": ("created_at", "pipeline_id"),
    "tasks": ("pipeline_id", "seq"),
    "attempts": ("attempt_id",),
    "events": ("event_id",),
    "artifacts": ("pipeline_id", "seq"),
}


@runtime_checkable
class Store(Protocol):
    """What every store plugin provides. See docs/plugins.md for the full contract.

    Optional capabilities are probed, not declared here (a protocol member would make every
    store need it): pipelines with control need ``handoffs(pipeline_id)`` and the class
    attribute ``applies_resets = True`` (``commit`` applies ``Batch.resets``). A store whose
    durability comes after the commit returns may offer ``commit_behind(batch)``, returning
    ``None`` (durable already) or a ``concurrent.futures.Future`` resolved once it is; the
    recorder then uses it for group commits (``commit`` must still return durable); it is
    looked up on the class, so a wrapper that forwards attributes does not bypass its ``commit``.
    """

    #: the location it was opened from (for messages and reports)
    location: str
    read_only: bool

    def commit(self, batch: Batch) -> None:
        """Apply every row of ``batch`` in one transaction, or none of them and raise.

        Appended attempts and events get their ``attempt_id`` / ``event_id`` assigned.
        """

    def lookup_pipelines(self, ids: Sequence[str]) -> dict[str, PipelineRecord]:
        """The stored rows among ``ids`` (missing ids are absent from the result)."""

    def get_artifact(self, pipeline_id: str, seq: int) -> ArtifactRecord | None:
        """The artifact at a slot (``seq=-1`` is the seed); payload as stored, not hydrated."""

    def interrupt_running(self, run_id: str, now: float) -> int:
        """Mark every ``running`` pipeline, task and run not owned by ``run_id`` interrupted.

        Called at the start of each writing run: the store's writer lock proves that whoever
        left those rows is gone. Returns the number of pipelines changed.
        """

    def get_run(self, run_id: str) -> RunRecord | None: ...

    def runs(self) -> list[RunRecord]:
        """Every run, oldest first (by ``started_at``)."""

    def page(
        self,
        kind: str,
        *,
        run_id: str | None = None,
        pipeline_id: str | None = None,
        state: str | None = None,
        after: tuple[Any, ...] | None = None,
        limit: int = 1000,
    ) -> list[Any]:
        """Up to ``limit`` rows of ``kind`` in ``PAGE_KINDS[kind]`` order, strictly after ``after``.

        ``run_id`` filters by owning run (pipelines, tasks) or writing run (attempts, events);
        ``state`` applies to pipelines; ``pipeline_id`` to every kind.
        """

    def metrics(self, run_id: str | None = None, pipeline_id: str | None = None) -> list[MetricRecord]:
        """Latest application values (``pipeline_id=''`` is the run scope)."""

    def metric_points(
        self, run_id: str, pipeline_id: str, key: str | None = None, after_step: int = -1, limit: int = 1000
    ) -> list[MetricPoint]: ...

    def resources(self, run_id: str | None = None) -> list[ResourceRecord]: ...

    def close(self) -> None: ...


def iter_rows(store: Store, kind: str, *, batch: int = 1000, **filters: Any) -> Iterator[Any]:
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
