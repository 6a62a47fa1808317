"""Record <-> SQL row conversion: one ``RowCodec`` per table, built once at import.

The hot path is ``commit``: each column is one Python expression over the record (a field,
``int()`` of a boolean, ``bytearray()`` of a blob, one ``msgspec.json`` encode per dict/list
field), compiled by the statements into one function per table and NULL pattern; never a JSON
dump of the whole record. Column order is the record's field order with the JSON columns last,
so reads rebuild a record from a row by position, through a decoder compiled the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

import msgspec

from pyattacker.errors import CorruptRow
from pyattacker.model import (
    OK_DECISION,
    ArtifactRecord,
    AttemptRecord,
    EventRecord,
    HandoffRecord,
    MetricPoint,
    MetricRecord,
    PipelineRecord,
    ResourceRecord,
    RunRecord,
    TaskRecord,
)

__all__ = [
    "ARTIFACTS",
    "OK_DECISION_JSON",
    "PIPELINE_ID",
    "SLOT_ID",
    "compile_function",
    "ATTEMPTS",
    "EVENTS",
    "HANDOFFS",
    "METRICS",
    "METRIC_POINTS",
    "PIPELINES",
    "RESOURCES",
    "RUNS",
    "TASKS",
    "RowCodec",
]

R = TypeVar("R")

#: Derived columns (schema 4). Most rows repeat values that their pipeline already gives: the
#: pipeline's id (its ``pk`` names it in ``pipeline_keys``) and a slot's id, ``pipeline_id:seq``
#: (a task's ``task_run_id`` and output, an artifact's id, an attempt's task); and nearly every
#: attempt carries the same decision, the runner's ``OK_DECISION``. A writer stores ``NULL`` for
#: a ``PIPELINE_ID`` column of a row that has a ``pk``, and an empty BLOB (``x''``, which no
#: value of these text columns ever is) for a ``SLOT_ID`` column that holds exactly its slot's
#: id and for an ``OK_DECISION_JSON`` column that holds that very decision; readers rebuild all
#: three (``RowCodec.read_columns``). Together they are a large share of a run's bytes
#: (docs/stores.md).
PIPELINE_ID = "pipeline"
SLOT_ID = "slot"
OK_DECISION_JSON = "ok_decision"

_encode = msgspec.json.Encoder().encode
#: a successful attempt's decision (the runner's shared dict) as JSON, encoded once: the
#: ``decision`` column tests for it by identity before encoding (one encode per attempt less).
#: Schema 4 also reads this text wherever an attempt row holds the ``OK_DECISION_JSON`` marker,
#: so it is part of the file format: changing ``OK_DECISION`` needs a new schema version (the
#: derived-ids test pins the text).
_OK_JSON = _encode(OK_DECISION).decode()

#: Python types a column may come back as from SQLite, by the field's annotated type (a REAL
#: column hands back an ``int`` for a value written as an integer by hand, which is harmless)
_SQL_TYPES: dict[Any, tuple[type, ...]] = {
    str: (str,),
    int: (int,),
    bool: (int,),
    float: (float, int),
    bytes: (bytes,),
}
_NONE = type(None)


def _accepted(annotation: Any) -> tuple[tuple[type, ...], bool]:
    """``(types, nullable)`` a column of a field annotated ``annotation`` may hold."""
    args = getattr(annotation, "__args__", None)
    if args is not None and _NONE in args:
        inner = [a for a in args if a is not _NONE]
        return (_SQL_TYPES.get(inner[0], ()) if len(inner) == 1 else ()), True
    return _SQL_TYPES.get(annotation, ()), False


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class RowCodec(Generic[R]):
    """How one record type maps to one table."""

    def __init__(
        self,
        table: str,
        cls: type[R],
        plain: tuple[str, ...],
        json_fields: tuple[str, ...] = (),
        bool_fields: tuple[str, ...] = (),
        blob_fields: tuple[str, ...] = (),
        key: tuple[str, ...] | None = None,
        shared: tuple[str, ...] = (),
        derived: tuple[tuple[str, str], ...] = (),
    ) -> None:
        self.table = table
        self.cls = cls
        self.plain = plain
        self.json_fields = json_fields
        self.bool_fields = bool_fields
        self.columns: tuple[str, ...] = plain + tuple(f"{f}_json" for f in json_fields)
        self.select_list = ", ".join(f'"{c}"' for c in self.columns)
        #: the columns that name a row in an error message (its key)
        self.key: tuple[str, ...] = key or plain[:1]
        # read once: each call evaluates every annotation of the class again, and this runs
        # for every codec when the SQLite store is imported
        info = {f.name: f for f in msgspec.structs.fields(cls)}  # type: ignore[arg-type]
        self._defaults = {f: getattr(cls(**_required_dummy(info)), f) for f in json_fields}
        fields = {name: f.type for name, f in info.items()}
        #: ``(python types, nullable)`` each plain column may hold (checked on every read)
        self.accepted = tuple(_accepted(fields[f]) for f in plain)
        #: one typed decoder per JSON column: ``tags`` must be an object, ``leases`` a list...
        self._json_decoders = tuple(msgspec.json.Decoder(fields[f]) for f in json_fields)
        #: one expression per column (see ``_expressions``): statements compile them into the
        #: encoder of each NULL pattern (``statements.py``)
        self.expressions = _expressions(plain, json_fields, bool_fields, blob_fields)
        #: column positions that may be None: statements write those as literal NULLs
        self.nullable: tuple[int, ...] = _nullable(info, plain)
        #: the fields behind ``nullable`` (statements test them for None)
        self.nullable_fields: tuple[str, ...] = tuple(plain[i] for i in self.nullable)
        #: positions of the text columns whose value the rows of one commit usually share (the
        #: run id, a state): statements bind such a value once when a group of rows agrees on it
        self.shared: tuple[int, ...] = tuple(
            plain.index(f) if f in plain else len(plain) + json_fields.index(f) for f in shared
        )
        #: ``{position: kind}`` of the id columns a schema-4 writer leaves out when the row's
        #: pipeline gives them (``PIPELINE_ID``, ``SLOT_ID``); readers select ``read_list`` instead
        self.derived: dict[int, str] = {self.columns.index(c): kind for c, kind in derived}
        #: compiled on the first read (``decode``): a writer never decodes most tables, and
        #: compiling all ten at import would slow every process's plugin discovery
        self._decode_row: Callable[[tuple[Any, ...]], R] = self._compile_and_decode

    def read_columns(self, t: str = "t.", k: str = "k.") -> list[str]:
        """The SQL of each column as readers select it: a derived id column is rebuilt from the
        pipeline's key row (``k``, joined on ``pk``), any other column is read as stored (``t``).

        Exact for every value: a row of an older file, or one whose id is not the derived one,
        holds its id as text and is read as it is."""
        out = []
        for i, column in enumerate(self.columns):
            kind = self.derived.get(i)
            stored = f'{t}"{column}"'
            if kind == PIPELINE_ID:
                out.append(f'COALESCE({k}"pipeline_id", {stored})')
            elif kind == SLOT_ID:
                out.append(
                    f"(CASE WHEN typeof({stored}) = 'blob' THEN {k}\"pipeline_id\" || ':' || {t}\"seq\""
                    f" ELSE {stored} END)"
                )
            elif kind == OK_DECISION_JSON:
                out.append(f"(CASE WHEN typeof({stored}) = 'blob' THEN '{_OK_JSON}' ELSE {stored} END)")
            else:
                out.append(stored)
        return out

    def marker_test(self, position: int) -> str:
        """The Python test (over the record ``r``) under which the derived column at ``position``
        is written as the ``x''`` marker; only for ``SLOT_ID`` and ``OK_DECISION_JSON`` columns."""
        kind, column = self.derived[position], self.columns[position]
        if kind == SLOT_ID:
            return f'(r.pipeline_id and r.{column} == f"{{r.pipeline_id}}:{{r.seq}}") is True'
        if kind == OK_DECISION_JSON:
            field = self.json_fields[position - len(self.plain)]
            return f"r.{field} is _ok"  # the runner's shared decision (``_ok_json`` is its text)
        raise ValueError(f"column {column} of {self.table} is not written as a marker")

    def read_list(self, t: str = "t.", k: str = "k.") -> str:
        """``read_columns`` as one select list (``select_list`` order)."""
        return ", ".join(self.read_columns(t, k))

    def _compile_decoder(self) -> Callable[[tuple[Any, ...]], R]:
        """``row -> record`` compiled for this table: readers (report, export, merge, the
        viewer) decode every row they page through, so no dict is built per row.

        Records are not validated when built, so a row edited by hand (text in a number
        column, a NULL state, JSON that does not parse) would otherwise surface far away, as a
        ``TypeError`` in whatever view adds or sorts the value. The type test of each column is
        one inline expression (cheap next to the decode); a row that fails it, or whose JSON
        does not decode to its field's type, goes to ``corrupt``, which names the column."""
        n = len(self.plain)
        args = [
            f"{f}=bool(row[{i}])" if f in self.bool_fields else f"{f}=row[{i}]"
            for i, f in enumerate(self.plain)
        ]
        args += [f"{f}=_json_{k}(row[{n + k}])" for k, f in enumerate(self.json_fields)]
        checks = [_check_expression(i, types, nullable) for i, (types, nullable) in enumerate(self.accepted)]
        namespace: dict[str, Any] = {
            "_cls": self.cls,
            "_corrupt": self.corrupt,
            "_DecodeError": msgspec.DecodeError,
        }
        for i, (types, _) in enumerate(self.accepted):
            namespace[f"_t{i}"] = types
        for k, f in enumerate(self.json_fields):
            namespace[f"_json_{k}"] = _json_reader(self._json_decoders[k], self._defaults[f])
        test = " and ".join(c for c in checks if c) or "True"
        source = (
            "def decode(row):\n"
            f"    if {test}:\n"
            "        try:\n"
            f"            return _cls({', '.join(args)})\n"
            "        except _DecodeError:\n"
            "            pass\n"
            "    raise _corrupt(row)\n"
        )
        exec(compile(source, f"<{self.table} row decoder>", "exec"), namespace)
        decode: Callable[[tuple[Any, ...]], R] = namespace["decode"]
        return decode

    def decode(self, row: tuple[Any, ...]) -> R:
        """A record from a full row (``select_list`` order); ``CorruptRow`` if it is not one."""
        return self._decode_row(row)

    def _compile_and_decode(self, row: tuple[Any, ...]) -> R:
        # two threads may both get here first: each compiles the same function, either is kept
        self._decode_row = self._compile_decoder()
        return self._decode_row(row)

    def typed_sql(self, columns: tuple[str, ...], alias: str = "") -> str:
        """A SQL test that ``columns`` hold what ``decode`` accepts (``typeof`` per column).

        Narrow reads (counts, summaries) fetch a few columns as tuples, never through
        ``decode``; they compute this in SQLite, next to the values, and look a bad row up
        only when it is false."""
        names = {str: "text", int: "integer", float: "real", bytes: "blob"}
        tests = []
        for column in columns:
            types, nullable = self.accepted[self.plain.index(column)]
            kinds = sorted({names[t] for t in types} | ({"null"} if nullable else set()))
            listed = ", ".join(f"'{k}'" for k in kinds)
            tests.append(f'typeof({alias}"{column}") IN ({listed})')
        return "(" + " AND ".join(tests) + ")"

    def corrupt(self, row: tuple[Any, ...]) -> CorruptRow:
        """Why ``row`` (``select_list`` order) is not a record: its first bad column, named."""
        where = ", ".join(f"{c}={_describe(row[self.plain.index(c)])}" for c in self.key)
        return CorruptRow(f"table {self.table}, row {where}: {self._first_problem(row)}")

    def _first_problem(self, row: tuple[Any, ...]) -> str:
        for i, (types, nullable) in enumerate(self.accepted):
            value = row[i]
            if value is None and not nullable:
                return f"column {self.plain[i]} is NULL"
            if value is not None and types and type(value) not in types:
                expected = " or ".join(t.__name__ for t in types)
                return f"column {self.plain[i]} holds {_describe(value)}, expected {expected}"
        n = len(self.plain)
        for k, decoder in enumerate(self._json_decoders):
            text = row[n + k]
            if text is None:
                continue
            try:
                decoder.decode(text)
            except msgspec.DecodeError as exc:
                return f"column {self.columns[n + k]} is not valid JSON for its field ({exc})"
        return "the row cannot be read"


def _check_expression(i: int, types: tuple[type, ...], nullable: bool) -> str:
    """The inline type test of column ``i`` ("" when the column may hold anything)."""
    if not types:
        return f"row[{i}] is not None" if not nullable else ""
    test = f"type(row[{i}]) is {types[0].__name__}" if len(types) == 1 else f"type(row[{i}]) in _t{i}"
    return f"(row[{i}] is None or {test})" if nullable else test


def _json_reader(decoder: msgspec.json.Decoder[Any], default: Any) -> Callable[[Any], Any]:
    """A JSON column's value (its field's default when NULL), decoded to the field's type."""
    decode = decoder.decode

    def read(text: str | bytes | None) -> Any:
        return default if text is None else decode(text)

    return read


def _expressions(
    plain: tuple[str, ...],
    json_fields: tuple[str, ...],
    bool_fields: tuple[str, ...] = (),
    blob_fields: tuple[str, ...] = (),
) -> tuple[str, ...]:
    """One Python expression per column, in terms of the record ``r`` (the per-row hot path).

    Values are handed to ``sqlite3`` in the types it binds without its adapter lookup (exact
    ``int``, ``float``, ``str``, ``bytearray``; ``None`` is taken care of by the statement):
    booleans become ``int``, blobs ``bytearray``, so no value pays for an adapter lookup.
    Field names come from the codec tables below, never from input.
    """
    parts = []
    for f in plain:
        if f in bool_fields:  # int() of a bool without a type call (CPython 3.11 calls int())
            parts.append(f"(1 if r.{f} is True else 0 if r.{f} is False else int(r.{f}))")
        elif f in blob_fields:
            parts.append(f"(None if r.{f} is None else bytearray(r.{f}))")
        else:
            parts.append(f"r.{f}")
    parts += [
        f"(_ok_json if r.{f} is _ok else _encode(r.{f}).decode())"
        if f == "decision"
        else f"_encode(r.{f}).decode()"
        for f in json_fields
    ]
    return tuple(parts)


def compile_function(name: str, args: str, body: str, label: str) -> Callable[..., Any]:
    """``def name(args): return body`` compiled once, with the JSON encoder in scope.

    Used for the row encoders: generated code reads a record's fields directly, which is
    cheaper per row than generic getters plus tuple reshaping.
    """
    return compile_block(name, args, f"    return {body}\n", label)


def compile_block(name: str, args: str, block: str, label: str) -> Callable[..., Any]:
    """``def name(args):`` with the indented statements ``block``, compiled once, with the JSON
    encoder in scope (``compile_function`` for a body of more than one expression)."""
    namespace: dict[str, Any] = {"_encode": _encode, "_ok": OK_DECISION, "_ok_json": _OK_JSON}
    source = f"def {name}({args}):\n{block}"
    exec(compile(source, f"<{label}>", "exec"), namespace)
    function: Callable[..., Any] = namespace[name]
    return function


def _nullable(info: dict[str, msgspec.structs.FieldInfo], plain: tuple[str, ...]) -> tuple[int, ...]:
    """Positions of the plain columns whose field may hold None (JSON columns never do)."""
    out = []
    for i, name in enumerate(plain):
        field = info[name]
        if field.default is None or type(None) in getattr(field.type, "__args__", ()):
            out.append(i)
    return tuple(out)


def _required_dummy(info: dict[str, msgspec.structs.FieldInfo]) -> dict[str, Any]:
    """Placeholder values for required fields, only to read the defaults of optional ones."""
    return {name: None for name, f in info.items() if f.required}


RUNS = RowCodec(
    "runs",
    RunRecord,
    (
        "run_id", "status", "label", "started_at", "ended_at", "heartbeat_at", "host", "pid",
        "pid_started_at", "python", "version", "notes", "stop_reason",
    ),
    ("config", "stats"),
)  # fmt: skip

PIPELINES = RowCodec(
    "pipelines",
    PipelineRecord,
    (
        "pipeline_id", "run_id", "name", "key", "state", "created_at", "started_at", "finished_at",
        "n_tasks_total", "cursor", "attempts_total", "failed_task", "error_class", "error_type",
        "error_message", "traceback", "seed_digest", "spec_digest", "seed_key", "repeat", "resume_of",
    ),
    ("tags",),
    shared=("run_id", "name", "state", "spec_digest", "tags"),
)  # fmt: skip

TASKS = RowCodec(
    "tasks",
    TaskRecord,
    (
        "task_run_id", "pipeline_id", "run_id", "name", "seq", "state", "attempts_used", "started_at",
        "ended_at", "duration_ms", "output_artifact_id", "error_class", "error_type", "error_message",
        "resource",
    ),
    shared=("run_id", "state", "resource"),
    derived=(("task_run_id", SLOT_ID), ("pipeline_id", PIPELINE_ID), ("output_artifact_id", SLOT_ID)),
)  # fmt: skip

ATTEMPTS = RowCodec(
    "attempts",
    AttemptRecord,
    (
        "attempt_id", "run_id", "pipeline_id", "task_run_id", "task_name", "seq", "attempt",
        "started_at", "ended_at", "duration_ms", "outcome", "error_class", "error_type",
        "error_message", "metric_failures",
    ),
    ("decision", "leases"),
    shared=("run_id", "outcome", "decision"),
    derived=(("pipeline_id", PIPELINE_ID), ("task_run_id", SLOT_ID), ("decision_json", OK_DECISION_JSON)),
)  # fmt: skip

EVENTS = RowCodec(
    "events",
    EventRecord,
    ("event_id", "ts", "kind", "scope", "run_id", "pipeline_id", "task_run_id", "pool", "resource_id"),
    ("data",),
    shared=("kind", "scope", "run_id"),
    derived=(("pipeline_id", PIPELINE_ID),),
)

ARTIFACTS = RowCodec(
    "artifacts",
    ArtifactRecord,
    (
        "artifact_id", "pipeline_id", "task_name", "seq", "type_name", "codec", "digest", "size",
        "created_at", "payload", "is_final", "blob_ref",
    ),
    bool_fields=("is_final",),
    blob_fields=("payload",),
    shared=("type_name", "codec"),
    derived=(("artifact_id", SLOT_ID), ("pipeline_id", PIPELINE_ID)),
)  # fmt: skip

METRICS = RowCodec(
    "metrics",
    MetricRecord,
    ("run_id", "pipeline_id", "name", "updated_at", "attempt"),
    ("value",),
    key=("run_id", "pipeline_id", "name"),
)

METRIC_POINTS = RowCodec(
    "metric_points",
    MetricPoint,
    ("op_id", "run_id", "pipeline_id", "key", "step", "ts", "attempt"),
    ("value",),
)

RESOURCES = RowCodec(
    "resources",
    ResourceRecord,
    ("run_id", "pool", "resource_id", "kind", "state", "updated_at"),
    ("spec", "stats"),
    key=("run_id", "pool", "resource_id"),
)

HANDOFFS = RowCodec(
    "handoffs",
    HandoffRecord,
    (
        "handoff_id", "pipeline_id", "run_id", "from_seq", "from_task", "to_seq", "to_task",
        "entry_seq", "entry_artifact_id", "entry_reused", "reason", "ts", "operation",
    ),
    bool_fields=("entry_reused",),
)  # fmt: skip
