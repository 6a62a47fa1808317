"""The ``by_experiment`` layout as one store: a catalog and one store per experiment.

A ``by_experiment`` suite directory holds ``manifest.json``, the catalog ``suite.db`` (run
rows, run-level events and metrics, pool rows) and ``experiments/<ID>/state.db`` per member
(every row of its pipelines). ``SuiteStore`` is that directory seen as one ``StoreBase``: the
runner commits to it as to any store, and each batch is split by the experiment prefix of its
pipeline ids (``experiment_prefix``), so one runner, one admission budget and one set of pools
serve every member while each member's rows stay in a file of its own.

A writer opens (creates, migrates) only the selected members' stores, so the others' files are
never touched. Each part of a batch is committed to its own file: a pipeline's rows always go
together into one file (resume relies on no more than that), and a failing part raises, which
stops the run as any storage failure does.

Readers see the union. Attempts, events and logs are numbered per file, so their ids are read
back as ``local id * ID_STRIDE + slot`` (slot 0: the catalog, slot n: the n-th experiment of the
manifest): unique across the directory and in each file's order, so keyset paging still works.
"""

from __future__ import annotations

import heapq
import operator
import os
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import msgspec

from pyattacker.errors import ConfigError
from pyattacker.model import (
    ArtifactRecord,
    Batch,
    HandoffRecord,
    LogRecord,
    MetricPoint,
    MetricRecord,
    NoteRecord,
    PipelineRecord,
    ResourceRecord,
    RunRecord,
)
from pyattacker.plugins.paging import PAGE_KINDS
from pyattacker.plugins.store_base import StoreBase, Summary
from pyattacker.store.suite_dir import SuiteManifest, experiment_prefix

__all__ = ["ID_STRIDE", "SuiteStore", "experiment_store_path"]

#: room for the catalog and up to 1,023 experiments in the ids a reader sees
ID_STRIDE = 1024
#: the length of every member pipeline id's experiment prefix (``suite-<16 hex>-``)
_PREFIX_LEN = len(experiment_prefix("s", "e"))
#: the ``Batch`` fields split by pipeline (``runs`` go to every file)
_ROUTED = tuple(name for name in Batch.__slots__ if name != "runs")
_PIPELINE_ID = operator.attrgetter("pipeline_id")
#: the row kinds whose ids are numbered per file, and their id field
_NUMBERED = {"attempts": "attempt_id", "events": "event_id"}


def experiment_store_path(root: str | os.PathLike[str], experiment_id: str) -> Path:
    """Where the ``by_experiment`` layout keeps ``experiment_id``'s store."""
    return Path(root) / "experiments" / experiment_id / "state.db"


def _renumber(row: Any, field: str, slot: int) -> Any:
    local = getattr(row, field)
    return row if local is None else msgspec.structs.replace(row, **{field: local * ID_STRIDE + slot})


def _local_after(after: int | None, slot: int) -> int | None:
    """The per-file id to page after so that every row whose read-back id is > ``after`` comes."""
    return None if after is None else (after - slot) // ID_STRIDE


class SuiteStore(StoreBase):
    """A ``by_experiment`` suite directory as one store (see the module docstring)."""

    supports_handoffs = True
    commits_behind = True
    supports_notes = True
    keeps_logs = True

    def __init__(
        self,
        root: str | os.PathLike[str],
        manifest: SuiteManifest,
        *,
        experiments: Sequence[str] | None = None,
        read_only: bool = True,
        opener: Callable[[str, bool], StoreBase],
    ) -> None:
        """Open the catalog and the stores of ``experiments`` (None: every one the manifest
        names). A reader refuses a missing file; a writer creates the selected members' files."""
        self.root = Path(root)
        self.location = str(self.root)
        self.read_only = read_only
        self.manifest = manifest
        names = list(manifest.experiments) if experiments is None else list(experiments)
        slots = {exp_id: index + 1 for index, exp_id in enumerate(manifest.experiments)}
        if len(slots) >= ID_STRIDE:
            raise ConfigError(f"output.layout: by_experiment holds at most {ID_STRIDE - 1} experiments")
        self.catalog = self._open(opener, self.root / manifest.catalog, "its catalog")
        #: slot -> store, and prefix -> (slot, store), of the open members
        self.parts: dict[int, StoreBase] = {0: self.catalog}
        self._by_prefix: dict[str, tuple[int, StoreBase]] = {}
        #: the files' commits not yet durable (``commit`` waits for them all)
        self._outstanding: list[Future[None]] = []
        #: prefix -> slot, and prefix -> experiment id, of the open members
        self._slot_of: dict[str, int] = {}
        self._experiments: dict[str, str] = {}
        try:
            for exp_id in names:
                path = experiment_store_path(self.root, exp_id)
                if not read_only:
                    path.parent.mkdir(parents=True, exist_ok=True)
                child = self._open(opener, path, f"experiment {exp_id!r}'s store")
                self.parts[slots[exp_id]] = child
                prefix = manifest.experiments[exp_id]["prefix"]
                self._by_prefix[prefix] = (slots[exp_id], child)
                self._experiments[prefix] = exp_id
                self._slot_of[prefix] = slots[exp_id]
        except BaseException:
            self.close()
            raise

    def _open(self, opener: Callable[[str, bool], StoreBase], path: Path, what: str) -> StoreBase:
        if self.read_only and not path.is_file():
            raise ConfigError(f"{self.root}: suite directory without {what} ({path}); never run?")
        return opener(str(path), self.read_only)

    # -- routing ------------------------------------------------------------------------------------
    def _part(self, pipeline_id: str | None) -> tuple[int, StoreBase] | None:
        if not pipeline_id:
            return None
        return self._by_prefix.get(pipeline_id[:_PREFIX_LEN])

    def _members(self) -> Iterator[tuple[int, StoreBase]]:
        return ((slot, store) for slot, store in self.parts.items() if slot)

    def _group(self, ids: Sequence[str]) -> Iterator[tuple[StoreBase, list[str]]]:
        groups: dict[int, tuple[StoreBase, list[str]]] = {}
        for pid in ids:
            part = self._part(pid)
            if part is not None:
                groups.setdefault(part[0], (part[1], []))[1].append(pid)
        return iter(groups.values())

    def _split(self, batch: Batch) -> dict[int, Batch]:
        """``batch`` as one batch per file: run rows to every file, pool rows to the catalog,
        every other row to its pipeline's member (none: the catalog)."""
        parts: dict[int, Batch] = {}
        if batch.runs:
            for slot in self.parts:
                parts[slot] = Batch()
                parts[slot].runs.extend(batch.runs)
        slot_of = self._slot_of.get
        cut = _PREFIX_LEN
        for name in _ROUTED:
            rows = getattr(batch, name)
            if not rows:
                continue
            if name == "resources":
                groups: dict[int, list[Any]] = {0: list(rows)}
            else:
                groups = {}
                pids = rows if name == "finals_cleared" else map(_PIPELINE_ID, rows)
                for row, pid in zip(rows, pids, strict=True):
                    slot = slot_of(pid[:cut], 0) if pid else 0
                    group = groups.get(slot)
                    if group is None:
                        groups[slot] = [row]
                    else:
                        group.append(row)
            for slot, group in groups.items():
                part = parts.get(slot)
                if part is None:
                    part = parts[slot] = Batch()
                setattr(part, name, group)
        return parts

    # -- writes ---------------------------------------------------------------------------------------
    def commit(self, batch: Batch) -> None:
        """Durable on return, with every commit before it (each file syncs its own)."""
        self._commit_parts(batch)
        for future in self._outstanding:
            future.result()

    def commit_behind(self, batch: Batch) -> Future[None] | None:
        pending = self._commit_parts(batch)
        return _all_of(pending) if pending else None

    def _commit_parts(self, batch: Batch) -> list[Future[None]]:
        pending = []
        for slot, part in self._split(batch).items():
            future = self.parts[slot].commit_behind(part)
            if future is not None:
                pending.append(future)
        self._outstanding = [f for f in self._outstanding if not f.done()] + pending
        return pending

    def interrupt_running(self, run_id: str, now: float) -> int:
        return sum(store.interrupt_running(run_id, now) for store in self.parts.values())

    def write_note(
        self, run_id: str, text: str, *, expected_revision: int | None, author: str, now: float
    ) -> NoteRecord:
        return self.catalog.write_note(
            run_id, text, expected_revision=expected_revision, author=author, now=now
        )

    def close(self) -> None:
        for store in getattr(self, "parts", {0: getattr(self, "catalog", None)}).values():
            if store is not None:
                store.close()

    @property
    def lost_contents(self) -> str | None:  # type: ignore[override]
        lost = [s.lost_contents for s in self.parts.values() if s.lost_contents]
        return "; ".join(lost) if lost else None

    @property
    def has_ledger(self) -> bool:
        return all(store.has_ledger for _slot, store in self._members())

    # -- reads ----------------------------------------------------------------------------------------
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
        if pipeline_id is not None:
            part = self._part(pipeline_id)
            sources = [] if part is None else [part]
        else:
            sources = list(self._members()) + ([(0, self.catalog)] if kind == "events" else [])
        numbered = _NUMBERED.get(kind)
        runs: list[list[Any]] = []
        for slot, store in sources:
            local = after
            if numbered is not None and after is not None:
                local = (_local_after(after[0], slot),)
            rows = store.page(
                kind, run_id=run_id, pipeline_id=pipeline_id, state=state, after=local, limit=limit
            )
            runs.append([_renumber(r, numbered, slot) for r in rows] if numbered else rows)
        keys = PAGE_KINDS[kind]
        if len(runs) == 1:
            return runs[0]
        merged = heapq.merge(*runs, key=lambda r: tuple(getattr(r, k) for k in keys))
        return list(_take(merged, limit))

    def runs(self) -> list[RunRecord]:
        return self.catalog.runs()

    def get_run(self, run_id: str) -> RunRecord | None:
        return self.catalog.get_run(run_id)

    def metrics(self, run_id: str | None = None, pipeline_id: str | None = None) -> list[MetricRecord]:
        if pipeline_id is not None:
            part = self._part(pipeline_id)
            return [] if part is None else part[1].metrics(run_id=run_id, pipeline_id=pipeline_id)
        return [m for store in self.parts.values() for m in store.metrics(run_id=run_id)]

    def metric_points(
        self, run_id: str, pipeline_id: str, key: str | None = None, after_step: int = -1, limit: int = 1000
    ) -> list[MetricPoint]:
        part = self._part(pipeline_id)
        return [] if part is None else part[1].metric_points(run_id, pipeline_id, key, after_step, limit)

    def resources(self, run_id: str | None = None) -> list[ResourceRecord]:
        return self.catalog.resources(run_id)

    def run_note(self, run_id: str) -> NoteRecord | None:
        return self.catalog.run_note(run_id)

    def lookup_pipelines(self, ids: Sequence[str]) -> dict[str, PipelineRecord]:
        found: dict[str, PipelineRecord] = {}
        for store, mine in self._group(ids):
            found.update(store.lookup_pipelines(mine))
        return found

    def lookup_states(self, ids: Sequence[str]) -> dict[str, tuple[str, str, str, str]]:
        found: dict[str, tuple[str, str, str, str]] = {}
        for store, mine in self._group(ids):
            found.update(store.lookup_states(mine))
        return found

    def get_artifact(self, pipeline_id: str, seq: int) -> ArtifactRecord | None:
        part = self._part(pipeline_id)
        return None if part is None else part[1].get_artifact(pipeline_id, seq)

    def artifact_folder(self, pipeline_id: str) -> str | None:
        prefix = pipeline_id[:_PREFIX_LEN]
        exp_id = self._experiments.get(prefix)
        return None if exp_id is None else str(experiment_store_path(self.root, exp_id).parent / "artifacts")

    def handoffs(self, pipeline_id: str) -> list[HandoffRecord]:
        part = self._part(pipeline_id)
        return [] if part is None else part[1].handoffs(pipeline_id)

    def handoffs_by_operation(self, run_id: str | None = None) -> dict[str, int]:
        out: dict[str, int] = {}
        for _slot, store in self._members():
            for op, n in store.handoffs_by_operation(run_id).items():
                out[op] = out.get(op, 0) + n
        return dict(sorted(out.items()))

    def logs(
        self,
        *,
        run_id: str | None = None,
        pipeline_id: str | None = None,
        task: str | None = None,
        after: int | None = None,
        limit: int = 1000,
    ) -> list[LogRecord]:
        if pipeline_id is not None:
            part = self._part(pipeline_id)
            sources = [] if part is None else [part]
        else:
            sources = list(self._members())
        runs = [
            [
                _renumber(r, "log_id", slot)
                for r in store.logs(
                    run_id=run_id,
                    pipeline_id=pipeline_id,
                    task=task,
                    after=_local_after(after, slot),
                    limit=limit,
                )
            ]
            for slot, store in sources
        ]
        return list(_take(heapq.merge(*runs, key=lambda r: r.log_id or 0), limit))

    # -- aggregates: each member's own (fast) answer, combined ---------------------------------------
    def pipeline_summaries(self, run_id: str | None = None) -> Iterable[Summary]:
        for _slot, store in self._members():
            yield from store.pipeline_summaries(run_id)

    def pipeline_counts(self, run_id: str | None = None) -> dict[str, int]:
        out: dict[str, int] = {}
        for _slot, store in self._members():
            for state, n in store.pipeline_counts(run_id).items():
                out[state] = out.get(state, 0) + n
        return out

    def task_counts(self, run_id: str | None = None) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for _slot, store in self._members():
            for name, states in store.task_counts(run_id).items():
                mine = out.setdefault(name, {})
                for state, n in states.items():
                    mine[state] = mine.get(state, 0) + n
        return out

    def count_rows(self, kind: str, run_id: str | None = None) -> int:
        stores = self.parts.values() if kind == "events" else (s for _slot, s in self._members())
        return sum(store.count_rows(kind, run_id) for store in stores)

    def final_artifacts(self, ids: Sequence[str]) -> dict[str, ArtifactRecord]:
        found: dict[str, ArtifactRecord] = {}
        for store, mine in self._group(ids):
            found.update(store.final_artifacts(mine))
        return found

    def rows_by_pipeline(self, kind: str, ids: Sequence[str]) -> dict[str, list[Any]]:
        found: dict[str, list[Any]] = {}
        for store, mine in self._group(ids):
            found.update(store.rows_by_pipeline(kind, mine))
        return found

    def metrics_by_pipeline(self, run_id: str, ids: Sequence[str]) -> dict[str, list[MetricRecord]]:
        found: dict[str, list[MetricRecord]] = {}
        for store, mine in self._group(ids):
            found.update(store.metrics_by_pipeline(run_id, mine))
        return found

    def task_leases(self, ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
        found: dict[str, list[dict[str, Any]]] = {}
        for store, mine in self._group(ids):
            found.update(store.task_leases(mine))
        return found

    def __repr__(self) -> str:
        return f"SuiteStore({self.location!r}, experiments={len(self.parts) - 1})"


def _all_of(futures: list[Future[None]]) -> Future[None]:
    """One future resolved once every one of ``futures`` is (failed with the first error)."""
    done: Future[None] = Future()
    lock = threading.Lock()
    left = [len(futures)]

    def settle(future: Future[None]) -> None:
        error = None if future.cancelled() else future.exception()
        with lock:
            left[0] -= 1
            if done.done():
                return
            if future.cancelled():
                done.cancel()
            elif error is not None:
                done.set_exception(error)
            elif left[0] == 0:
                done.set_result(None)

    for future in futures:
        future.add_done_callback(settle)
    return done


def _take(rows: Iterable[Any], limit: int) -> Iterator[Any]:
    for index, row in enumerate(rows):
        if index >= limit:
            return
        yield row
