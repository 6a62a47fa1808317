"""``RowReads``: the store's reads of whole rows, decoded into records.

Lookups by pipeline id (one statement per ``LOOKUP_CHUNK`` ids), the children of many pipelines
at once, pages in each kind's order, runs, metrics and resources. A ``CorruptRow`` raised while
decoding is given the store's path (``_names_store``), so its message names file, table, row
and column.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import operator
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import msgspec

from pyattacker.errors import CorruptRow
from pyattacker.model import (
    ArtifactRecord,
    HandoffRecord,
    LogRecord,
    MetricPoint,
    MetricRecord,
    PipelineRecord,
    ResourceRecord,
    RunRecord,
)
from pyattacker.plugins.api import PAGE_KINDS

from .connection import LOOKUP_CHUNK, StoreConnection
from .read_sql import (
    CHILD_CODECS,
    IDS_INDEXED,
    IDS_OLD,
    IDS_TAIL,
    PAGE_CODECS,
    PAGE_FILTERS,
    children_sql,
    clustered_page_sql,
    finals_sql,
    get_artifact_sql,
    leases_sql,
    lookup_sql,
    metrics_sql,
    page_sql,
)
from .rows import ARTIFACTS, HANDOFFS, METRIC_POINTS, METRICS, PIPELINES, RESOURCES, RUNS, RowCodec
from .state_lookup import StateLookup
from .task_logs import TABLE as LOGS_TABLE
from .task_logs import decode_log, select_logs_sql

__all__ = ["RowReads"]

_LEASES = msgspec.json.Decoder(list[dict[str, Any]])
#: the order of a page of tasks or artifacts
_ID_SEQ = operator.attrgetter("pipeline_id", "seq")

F = TypeVar("F", bound=Callable[..., Any])


def _names_store(method: F) -> F:
    """Rows are decoded (``RowCodec.decode``) where the store is not known: a ``CorruptRow``
    leaving a read method is given the store's path, so the message names file, table, row
    and column."""

    @functools.wraps(method)
    def read(self: StoreConnection, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except CorruptRow as exc:
            raise exc.at(self.path) from None

    return read  # type: ignore[return-value]


class RowReads(StoreConnection):
    """Reads of whole rows: lookups by pipeline id, children of many pipelines, pages, runs."""

    #: ``lookup_states``' reader (it reads ahead in storage order)
    _states: StateLookup

    @_names_store
    def lookup_pipelines(self, ids: Sequence[str]) -> dict[str, PipelineRecord]:
        unique = list(dict.fromkeys(ids))
        found: dict[str, PipelineRecord] = {}
        decode = PIPELINES.decode
        for start in range(0, len(unique), LOOKUP_CHUNK):
            chunk = unique[start : start + LOOKUP_CHUNK]
            for row in self._query(lookup_sql(len(chunk), self._ids_for(chunk)), chunk):
                found[row[0]] = decode(row)
        return found

    @_names_store
    def rows_by_pipeline(self, kind: str, ids: Sequence[str]) -> dict[str, list[Any]]:
        """``{pipeline_id: rows}`` of ``kind`` (``tasks``, ``artifacts`` or ``handoffs``) for
        ``ids``, each list in seq (handoff id) order: ``page(kind, pipeline_id=id)`` for many ids,
        one statement per ``LOOKUP_CHUNK`` ids (optional method: ``export`` reads the children of
        a batch of pipelines with it)."""
        codec = CHILD_CODECS.get(kind)
        if codec is None:
            raise ValueError(f"rows_by_pipeline: kind must be tasks, artifacts or handoffs, got {kind!r}")
        if kind == "handoffs" and not self.has_ledger:
            return {}
        return self._grouped(lambda n, chunk: children_sql(kind, n, self._ids_for(chunk)), codec, ids, ())

    @_names_store
    def final_artifacts(self, ids: Sequence[str]) -> dict[str, ArtifactRecord]:
        """``{pipeline_id: final artifact}`` for those of ``ids`` that have one (the first marked
        final, in seq order): what ``export --rows results`` shows, read without the other
        artifacts (optional method; a pipeline's seed and intermediate outputs can be most of
        its rows)."""
        finals = self._grouped(lambda n, chunk: finals_sql(n, self._ids_for(chunk)), ARTIFACTS, ids, ())
        return {pid: rows[0] for pid, rows in finals.items()}

    def task_leases(self, ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
        """``{task_run_id: leases}`` of the last attempt of each task of the pipelines ``ids``
        (optional method: ``export --rows tasks`` says which lease each task used)."""
        last: dict[str, str | None] = {}
        unique = list(dict.fromkeys(ids))
        for start in range(0, len(unique), LOOKUP_CHUNK):
            chunk = unique[start : start + LOOKUP_CHUNK]
            last.update(self._query(leases_sql(len(chunk), self._ids_for(chunk)), chunk))
        out: dict[str, list[dict[str, Any]]] = {}
        for task_run_id, text in last.items():
            try:
                out[task_run_id] = [] if text is None else _LEASES.decode(text)
            except msgspec.DecodeError as exc:
                raise CorruptRow(
                    f"table attempts, task_run_id={task_run_id!r}: column leases_json is not a list of"
                    f" lease objects ({exc})",
                    self.path,
                ) from None
        return out

    @_names_store
    def metrics_by_pipeline(self, run_id: str, ids: Sequence[str]) -> dict[str, list[MetricRecord]]:
        """``{pipeline_id: metrics}`` of run ``run_id`` for ``ids``, each list by name:
        ``metrics(run_id, pipeline_id=id)`` for many ids (optional method, see ``export``)."""
        return self._grouped(lambda n, _: metrics_sql(n), METRICS, ids, (run_id,))

    def _grouped(
        self,
        sql_for: Callable[[int, Sequence[str]], str],
        codec: RowCodec[Any],
        ids: Sequence[str],
        head: tuple[Any, ...],
    ) -> dict[str, list[Any]]:
        """Rows of ``sql_for(n, chunk)`` (``head`` then the n ids of ``chunk`` as parameters),
        grouped by pipeline id."""
        out: dict[str, list[Any]] = {}
        unique = list(dict.fromkeys(ids))
        decode = codec.decode
        for start in range(0, len(unique), LOOKUP_CHUNK):
            chunk = unique[start : start + LOOKUP_CHUNK]
            for row in self._query(sql_for(len(chunk), chunk), (*head, *chunk)):
                rec = decode(row)
                out.setdefault(rec.pipeline_id, []).append(rec)
        return out

    @_names_store
    def lookup_states(self, ids: Sequence[str]) -> dict[str, tuple[str, str, str, str]]:
        """``(state, spec_digest, seed_digest, run_id)`` per stored id: what a resume needs to
        skip a finished pipeline, without reading and decoding its whole row (optional method).
        Reads ahead in storage order when the ids come in that order (see ``state_lookup``)."""
        return self._states(ids)

    @_names_store
    def get_artifact(self, pipeline_id: str, seq: int) -> ArtifactRecord | None:
        if pipeline_id in self._absent:  # no key row, no artifacts (as ``handoffs``)
            return None
        rows = self._query(get_artifact_sql(self._ids_for((pipeline_id,))), (pipeline_id, seq))
        return ARTIFACTS.decode(rows[0]) if rows else None

    @_names_store
    def handoffs(self, pipeline_id: str) -> list[HandoffRecord]:
        """The pipeline's control ledger, oldest first (optional method: a store without it
        cannot run pipelines that hand off).

        An id the writer's lookup found without a key row has no ledger rows (they carry the
        key): a fresh pipeline with control costs no query here when its run opens it."""
        if pipeline_id in self._absent or not self.has_ledger:
            return []
        rows = self._query(children_sql("handoffs", 1, self._ids_for((pipeline_id,))), (pipeline_id,))
        return [HANDOFFS.decode(row) for row in rows]

    @_names_store
    def logs(
        self,
        *,
        run_id: str | None = None,
        pipeline_id: str | None = None,
        task: str | None = None,
        after: int | None = None,
        limit: int = 1000,
    ) -> list[LogRecord]:
        """Attempts' logs after ``after`` in ``log_id`` order (none in a file older than schema 8)."""
        if not self._has_table(LOGS_TABLE):
            return []
        sql, params = select_logs_sql(run_id, pipeline_id, task, after, limit)
        return [decode_log(row) for row in self._query(sql, params)]

    @_names_store
    def get_run(self, run_id: str) -> RunRecord | None:
        rows = self._query(f"SELECT {RUNS.select_list} FROM runs WHERE run_id = ?", (run_id,))
        return RUNS.decode(rows[0]) if rows else None

    @_names_store
    def runs(self) -> list[RunRecord]:
        rows = self._query(f"SELECT {RUNS.select_list} FROM runs ORDER BY started_at, run_id")
        return [RUNS.decode(r) for r in rows]

    @_names_store
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
        if kind not in PAGE_CODECS:
            raise ValueError(f"unknown row kind {kind!r}; expected one of {', '.join(PAGE_KINDS)}")
        if limit <= 0:
            return []
        given = {"run_id": run_id, "pipeline_id": pipeline_id, "state": state}
        filters = tuple(f for f in PAGE_FILTERS[kind] if given[f] is not None)
        params: list[Any] = [given[f] for f in filters]
        if kind == "pipelines" and run_id is not None and state is None:  # (``PAGE_ORDER_RUN``)
            params[0:1] = self._run_in_order(run_id)
        if after is not None:
            keys = PAGE_KINDS[kind]
            if len(after) != len(keys):
                raise ValueError(f"after for {kind} must be a tuple of {', '.join(keys)}")
            params.extend(after)
        params.append(limit)
        codec = PAGE_CODECS[kind]
        decode = codec.decode
        ids = self._ids if pipeline_id is None else self._ids_for((pipeline_id,))
        if kind not in ("tasks", "artifacts"):
            sql = page_sql(kind, filters, after is not None, None, self.has_spans, ids)
            return [decode(r) for r in self._query(sql, params)]
        keyset = after is not None
        if not self.has_ids:
            return [
                decode(r) for r in self._query(clustered_page_sql(codec, filters, keyset, IDS_OLD), params)
            ]
        # schema 6: the sorted index and the newer keys are each in id order; the page is the
        # first ``limit`` rows of the two, merged, both read in one snapshot (a merge committed
        # between them would move keys from the second part to the first unseen). The writer
        # knows whether it has newer keys, and which: then none to read, or these.
        parts = [IDS_INDEXED]
        if ids != IDS_INDEXED and (self.read_only or self._tail):
            parts.append(IDS_TAIL)
        indexed, *newer = self._query_snapshot(
            [clustered_page_sql(codec, filters, keyset, k) for k in parts], params
        )
        if not newer or not newer[0]:
            return [decode(r) for r in indexed]
        return list(
            itertools.islice(heapq.merge(map(decode, indexed), map(decode, newer[0]), key=_ID_SEQ), limit)
        )

    @_names_store
    def metrics(self, run_id: str | None = None, pipeline_id: str | None = None) -> list[MetricRecord]:
        where, params = _where({"run_id": run_id, "pipeline_id": pipeline_id})
        rows = self._query(
            f"SELECT {METRICS.select_list} FROM metrics{where} ORDER BY run_id, pipeline_id, name", params
        )
        return [METRICS.decode(r) for r in rows]

    @_names_store
    def metric_points(
        self, run_id: str, pipeline_id: str, key: str | None = None, after_step: int = -1, limit: int = 1000
    ) -> list[MetricPoint]:
        where, params = _where({"run_id": run_id, "pipeline_id": pipeline_id, "key": key})
        rows = self._query(
            f"SELECT {METRIC_POINTS.select_list} FROM metric_points{where} AND step > ?"
            " ORDER BY step, key, point_id LIMIT ?",
            [*params, after_step, max(0, limit)],
        )
        return [METRIC_POINTS.decode(r) for r in rows]

    def point_pipelines(self, run_id: str) -> list[str]:
        """The pipeline ids (``""``: the run scope) with metric points in run ``run_id``, sorted
        (optional method: ``export --rows points`` visits these instead of every pipeline that
        made an attempt). One pass over the run's part of the ``(run_id, pipeline_id, step)``
        index."""
        rows = self._query(
            "SELECT DISTINCT pipeline_id FROM metric_points WHERE run_id = ? ORDER BY pipeline_id", (run_id,)
        )
        return [pid for (pid,) in rows]

    @_names_store
    def resources(self, run_id: str | None = None) -> list[ResourceRecord]:
        where, params = _where({"run_id": run_id})
        rows = self._query(
            f"SELECT {RESOURCES.select_list} FROM resources{where} ORDER BY pool, resource_id, rowid", params
        )
        return [RESOURCES.decode(r) for r in rows]


def _where(filters: dict[str, Any]) -> tuple[str, list[Any]]:
    used = [(k, v) for k, v in filters.items() if v is not None]
    if not used:
        return "", []
    return " WHERE " + " AND ".join(f'"{k}" = ?' for k, _ in used), [v for _, v in used]
