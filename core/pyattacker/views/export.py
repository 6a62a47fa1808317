"""``export``: every row of a kind, streamed in bounded batches to jsonl, json or csv.

Nothing is capped: rows are read with keyset pages (``iter_rows``) and written as they come,
so memory stays flat for millions of rows (the only per-pipeline state is the winner map of a
multi-store ``pipelines``/``results`` merge, which the stores of distinct shards of one run do
not need: ``merge.shard_stores``). Files are written to a temporary file in the
target directory and renamed into place, so a reader never sees half an export.
"""

from __future__ import annotations

import csv
import io
import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any

from pyattacker.errors import ConfigError
from pyattacker.flow.visits import attempt_visit
from pyattacker.model import ArtifactRecord, PipelineRecord
from pyattacker.plugins.store_base import StoreBase, iter_rows
from pyattacker.store.codecs import CodecRegistry
from pyattacker.store.location import local_file
from pyattacker.views.blobs import BlobReader, ViewCodecs
from pyattacker.views.common import (
    ALL_RUNS,
    DAMAGED,
    choose_run,
    encode_json,
    encode_plain,
    read_only_store,
    render_payload,
    to_plain,
)
from pyattacker.views.export_visits import (
    Visits,
    control_record,
    ledger_rows,
    with_artifact_visits,
    with_task_visits,
)
from pyattacker.views.failures import attach_tracebacks
from pyattacker.views.fold import state_rank
from pyattacker.views.shard_report import shard_stores

__all__ = [
    "CSV_BATCH",
    "FORMATS",
    "ROW_KINDS",
    "export_stores",
    "guard_cell",
    "infer_format",
    "iter_kind",
]

ROW_KINDS = ("pipelines", "tasks", "attempts", "events", "artifacts", "results", "metrics", "points")
FORMATS = ("jsonl", "json", "csv")
SUFFIX_FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "json", ".csv": "csv"}
#: rows buffered before the CSV header is fixed (later keys go to the ``extra`` column)
CSV_BATCH = 1000
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "\n")
_FORMULA_FIRST = frozenset(_FORMULA_STARTS)  # (each is one character: ``text[:1] in`` it)
_POINT_KEYS_PROBE = 5000
MERGED_KINDS = frozenset({"pipelines", "results"})


def infer_format(output: str, fmt: str | None) -> str:
    """The format named by ``--format``, else by the OUTPUT suffix, else jsonl; refuses a mismatch."""
    suffix = os.path.splitext(output)[1].lower() if output != "-" else ""
    implied = SUFFIX_FORMATS.get(suffix)
    if fmt is not None:
        if fmt not in FORMATS:
            raise ConfigError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
        if implied is not None and implied != fmt:
            raise ConfigError(f"--format {fmt} contradicts the output name {output!r} (a {implied} suffix)")
        return fmt
    return implied or "jsonl"


# -- rows of each kind ------------------------------------------------------------------------
def _duration_ms(p: PipelineRecord) -> float | None:
    if p.started_at is None or p.finished_at is None:
        return None
    return round((p.finished_at - p.started_at) * 1000.0, 3)


def _artifact_row(a: ArtifactRecord, codecs: Any) -> dict[str, Any]:
    value, encoding = render_payload(a, codecs)
    return {
        "artifact_id": a.artifact_id,
        "pipeline_id": a.pipeline_id,
        "task": a.task_name,
        "seq": a.seq,
        "type": a.type_name,
        "codec": a.codec,
        "digest": a.digest,
        "size": a.size,
        "created_at": a.created_at,
        "is_final": a.is_final,
        "blob_ref": a.blob_ref,
        "payload": value,
        "payload_encoding": encoding,
    }


def _pipeline_head(p: PipelineRecord) -> dict[str, Any]:
    return {
        "pipeline_id": p.pipeline_id,
        "key": p.key,
        "seed_key": p.seed_key,
        "repeat": p.repeat,
        "name": p.name,
        "run_id": p.run_id,
        "state": p.state,
        "tags": p.tags,
        "n_tasks_done": p.cursor,
        "n_tasks_total": p.n_tasks_total,
        "attempts_total": p.attempts_total,
        "created_at": p.created_at,
        "started_at": p.started_at,
        "finished_at": p.finished_at,
        "duration_ms": _duration_ms(p),
        "failed_task": p.failed_task,
        "error_class": p.error_class,
        "error_type": p.error_type,
        "error_message": p.error_message,
        "traceback": p.traceback,
        "resume_of": p.resume_of,
    }


def _nested_pipeline(p: PipelineRecord, children: _Children, codecs: Any) -> dict[str, Any]:
    row = _pipeline_head(p)
    ledger = children.rows("handoffs", p)
    visits = Visits({p.pipeline_id: ledger} if ledger else {}, {p.pipeline_id: p.n_tasks_total})
    tasks = children.rows("tasks", p)
    row["tasks"] = [
        {
            "name": t.name,
            "seq": t.seq,
            "run_id": t.run_id,  # a row an earlier run left (a restart that skipped the slot) says so
            "state": t.state,
            "attempts_used": t.attempts_used,
            "duration_ms": t.duration_ms,
            "resource": t.resource,
            "error_class": t.error_class,
            "error_type": t.error_type,
            "error_message": t.error_message,
            "output_artifact_id": t.output_artifact_id,
            "visit": visits.task(p.pipeline_id, t.seq),
            "active": True,  # a slot's row is its current occurrence (a move back resets it)
        }
        for t in tasks
    ]
    row["artifacts"] = [
        {
            **_artifact_row(a, codecs),
            "visit": visits.artifact(p.pipeline_id, a.seq),
            "active": visits.active(p.pipeline_id, a.seq),
        }
        for a in children.rows("artifacts", p)
    ]
    row["metrics"] = {m.name: m.value for m in children.rows("metrics", p)}
    # the control ledger: with handoffs the cursor is a position in the chain, not a count of
    # tasks done, and these rows say which tasks were skipped and what the destinations received
    # (with the visits each move left and entered: backward moves re-enter tasks)
    row["handoffs"] = ledger_rows(ledger, p.n_tasks_total)
    control = control_record(p, ledger, tasks) if ledger else None
    if control is not None:  # a pipeline that moved back: where its traversal stands
        row["control"] = control
    return row


def _result(p: PipelineRecord, children: _Children, codecs: Any) -> dict[str, Any]:
    final = children.final(p)
    value, encoding = (None, "absent") if final is None else render_payload(final, codecs)
    row = {
        "pipeline_id": p.pipeline_id,
        "key": p.key,
        "seed_key": p.seed_key,
        "repeat": p.repeat,
        "name": p.name,
        "run_id": p.run_id,
        "state": p.state,
        "result": value,
        "result_encoding": encoding,
        "artifact_available": encoding not in ("absent", DAMAGED),
        "failed_task": p.failed_task,
        "error_class": p.error_class,
        "error_type": p.error_type,
        "error_message": p.error_message,
        "traceback": p.traceback,
    }
    if "suite_id" in p.tags:  # a suite member's row: which experiment, and its standalone key
        row["suite_id"] = p.tags["suite_id"]
        row["experiment_id"] = p.tags.get("experiment_id")
        row["local_key"] = p.seed_key
    return row


#: pipelines whose tasks, artifacts and metrics are read together (one statement per kind)
CHILD_BATCH = 256


class _Children:
    """The tasks, artifacts and metrics of a batch of pipelines.

    ``rows_by_pipeline`` and ``metrics_by_pipeline`` read them for the whole batch (one
    statement per kind and run on SQLite, where reading per pipeline costs three statements per
    pipeline). The kind ``final`` (what ``results`` needs) reads only each pipeline's final
    artifact (``final_artifacts``).
    """

    def __init__(self, store: StoreBase, batch: list[PipelineRecord], kinds: tuple[str, ...]) -> None:
        self.store = store
        self.read: dict[str, dict[str, list[Any]]] = {}
        self.finals: dict[str, Any] = {}
        ids = [p.pipeline_id for p in batch]
        for kind in kinds:
            if kind == "final":
                self.finals = store.final_artifacts(ids)
            elif kind == "metrics":
                by_run: dict[str, list[str]] = {}
                for p in batch:  # a pipeline shows the metrics of the run that owns its row
                    by_run.setdefault(p.run_id, []).append(p.pipeline_id)
                self.read[kind] = {}
                for run_id, run_ids in by_run.items():
                    self.read[kind].update(store.metrics_by_pipeline(run_id, run_ids))
            else:
                self.read[kind] = store.rows_by_pipeline(kind, ids)

    def rows(self, kind: str, p: PipelineRecord) -> list[Any]:
        return self.read[kind].get(p.pipeline_id, [])

    def final(self, p: PipelineRecord) -> Any:
        """The pipeline's final artifact (the first marked final, in seq order), or None."""
        return self.finals.get(p.pipeline_id)


def _tasks_with_leases(store: StoreBase, page: list[Any]) -> Iterator[dict[str, Any]]:
    """Task rows, each with ``leases``: which resources its last attempt leased (the attempt
    that left the task in its state). Read for a page of tasks at once (``task_leases``)."""
    if not page:
        return
    last = store.task_leases(list(dict.fromkeys(t.pipeline_id for t in page)))
    rows = []
    for task in page:
        row = to_plain(task)
        row["leases"] = last.get(task.task_run_id, [])
        rows.append(row)
    yield from with_task_visits(store, rows)


def _tasks(store: StoreBase, run_id: str | None) -> Iterator[dict[str, Any]]:
    page: list[Any] = []
    for task in iter_rows(store, "tasks", run_id=run_id):
        page.append(task)
        if len(page) >= CHILD_BATCH:
            yield from _tasks_with_leases(store, page)
            page = []
    yield from _tasks_with_leases(store, page)


def _pipelines_with_children(
    store: StoreBase, kind: str, run_id: str | None, codecs: Any, keep: Callable[[str], bool] | None
) -> Iterator[dict[str, Any]]:
    """``pipelines`` / ``results`` rows: pipelines in their order, their children read a batch at
    a time (memory stays bounded by the batch)."""
    build = _nested_pipeline if kind == "pipelines" else _result
    kinds = ("tasks", "artifacts", "metrics", "handoffs") if kind == "pipelines" else ("final",)
    batch: list[PipelineRecord] = []
    for p in iter_rows(store, "pipelines", run_id=run_id):
        if keep is None or keep(p.pipeline_id):
            batch.append(p)
        if len(batch) >= CHILD_BATCH:
            yield from _build_batch(store, batch, kinds, build, codecs)
            batch = []
    yield from _build_batch(store, batch, kinds, build, codecs)


def _build_batch(
    store: StoreBase,
    batch: list[PipelineRecord],
    kinds: tuple[str, ...],
    build: Callable[[PipelineRecord, _Children, Any], dict[str, Any]],
    codecs: Any,
) -> Iterator[dict[str, Any]]:
    if not batch:
        return
    children = _Children(store, batch, kinds)
    for p in batch:
        yield build(p, children, codecs)


def _points(store: StoreBase, run_id: str | None) -> Iterator[dict[str, Any]]:
    runs = [r.run_id for r in store.runs()] if run_id is None else [run_id]
    for rid in runs:
        for pid in store.point_pipelines(rid):  # the pipelines that have points, not every one that ran
            keys = sorted(
                {pt.key for pt in store.metric_points(rid, pid, None, -1, _POINT_KEYS_PROBE) if pt.step == 0}
            )
            for key in keys:
                after = -1
                while True:
                    page = store.metric_points(rid, pid, key, after, 1000)
                    for pt in page:
                        row = to_plain(pt)
                        row.pop("op_id", None)
                        yield row
                    if len(page) < 1000:
                        break
                    after = page[-1].step


def iter_kind(
    store: StoreBase,
    kind: str,
    *,
    run_id: str | None = None,
    codecs: Any = None,
    keep: Callable[[str], bool] | None = None,
) -> Iterator[dict[str, Any]]:
    """Every row of ``kind`` (``run_id`` None = all runs) as a JSON-ready dict, in documented order.

    ``keep(pipeline_id)`` filters pipelines/results (used by the multi-store merge).
    """
    if kind in ("pipelines", "results"):
        yield from _pipelines_with_children(store, kind, run_id, codecs, keep)
    elif kind == "tasks":
        yield from attach_tracebacks(store, kind, _tasks(store, run_id))
    elif kind == "attempts":
        yield from attach_tracebacks(
            store,
            kind,
            (
                {**to_plain(a), "visit": attempt_visit(a.task_run_id)}
                for a in iter_rows(store, kind, run_id=run_id)
            ),
        )
    elif kind == "events":
        yield from attach_tracebacks(
            store, kind, (to_plain(row) for row in iter_rows(store, kind, run_id=run_id))
        )
    elif kind == "artifacts":
        owned = (
            None if run_id is None else {p.pipeline_id for p in iter_rows(store, "pipelines", run_id=run_id)}
        )
        page: list[dict[str, Any]] = []
        for a in iter_rows(store, "artifacts"):
            if owned is None or a.pipeline_id in owned:
                page.append(_artifact_row(a, codecs))
                if len(page) >= CHILD_BATCH:
                    yield from with_artifact_visits(store, page)
                    page = []
        yield from with_artifact_visits(store, page)
    elif kind == "metrics":
        for m in store.metrics(run_id=run_id):
            yield to_plain(m)
    elif kind == "points":
        yield from _points(store, run_id)
    else:
        raise ConfigError(f"--rows {kind!r}: expected one of {', '.join(ROW_KINDS)}")


# -- writers ----------------------------------------------------------------------------------
def guard_cell(text: str) -> str:
    """Neutralise spreadsheet formulas: a cell starting with = + - @ or a control char gets a ``'``."""
    return "'" + text if text.startswith(_FORMULA_STARTS) else text


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return guard_cell(value)
    return guard_cell(encode_json(value).decode())


#: the writers' encoder: ``iter_kind`` rows are JSON-ready builtins already, so they are encoded
#: as they are (``encode_json`` would convert each row to builtins a second time)
_encode_row = encode_plain


class _JsonlWriter:
    def __init__(self, fh: IO[str], title: str) -> None:
        self.fh = fh

    def write(self, row: dict[str, Any]) -> None:
        self.fh.write(_encode_row(row).decode())
        self.fh.write("\n")

    def close(self) -> None:
        pass


class _JsonWriter:
    """``{"title": ..., "rows": [...]}`` written row by row (never built in memory)."""

    def __init__(self, fh: IO[str], title: str) -> None:
        self.fh = fh
        self.first = True
        fh.write('{"title":' + encode_json(title).decode() + ',"rows":[')

    def write(self, row: dict[str, Any]) -> None:
        self.fh.write("\n" if self.first else ",\n")
        self.first = False
        self.fh.write(_encode_row(row).decode())

    def close(self) -> None:
        self.fh.write("\n]}\n")


class _CsvWriter:
    """Header from the first ``CSV_BATCH`` rows; keys seen later go into the ``extra`` column."""

    def __init__(self, fh: IO[str], title: str) -> None:
        self.out = csv.writer(fh, lineterminator="\n")
        self.buffer: list[dict[str, Any]] | None = []
        self.header: list[str] = []
        self.columns: list[str] = []
        self.known: frozenset[str] = frozenset()

    def _start(self) -> None:
        seen: dict[str, None] = {}
        for row in self.buffer or ():
            for k in row:
                seen.setdefault(k, None)
        seen.pop("extra", None)
        self.header = [*seen, "extra"]
        self.columns = self.header[:-1]
        self.known = frozenset(self.columns)
        self.out.writerow(self.header)
        rows, self.buffer = self.buffer or [], None
        for row in rows:
            self._emit(row)

    def _emit(self, row: dict[str, Any]) -> None:
        """``_cell`` of each header column and of the extra keys, inlined for the common types:
        a function call per cell was most of a CSV export's time."""
        cells: list[str] = []
        add = cells.append
        get = row.get
        for k in self.columns:
            v = get(k)
            t = type(v)
            if isinstance(v, str):
                add("'" + v if v[:1] in _FORMULA_FIRST else v)
            elif v is None:
                add("")
            elif t is float or t is int:
                add(repr(v))
            else:
                add(_cell(v))
        if row.keys() <= self.known:
            add("")
        else:
            add(_cell({k: v for k, v in row.items() if k not in self.known}))
        self.out.writerow(cells)

    def write(self, row: dict[str, Any]) -> None:
        if self.buffer is not None:
            self.buffer.append(row)
            if len(self.buffer) >= CSV_BATCH:
                self._start()
            return
        self._emit(row)

    def close(self) -> None:
        if self.buffer is not None:
            self._start()


_WRITERS: dict[str, Callable[[IO[str], str], Any]] = {
    "jsonl": _JsonlWriter,
    "json": _JsonWriter,
    "csv": _CsvWriter,
}


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


class _Target:
    """``-`` (stdout) or a temporary file renamed over OUTPUT on success, removed on failure."""

    def __init__(self, output: str) -> None:
        self.output = output
        self.tmp: str | None = None
        self.fh: IO[str]

    def __enter__(self) -> IO[str]:
        if self.output == "-":
            self.fh = sys.stdout
            return self.fh
        parent = os.path.dirname(os.path.abspath(self.output))
        if not os.path.isdir(parent):
            raise ConfigError(f"export: directory {parent} does not exist")
        try:
            fd, self.tmp = tempfile.mkstemp(
                dir=parent, prefix="." + os.path.basename(self.output) + ".", suffix=".tmp"
            )
        except OSError as exc:  # a folder this process cannot write, a read-only file system
            raise ConfigError(
                f"export: cannot write OUTPUT {self.output}: {exc.strerror or exc} ({parent})"
            ) from None
        self.fh = io.open(fd, "w", encoding="utf-8", newline="")  # noqa: UP020 - explicit fd wrapper
        return self.fh

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self.tmp is None:
            self.fh.flush()
            return
        try:
            if exc_type is None:
                self.fh.flush()
                os.fsync(self.fh.fileno())
            self.fh.close()
            if exc_type is None:
                os.chmod(self.tmp, 0o666 & ~_umask())
                os.replace(self.tmp, self.output)
                self.tmp = None
        except OSError as err:  # a full disk at the last flush, OUTPUT made a folder meanwhile
            if exc_type is None:
                raise _write_failed(self.output, err) from err
        finally:
            if self.tmp is not None and os.path.exists(self.tmp):
                os.unlink(self.tmp)


def _write_failed(output: str, exc: OSError) -> ConfigError:
    """A write to OUTPUT failed: one line (exit 2), not a traceback; the
    temporary file is removed on the way out, so no partial OUTPUT is left."""
    return ConfigError(f"export: writing OUTPUT {output} failed: {exc.strerror or exc}")


def _winners(locations: Sequence[str], run_id: str | None) -> dict[str, int]:
    """pipeline_id -> index of the store whose row wins the merge (same rules as ``report``)."""
    best: dict[str, tuple[int, float, int]] = {}
    for index, location in enumerate(locations):
        with read_only_store(location) as store:
            for p in iter_rows(store, "pipelines", run_id=_run_filter(store, run_id)):
                cand = (state_rank(p.state), p.finished_at or 0.0, index)
                old = best.get(p.pipeline_id)
                if old is None or cand[0] > old[0] or (cand[0] == old[0] and cand[1] > old[1]):
                    best[p.pipeline_id] = cand
    return {pid: v[2] for pid, v in best.items()}


def _run_filter(store: StoreBase, run_id: str | None) -> str | None:
    if run_id is None or run_id == ALL_RUNS:
        return None
    return choose_run(store, run_id).run_id


_SQLITE_HEADER = b"SQLite format 3\x00"


def _refuse_overwriting_a_store(output: str, locations: Sequence[str]) -> None:
    """OUTPUT must never be a store: ``export a.db b.db`` (OUTPUT forgotten) would otherwise
    replace the second store with rows of the first, and a run's records are not ours to lose.
    Nor a directory: the rename into it would fail only after every row was read and written."""
    if output == "-":
        return
    if os.path.isdir(output):
        raise ConfigError(
            f"export: OUTPUT {output} is a directory; name a file (for example"
            f" {os.path.join(output, 'rows.jsonl')}), or - for stdout"
        )
    target = os.path.realpath(output)
    for location in locations:
        path = local_file(location)
        if path is not None and os.path.realpath(path) == target:
            raise ConfigError(
                f"export: OUTPUT {output} is one of the stores to export; it would be overwritten"
                " (name a new .jsonl/.json/.csv file, or - for stdout)"
            )
    try:
        with open(target, "rb") as fh:
            head = fh.read(len(_SQLITE_HEADER))
    except OSError:
        return  # absent (or unreadable: writing it fails with its own error)
    if head == _SQLITE_HEADER:
        raise ConfigError(
            f"export: OUTPUT {output} is an SQLite database (a store?); refusing to overwrite it"
            " (name a new .jsonl/.json/.csv file, or - for stdout)"
        )


def export_stores(
    locations: Sequence[str],
    output: str,
    *,
    rows: str = "pipelines",
    fmt: str | None = None,
    run_id: str | None = None,
    codecs: Any = None,
    artifact_backend: Any = None,
    only: Callable[[str], bool] | None = None,
) -> int:
    """Write every ``rows`` row of ``locations`` to ``output``; returns the number of rows.

    ``only(pipeline_id)``: keep only the rows of the pipelines it accepts (one experiment of a
    suite); rows of no pipeline (a run's own metrics and events) are kept with the rest.

    ``run_id``: None or ``"all"`` = every run, else that run. Several stores are concatenated
    in argument order, except ``pipelines`` and ``results``, which are merged (deduplicated).
    Payloads kept in blobs are read back through the backend each run recorded, or through
    ``artifact_backend`` (a spec, as ``--artifact-backend`` takes) when given.
    """
    if rows not in ROW_KINDS:
        raise ConfigError(f"--rows {rows!r}: expected one of {', '.join(ROW_KINDS)}")
    if not locations:
        raise ConfigError("export: name at least one store")
    _refuse_overwriting_a_store(output, locations)
    fmt = infer_format(output, fmt)
    if codecs is None:
        codecs = CodecRegistry.from_plugins()
    for location in locations:  # fail before creating anything if a store or run is wrong
        with read_only_store(location) as store:
            _run_filter(store, run_id)
    winners = None
    if rows in MERGED_KINDS and len(locations) > 1:
        # the stores of distinct shards of one run hold no pipeline in common: nothing to merge
        selected = None if run_id in (None, ALL_RUNS) else run_id
        if not shard_stores(locations, selected):
            winners = _winners(locations, run_id)
    count = 0
    with _Target(output) as fh:
        writer = _WRITERS[fmt](fh, rows)
        for index, location in enumerate(locations):
            keep: Callable[[str], bool] | None = None
            if winners is not None:
                keep = lambda pid, i=index: winners.get(pid) == i  # noqa: E731
            if only is not None and rows in MERGED_KINDS:  # filtered before children are read
                keep = only if keep is None else (lambda pid, k=keep: k(pid) and only(pid))
            with read_only_store(location) as store:
                readers = ViewCodecs(codecs, BlobReader(store, artifact_backend))
                for row in iter_kind(
                    store, rows, run_id=_run_filter(store, run_id), codecs=readers, keep=keep
                ):
                    if only is not None and row.get("pipeline_id") and not only(row["pipeline_id"]):
                        continue
                    try:
                        writer.write(row)
                    except BrokenPipeError:
                        raise  # stdout's reader went away (| head): the CLI ends quietly
                    except OSError as exc:
                        raise _write_failed(output, exc) from exc
                    count += 1
                if readers.damaged:
                    print(
                        f"warning: store {location}: {readers.damaged} payload(s) do not match their"
                        f' stored digest (changed on disk); exported with payload_encoding "{DAMAGED}"'
                        " and no value",
                        file=sys.stderr,
                    )
        try:
            writer.close()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise _write_failed(output, exc) from exc
    return count
