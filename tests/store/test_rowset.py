"""``RowSet`` (pyattacker.plugins.api) passes the whole store contract under a store that only
keeps bytes: the rules of applying a batch and of reading rows are all RowSet's."""

from __future__ import annotations

from typing import Any, ClassVar

import msgspec
import pytest

from pyattacker.errors import ConfigError, StoreUnavailable
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
from pyattacker.plugins.api import RowSet, StoreBase
from pyattacker.testing import StoreContract
from pyattacker.testing.rows import pipeline


class _Saved(msgspec.Struct):
    next_attempt_id: int
    next_event_id: int
    runs: list[RunRecord]
    pipelines: list[PipelineRecord]
    tasks: list[TaskRecord]
    artifacts: list[ArtifactRecord]
    attempts: list[AttemptRecord]
    events: list[EventRecord]
    metrics: list[MetricRecord]
    metric_points: list[MetricPoint]
    resources: list[ResourceRecord]


_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(_Saved).decode


def _load(data: bytes) -> RowSet:
    saved, rows, batch = _decode(data), RowSet(), Batch()
    for name in ("runs", "pipelines", "tasks", "artifacts", "attempts", "events", "metrics"):
        setattr(batch, name, getattr(saved, name))
    batch.metric_points, batch.resources = saved.metric_points, saved.resources
    rows.apply(batch)
    rows.next_attempt_id, rows.next_event_id = saved.next_attempt_id, saved.next_event_id
    return rows


def _save(rows: RowSet) -> bytes:
    return _encode(
        _Saved(
            rows.next_attempt_id,
            rows.next_event_id,
            list(rows.runs.values()),
            list(rows.pipelines.values()),
            list(rows.tasks.values()),
            list(rows.artifacts.values()),
            rows.attempts,
            rows.events,
            list(rows.metrics.values()),
            rows.metric_points,
            list(rows.resources.values()),
        )
    )


def _copies(rows: list[Any]) -> list[Any]:
    return [msgspec.msgpack.decode(_encode(r), type=type(r)) for r in rows]


class BytesStore(StoreBase):
    """A store whose whole state is one bytes value per location (in this process)."""

    saved: ClassVar[dict[str, bytes]] = {}
    supports_handoffs = False

    def __init__(self, location: str, *, read_only: bool = False) -> None:
        self.location, self.read_only, self.closed = location, read_only, False
        if location not in self.saved:
            if read_only:
                raise ConfigError(f"store {location} does not exist")
            self.saved[location] = _save(RowSet())

    def _rows(self) -> RowSet:
        return _load(self.saved[self.location])

    def _check_writable(self) -> None:
        if self.read_only or self.closed:
            raise StoreUnavailable(f"store {self.location} is read-only or closed")

    def commit(self, batch: Batch) -> None:
        self._check_writable()
        rows = self._rows()
        numbered = rows.apply(batch)
        try:
            data = _save(rows)
        except Exception as exc:
            RowSet.unnumber(numbered)
            raise StoreUnavailable(f"store {self.location}: commit failed: {exc}") from exc
        self.saved[self.location] = data

    def interrupt_running(self, run_id: str, now: float) -> int:
        self._check_writable()
        stale = self._rows().stale_running(run_id, now)
        if stale.pipelines or stale.tasks or stale.runs:
            self.commit(stale)
        return len(stale.pipelines)

    def page(self, kind: str, **filters: Any) -> list[Any]:  # type: ignore[override]
        return _copies(self._rows().page(kind, **filters))

    def runs(self) -> list[RunRecord]:
        return _copies(self._rows().run_rows())

    def metrics(self, run_id: str | None = None, pipeline_id: str | None = None) -> list[MetricRecord]:
        return _copies(self._rows().metric_rows(run_id, pipeline_id))

    def metric_points(
        self, run_id: str, pipeline_id: str, key: str | None = None, after_step: int = -1, limit: int = 1000
    ) -> list[MetricPoint]:
        return _copies(self._rows().point_rows(run_id, pipeline_id, key, after_step, limit))

    def resources(self, run_id: str | None = None) -> list[ResourceRecord]:
        return _copies(self._rows().resource_rows(run_id))

    def close(self) -> None:
        self.closed = True


class TestRowSetStore(StoreContract):
    location = "bytes:{tmp}"
    exclusive_writer = False

    def open(self, location: str, *, read_only: bool = False) -> StoreBase:
        return BytesStore(location, read_only=read_only)


def test_apply_numbers_only_unnumbered_rows_and_unnumber_takes_them_back() -> None:
    rows, batch = RowSet(), Batch()
    batch.pipelines = [pipeline("p1")]
    batch.events = [
        EventRecord(run_id="r1", kind="a", scope="run", ts=1.0),
        EventRecord(run_id="r1", kind="b", scope="run", ts=2.0, event_id=7),
    ]
    numbered = rows.apply(batch)
    assert [e.event_id for e in batch.events] == [1, 7]
    assert numbered == [batch.events[0]] and rows.next_event_id == 8
    RowSet.unnumber(numbered)
    assert batch.events[0].event_id is None and batch.events[1].event_id == 7


def test_an_unknown_kind_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="'widgets'"):
        RowSet().page("widgets")
