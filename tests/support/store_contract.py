"""Helpers for the Store contract suite: one factory per store plugin, and row builders.

Every store must behave exactly like the memory reference store; the suite in
``test_store_contract.py`` runs the same assertions against each factory here.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pyattacker.model import (
    ArtifactRecord,
    AttemptRecord,
    Batch,
    EventRecord,
    MetricPoint,
    MetricRecord,
    PipelineRecord,
    ResourceRecord,
    RunRecord,
    TaskRecord,
)
from pyattacker.store.base import Store
from pyattacker_plugins import store_memory
from pyattacker_plugins.store_jsonl import JsonlStore, JsonlStoreOpener
from pyattacker_plugins.store_sqlite import SqliteStore, SqliteStoreOpener

STORE_KINDS = ("memory", "sqlite", "jsonl")


class StoreFactory:
    """Opens stores of one kind at one location; ``reopen`` proves persistence."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        self.persistent = kind != "memory"
        self.location = {
            "memory": ":memory:",
            "sqlite": str(tmp_path / "store.db"),
            "jsonl": str(tmp_path / "store"),
        }[kind]
        self.opened: list[Store] = []

    def open(self, *, read_only: bool = False) -> Store:
        store: Store
        if self.kind == "memory":
            store = store_memory.MemoryStoreOpener().open(self.location)
        elif self.kind == "sqlite":
            store = SqliteStoreOpener().open(self.location, read_only=read_only)
        else:
            store = JsonlStoreOpener().open(self.location, read_only=read_only)
        self.opened.append(store)
        return store

    def reopen(self, store: Store, *, read_only: bool = False) -> Store:
        store.close()
        return self.open(read_only=read_only)

    def break_mid_batch(self, monkeypatch: pytest.MonkeyPatch, batch: Batch) -> None:
        """Make the commit of ``batch`` fail after some of its rows were already applied."""
        if self.kind == "memory":
            real = store_memory._copy
            calls = itertools.count()

            def failing(row: Any) -> Any:
                if next(calls) == 2:
                    raise RuntimeError("injected failure")
                return real(row)

            monkeypatch.setattr(store_memory, "_copy", failing)
        elif self.kind == "sqlite":
            # runs and pipelines are applied before tasks: a task row sqlite3 cannot bind fails
            # the transaction half-way through
            monkeypatch.setattr(batch.tasks[0], "attempts_used", object())
        else:
            from pyattacker_plugins.store_jsonl import store as jsonl_module

            real_line = jsonl_module.encode_line

            def failing_line(tag: str, record: Any) -> bytes:
                if tag == "task":
                    raise RuntimeError("injected failure")
                return real_line(tag, record)

            monkeypatch.setattr(jsonl_module, "encode_line", failing_line)

    def close_all(self) -> None:
        for store in self.opened:
            try:
                store.close()
            except Exception:
                pass


def is_sqlite(store: Store) -> bool:
    return isinstance(store, SqliteStore)


def is_jsonl(store: Store) -> bool:
    return isinstance(store, JsonlStore)


# -- row builders -------------------------------------------------------------------------------
def run(run_id: str = "r1", **kw: Any) -> RunRecord:
    return RunRecord(run_id=run_id, started_at=kw.pop("started_at", 1.0), **kw)


def pipeline(pid: str, run_id: str = "r1", **kw: Any) -> PipelineRecord:
    kw.setdefault("created_at", 10.0)
    return PipelineRecord(pipeline_id=pid, run_id=run_id, name="pipe", key=f"k-{pid}", **kw)


def task(pid: str, seq: int, run_id: str = "r1", **kw: Any) -> TaskRecord:
    return TaskRecord(
        task_run_id=f"{pid}:{seq}", pipeline_id=pid, run_id=run_id, name=f"t{seq}", seq=seq, **kw
    )


def artifact(pid: str, seq: int, payload: bytes | None = b"data", **kw: Any) -> ArtifactRecord:
    return ArtifactRecord(
        artifact_id=f"{pid}:{seq}",
        pipeline_id=pid,
        task_name=f"t{seq}",
        seq=seq,
        type_name="bytes",
        codec="bytes",
        digest=kw.pop("digest", "00" * 16),
        size=len(payload or b""),
        created_at=kw.pop("created_at", 5.0),
        payload=payload,
        **kw,
    )


def attempt(pid: str, seq: int = 0, run_id: str = "r1", n: int = 1, **kw: Any) -> AttemptRecord:
    return AttemptRecord(
        run_id=run_id,
        pipeline_id=pid,
        task_run_id=f"{pid}:{seq}",
        task_name=f"t{seq}",
        seq=seq,
        attempt=n,
        started_at=1.0,
        ended_at=2.0,
        duration_ms=1000.0,
        outcome=kw.pop("outcome", "succeeded"),
        **kw,
    )


def event(
    kind: str = "pipeline.started", run_id: str | None = "r1", pid: str | None = None, **kw: Any
) -> EventRecord:
    return EventRecord(
        ts=kw.pop("ts", 3.0), kind=kind, scope="pipeline", run_id=run_id, pipeline_id=pid, **kw
    )


def metric(name: str, value: Any, run_id: str = "r1", pid: str = "", **kw: Any) -> MetricRecord:
    return MetricRecord(
        run_id=run_id, pipeline_id=pid, name=name, value=value, updated_at=kw.pop("updated_at", 1.0)
    )


def point(
    op_id: str, step: int, value: Any = 1.0, key: str = "loss", run_id: str = "r1", pid: str = "p1"
) -> MetricPoint:
    return MetricPoint(run_id=run_id, pipeline_id=pid, key=key, value=value, step=step, ts=1.0, op_id=op_id)


def resource(pool: str, rid: str, run_id: str = "r1", **kw: Any) -> ResourceRecord:
    return ResourceRecord(
        run_id=run_id, pool=pool, resource_id=rid, kind="http", state=kw.pop("state", "ready"), **kw
    )


def batch_of(**rows: list[Any]) -> Batch:
    b = Batch()
    for name, items in rows.items():
        getattr(b, name).extend(items)
    return b


def commit(store: Store, **rows: list[Any]) -> Batch:
    b = batch_of(**rows)
    store.commit(b)
    return b


Factory = Callable[[], StoreFactory]
