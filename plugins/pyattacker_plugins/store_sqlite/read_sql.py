"""The SQL of the store's reads, each statement built once per shape (``lru_cache``).

Pages of one kind (``page_sql``; tasks and artifacts in ``(pipeline_id, seq)`` order through an
id-ordered key source, ``clustered_page_sql``), the children of many pipelines at once, single
lookups and counts. Rows carry the clustering key ``pk``, not the pipeline id: a statement that
returns ids joins the key table as ``k`` (``IDS_OLD``, ``IDS_INDEXED``, ``IDS_TAIL`` and
``schema.KEY_IDS`` say where an id is looked up, by schema version).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from pyattacker.model import PIPELINE_STATES
from pyattacker.plugins.api import PAGE_KINDS

from . import run_spans, schema
from .rows import ARTIFACTS, ATTEMPTS, EVENTS, HANDOFFS, METRICS, PIPELINES, TASKS, RowCodec

__all__ = [
    "CHILD_CODECS",
    "IDS_INDEXED",
    "IDS_OLD",
    "IDS_TAIL",
    "PAGE_CODECS",
    "PAGE_FILTERS",
    "children_sql",
    "clustered_page_sql",
    "count_sql",
    "finals_sql",
    "get_artifact_sql",
    "leases_sql",
    "lookup_sql",
    "metrics_sql",
    "page_sql",
    "rows_where",
]

#: Where readers look a pipeline id up (``ids`` in the statements below): ``pipeline_key_ids``
#: from schema 6 on (the sorted index and the keys not merged into it yet, see the schema),
#: the key table itself before.
IDS_OLD = "pipeline_keys"
#: the keys ``pipeline_ids`` holds (the writer looks its own newer ones up in memory)
IDS_INDEXED = "pipeline_ids"
#: the newer ones, as a table ``k`` can name (an ordered page reads the two parts apart)
IDS_TAIL = f"({schema.KEY_TAIL})"

PAGE_CODECS: dict[str, RowCodec[Any]] = {
    "pipelines": PIPELINES,
    "tasks": TASKS,
    "attempts": ATTEMPTS,
    "events": EVENTS,
    "artifacts": ARTIFACTS,
}
#: which filters each kind honours (same as the memory reference store)
PAGE_FILTERS: dict[str, tuple[str, ...]] = {
    "pipelines": ("run_id", "pipeline_id", "state"),
    "tasks": ("run_id", "pipeline_id", "state"),
    "attempts": ("run_id", "pipeline_id"),
    "events": ("run_id", "pipeline_id"),
    "artifacts": ("pipeline_id",),
}


#: a run's pipelines in page order: ``+`` keeps SQLite from reading them through
#: ``pipelines_by_run_state`` and sorting all of them for each page; it walks
#: ``pipelines_by_created`` (the page order) from the keyset on instead, between the run's
#: first and last ``created_at`` (so the rows of the runs before and after it are not walked).
#: Parameters: the run, then ``RUN_CREATED``'s two values.
PAGE_ORDER_RUN = '+t."run_id" = ? AND t."created_at" BETWEEN ? AND ?'
#: the first and last ``created_at`` of run ``?`` (the run twice per state): one seek each in
#: ``pipelines_by_run_state``, where ``MIN(created_at) ... WHERE run_id = ?`` reads every entry
RUN_CREATED = "SELECT MIN(lo), MAX(hi) FROM ({})".format(
    " UNION ALL ".join(
        f"SELECT (SELECT MIN(created_at) FROM pipelines WHERE run_id = ? AND state = '{s}') AS lo,"
        f" (SELECT MAX(created_at) FROM pipelines WHERE run_id = ? AND state = '{s}') AS hi"
        for s in PIPELINE_STATES
    )
)


@lru_cache(maxsize=256)
def page_sql(
    kind: str,
    filters: tuple[str, ...],
    keyset: bool,
    select: str | None = None,
    spans: bool = False,
    ids: str = IDS_OLD,
) -> str:
    """``page``'s statement for the rowid kinds; ``select`` narrows the columns; ``spans``: the
    file has ``run_spans`` (schema 5), which a filter on the run of attempts or events reads;
    ``ids``: where a pipeline id is looked up."""
    codec = PAGE_CODECS[kind]
    keys = PAGE_KINDS[kind]
    by_span = spans and "run_id" in filters and kind in schema.SPAN_KINDS
    where = [
        f't."pk" = (SELECT pk FROM {ids} WHERE pipeline_id = ?)'
        if f == "pipeline_id"
        else run_spans.run_condition(kind)
        if f == "run_id" and by_span
        else PAGE_ORDER_RUN
        if f == "run_id" and kind == "pipelines" and "state" not in filters
        else f't."{f}" = ?'
        for f in filters
    ]
    if keyset:
        cols = ", ".join(f't."{k}"' for k in keys)
        marks = ", ".join("?" for _ in keys)
        where.append(f"({cols}) > ({marks})" if len(keys) > 1 else f't."{keys[0]}" > ?')
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    order = ", ".join(f't."{k}"' for k in keys)
    columns = select or codec.read_list()
    source = (run_spans.SOURCE if by_span else "") + _source(codec, columns)
    return f"SELECT {columns} FROM {source}{clause} ORDER BY {order} LIMIT ?"


def _source(codec: RowCodec[Any], columns: str) -> str:
    """``codec``'s table as ``t``, with the key table as ``k`` when ``columns`` read from it (a
    derived id; a narrow summary of attempts needs none)."""
    table = f'"{codec.table}" AS t'
    return f"{table} LEFT JOIN pipeline_keys AS k ON k.pk = t.pk" if 'k."' in columns else table


def rows_where(codec: RowCodec[Any], where: str) -> str:
    """Whole rows of ``codec``'s table (derived ids rebuilt) matching ``where``, which names the
    table's own columns unqualified (``... LIMIT 1`` included)."""
    if not codec.derived:
        return f'SELECT {codec.select_list} FROM "{codec.table}" WHERE {where}'
    inner = f'(SELECT * FROM "{codec.table}" WHERE {where}) AS t'
    return f"SELECT {codec.read_list()} FROM {inner} LEFT JOIN pipeline_keys AS k ON k.pk = t.pk"


@lru_cache(maxsize=64)
def clustered_page_sql(codec: RowCodec[Any], filters: tuple[str, ...], keyset: bool, keys: str) -> str:
    """(pipeline_id, seq) order through an id-ordered key source ``keys`` (the key table's unique
    index before schema 6, ``pipeline_ids`` or the sorted tail after), then each pipeline's rows."""
    cols = codec.read_list()
    where = ['k."pipeline_id" = ?' if f == "pipeline_id" else f't."{f}" = ?' for f in filters]
    if keyset:
        where.append('(k."pipeline_id", t."seq") > (?, ?)')
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    return (
        f'SELECT {cols} FROM {keys} AS k JOIN "{codec.table}" AS t ON t.pk = k.pk{clause}'
        ' ORDER BY k."pipeline_id", t."seq" LIMIT ?'
    )


CHILD_CODECS: dict[str, RowCodec[Any]] = {"tasks": TASKS, "artifacts": ARTIFACTS, "handoffs": HANDOFFS}
#: the order of each child kind within one pipeline
_CHILD_ORDER = {"tasks": "seq", "artifacts": "seq", "handoffs": "handoff_id"}


@lru_cache(maxsize=64)
def children_sql(kind: str, n: int, ids: str) -> str:
    """Tasks, artifacts or ledger rows of n pipeline ids, by pipeline id then seq (handoff id):
    one index probe of the key table per id, then that pipeline's rows."""
    codec = CHILD_CODECS[kind]
    cols = codec.read_list()
    marks = ", ".join("?" for _ in range(n))
    return (
        f'SELECT {cols} FROM {ids} AS k JOIN "{kind}" AS t ON t.pk = k.pk'
        f' WHERE k."pipeline_id" IN ({marks}) ORDER BY k."pipeline_id", t."{_CHILD_ORDER[kind]}"'
    )


@lru_cache(maxsize=64)
def leases_sql(n: int, ids: str) -> str:
    """Each attempt's task and leases for n pipeline ids, oldest first (the last one per task is
    what it leased in the end): two columns, where a whole attempt row carries fifteen."""
    marks = ", ".join("?" for _ in range(n))
    return (
        f'SELECT {_ATTEMPT_TASK}, t."leases_json" FROM {ids} AS k JOIN attempts AS t ON t.pk = k.pk'
        f' WHERE k."pipeline_id" IN ({marks}) ORDER BY t."attempt_id"'
    )


@lru_cache(maxsize=4)
def get_artifact_sql(ids: str) -> str:
    """One artifact by pipeline id and seq (a resume reads one per pipeline it continues)."""
    return (
        f"SELECT {ARTIFACTS.read_list()} FROM {ids} AS k JOIN artifacts AS t ON t.pk = k.pk"
        ' WHERE k."pipeline_id" = ? AND t."seq" = ?'
    )


#: an attempt's ``task_run_id`` as readers see it (derived, see ``rows.SLOT_ID``)
_ATTEMPT_TASK = ATTEMPTS.read_columns()[ATTEMPTS.columns.index("task_run_id")]


@lru_cache(maxsize=64)
def finals_sql(n: int, ids: str) -> str:
    """The artifacts marked final of n pipeline ids, in (pipeline_id, seq) order: the filter runs
    in SQLite, so the other artifacts of a pipeline are never fetched or decoded."""
    cols = ARTIFACTS.read_list()
    marks = ", ".join("?" for _ in range(n))
    return (
        f"SELECT {cols} FROM {ids} AS k JOIN artifacts AS t ON t.pk = k.pk"
        f' WHERE k."pipeline_id" IN ({marks}) AND t."is_final" ORDER BY k."pipeline_id", t."seq"'
    )


@lru_cache(maxsize=64)
def metrics_sql(n: int) -> str:
    """The latest metrics of run ? for n pipeline ids, through the (run_id, pipeline_id, name) key."""
    marks = ", ".join("?" for _ in range(n))
    return (
        f"SELECT {METRICS.select_list} FROM metrics WHERE run_id = ? AND pipeline_id IN ({marks})"
        " ORDER BY pipeline_id, name"
    )


@lru_cache(maxsize=64)
def lookup_sql(n: int, ids: str) -> str:
    """Whole pipeline rows of n pipeline ids, in no particular order."""
    marks = ", ".join("?" for _ in range(n))
    cols = ", ".join(f'p."{c}"' for c in PIPELINES.columns)
    return (
        f"SELECT {cols} FROM {ids} AS k JOIN pipelines AS p ON p.pk = k.pk WHERE k.pipeline_id IN ({marks})"
    )


def count_sql(kind: str, by_run: bool, spans: bool) -> str:
    """Rows of ``kind``, or of run ``?`` (``by_run``) through its span when the file has them."""
    if not by_run:
        return f'SELECT COUNT(*) FROM "{kind}"'
    if spans and kind in schema.SPAN_KINDS:
        return f'SELECT COUNT(*) FROM {run_spans.SOURCE}"{kind}" AS t WHERE {run_spans.run_condition(kind)}'
    return f'SELECT COUNT(*) FROM "{kind}" WHERE run_id = ?'
