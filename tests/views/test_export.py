"""``export``: every kind in every format, completeness past one batch, merge, CSV rules, files."""

from __future__ import annotations

import csv
import io
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pyattacker import ConfigError, Runner, pipeline, task
from pyattacker.plugins.api import StoreBase
from pyattacker.store.location import open_store
from pyattacker.views import export as export_mod
from pyattacker.views.export import ROW_KINDS, export_stores, guard_cell, infer_format, iter_kind
from tests.support.views import XSS, build_store

EXPECTED = {"pipelines": 20, "tasks": 40, "results": 20, "metrics": 42, "points": 60}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    return build_store(tmp_path_factory.mktemp("export") / "a.db", 20)


def _read(path: Path, fmt: str) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    if fmt == "jsonl":
        return [json.loads(line) for line in text.splitlines()]
    if fmt == "json":
        doc = json.loads(text)
        assert set(doc) == {"title", "rows"}
        return list(doc["rows"])
    return list(csv.DictReader(io.StringIO(text)))


def _count(store: str, kind: str) -> int:
    s = open_store(store, read_only=True)
    try:
        st = s.stats()
        return {"attempts": st["attempts_total"], "events": st["events_total"]}.get(kind, -1)
    finally:
        s.close()


@pytest.mark.parametrize("fmt", ["jsonl", "json", "csv"])
@pytest.mark.parametrize("kind", ROW_KINDS)
def test_every_kind_round_trips(store: str, tmp_path: Path, kind: str, fmt: str) -> None:
    out = tmp_path / f"out.{fmt}"
    n = export_stores([store], str(out), rows=kind)
    rows = _read(out, fmt)
    assert len(rows) == n
    if kind in EXPECTED:
        assert n == EXPECTED[kind]
    elif kind in ("attempts", "events"):
        assert n == _count(store, kind)
    else:
        assert n > 0
    if kind == "events":
        ids = [int(r["event_id"]) for r in rows]
        assert ids == sorted(ids)  # oldest first
    if kind == "attempts" and fmt != "csv":
        assert all("decision" in r for r in rows)
    if kind == "results" and fmt != "csv":
        by_id = {r["pipeline_id"]: r for r in rows}
        assert by_id["k1"]["result"] == {"v": 4, "note": "ok"}
        assert by_id["k6"]["state"] == "failed" and by_id["k6"]["error_message"] == XSS
        assert by_id["k6"]["result"] is None
    if kind == "pipelines" and fmt != "csv":
        row = next(r for r in rows if r["pipeline_id"] == "k1")
        assert [t["name"] for t in row["tasks"]] == ["fetch", "judge"]
        assert any(a["is_final"] and a["payload"] == {"v": 4, "note": "ok"} for a in row["artifacts"])
        assert row["metrics"]["score"] == 0.5


def test_more_rows_than_one_batch(tmp_path: Path) -> None:
    big = build_store(tmp_path / "big.db", 220, concurrency=16, events="all")
    total = _count(big, "events")
    assert total > 1000
    out = tmp_path / "events.jsonl"
    assert export_stores([big], str(out), rows="events") == total
    ids = [json.loads(line)["event_id"] for line in out.read_text().splitlines()]
    assert ids == sorted(ids) and len(set(ids)) == total
    out2 = tmp_path / "attempts.csv"
    assert export_stores([big], str(out2), rows="attempts") == _count(big, "attempts")


def test_multi_store_merge_and_concat(store: str, tmp_path: Path) -> None:
    out = tmp_path / "p.jsonl"
    assert export_stores([store, store], str(out), rows="pipelines") == 20  # merged
    assert export_stores([store, store], str(out), rows="results") == 20
    assert export_stores([store, store], str(out), rows="tasks") == 80  # concatenated


def test_csv_guard_and_extra_column(store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for bad in ("=1+1", "+x", "-y", "@z", "\tt", "\rr", "\nn"):
        assert guard_cell(bad) == "'" + bad
    assert guard_cell("plain") == "plain"
    out = tmp_path / "m.csv"
    export_stores([store], str(out), rows="metrics")
    labels = [r["value"] for r in _read(out, "csv") if r["name"] == "label"]
    assert labels and all(v.startswith("'=cmd") for v in labels)

    monkeypatch.setattr(export_mod, "CSV_BATCH", 2)
    buf = io.StringIO()
    writer = export_mod._CsvWriter(buf, "t")
    for row in ({"a": 1, "b": None}, {"a": True, "b": [1, 2]}, {"a": 3, "c": "=x"}, {"a": 4}):
        writer.write(row)
    writer.close()
    rows = list(csv.DictReader(io.StringIO(buf.getvalue())))
    assert list(rows[0]) == ["a", "b", "extra"]
    assert rows[1]["a"] == "true" and rows[1]["b"] == "[1,2]" and rows[0]["b"] == ""
    assert json.loads(rows[2]["extra"]) == {"c": "=x"}
    assert rows[3]["extra"] == ""


def test_format_inference_and_contradiction(store: str, tmp_path: Path) -> None:
    assert infer_format("x.csv", None) == "csv"
    assert infer_format("x.json", None) == "json"
    assert infer_format("x.ndjson", None) == "jsonl"
    assert infer_format("x.out", None) == "jsonl"
    assert infer_format("-", "csv") == "csv"
    with pytest.raises(ConfigError):
        infer_format("x.json", "csv")
    proc = subprocess.run(
        [sys.executable, "-m", "pyattacker", "export", store, str(tmp_path / "x.json"), "--format", "csv"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "contradicts" in proc.stderr
    assert not (tmp_path / "x.json").exists()


def test_stdout_and_permissions(store: str, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pyattacker", "export", store, "-", "--rows", "results"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0
    assert len([json.loads(line) for line in proc.stdout.splitlines()]) == 20
    old = os.umask(0o022)
    try:
        out = tmp_path / "perm.csv"
        export_stores([store], str(out), rows="tasks")
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["perm.csv"]  # no temp file left behind


def test_run_filter_and_missing_store(store: str, tmp_path: Path) -> None:
    run_id = open_store(store, read_only=True).runs()[-1].run_id
    out = tmp_path / "r.jsonl"
    assert export_stores([store], str(out), rows="pipelines", run_id=run_id) == 20
    with pytest.raises(ConfigError):
        export_stores([store], str(out), rows="pipelines", run_id="nope")
    with pytest.raises(ConfigError):
        export_stores([str(tmp_path / "missing.db")], str(out))


def test_children_read_in_batches_equal_reading_them_per_pipeline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``pipelines`` and ``results`` read the tasks, artifacts and metrics of a batch of
    pipelines with one statement per kind (the store's ``rows_by_pipeline`` and
    ``metrics_by_pipeline``). The output must be the one a read per pipeline gives: across batch
    and chunk boundaries, for several runs (a pipeline re-run by a later run shows that run's
    metrics only) and for a merge of two stores."""
    from pyattacker_plugins.store_sqlite import reads as sqlite_reads
    from pyattacker_plugins.store_sqlite.store import SqliteStore

    db = str(tmp_path / "m.db")
    build_store(db, 20)
    build_store(db, 20)  # a second run: the failed pipelines run again, their rows move to it
    other = build_store(tmp_path / "o.db", 10, start=15)
    monkeypatch.setattr(export_mod, "CHILD_BATCH", 3)
    monkeypatch.setattr(sqlite_reads, "LOOKUP_CHUNK", 2)
    shown_metrics = 0
    for stores, run_id in (([db], None), ([db], "all"), ([db, other], None)):
        for kind in ("pipelines", "results"):
            fast, slow = tmp_path / "fast.jsonl", tmp_path / "slow.jsonl"
            n = export_stores(stores, str(fast), rows=kind, run_id=run_id)
            with monkeypatch.context() as m:
                m.setattr(SqliteStore, "rows_by_pipeline", StoreBase.rows_by_pipeline)
                m.setattr(SqliteStore, "metrics_by_pipeline", StoreBase.metrics_by_pipeline)
                m.setattr(SqliteStore, "final_artifacts", StoreBase.final_artifacts)
                assert export_stores(stores, str(slow), rows=kind, run_id=run_id) == n
            if kind == "results":  # batched artifacts without the final-only read: the same rows
                mid = tmp_path / "mid.jsonl"
                with monkeypatch.context() as m:
                    m.setattr(SqliteStore, "final_artifacts", StoreBase.final_artifacts)
                    assert export_stores(stores, str(mid), rows=kind, run_id=run_id) == n
                assert mid.read_text() == fast.read_text()
                assert any(r["artifact_available"] for r in _read(fast, "jsonl"))
            assert n >= 20 and fast.read_text() == slow.read_text(), (stores, run_id, kind)
            if kind == "pipelines":
                rows = _read(fast, "jsonl")
                assert all(r["tasks"] and r["artifacts"] for r in rows)
                shown_metrics += sum(1 for r in rows if r["metrics"])
                moved = [r for r in rows if r["resume_of"]]
                assert moved and all(r["metrics"] == {} for r in moved)  # recorded by the first run
    assert shown_metrics


def test_sqlite_rows_by_pipeline_groups_in_seq_order(store: str) -> None:
    s = open_store(store, read_only=True)
    try:
        pipelines = [p.pipeline_id for p in s.page("pipelines", limit=5)]
        wanted = [pipelines[3], pipelines[0], "no-such-pipeline", pipelines[3]]
        for kind in ("tasks", "artifacts"):
            got = s.rows_by_pipeline(kind, wanted)  # type: ignore[attr-defined]
            assert set(got) == {pipelines[0], pipelines[3]}
            for pid, rows in got.items():
                assert rows == s.page(kind, pipeline_id=pid, limit=100)
        run_id = s.runs()[-1].run_id
        metrics = s.metrics_by_pipeline(run_id, pipelines)  # type: ignore[attr-defined]
        for pid in pipelines:
            assert metrics.get(pid, []) == s.metrics(run_id=run_id, pipeline_id=pid)
        with pytest.raises(ValueError, match="tasks, artifacts or handoffs"):
            s.rows_by_pipeline("events", pipelines)  # type: ignore[attr-defined]
        finals = s.final_artifacts(wanted)  # type: ignore[attr-defined]
        for pid in (pipelines[0], pipelines[3]):
            expected = next((a for a in s.page("artifacts", pipeline_id=pid, limit=100) if a.is_final), None)
            assert finals.get(pid) == expected
        assert "no-such-pipeline" not in finals
        assert any(finals.values()) and all(a.is_final for a in finals.values())
    finally:
        s.close()


def test_points_visit_only_the_pipelines_that_have_points(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--rows points`` asks the store which pipelines of a run have points
    (``point_pipelines``) instead of visiting every pipeline that made an attempt; same rows."""
    from pyattacker_plugins.store_sqlite.store import SqliteStore

    db = build_store(tmp_path / "p.db", 12)
    build_store(db, 12)  # a second run re-runs the failed pipelines' last task, which tracks nothing
    asked: set[tuple[str, str]] = set()
    original = SqliteStore.metric_points

    def spy(self: SqliteStore, run_id: str, pipeline_id: str, *args: Any) -> Any:
        asked.add((run_id, pipeline_id))
        return original(self, run_id, pipeline_id, *args)

    monkeypatch.setattr(SqliteStore, "metric_points", spy)
    fast, slow = tmp_path / "fast.jsonl", tmp_path / "slow.jsonl"
    n = export_stores([db], str(fast), rows="points")
    visited = set(asked)
    asked.clear()
    with monkeypatch.context() as m:
        m.setattr(SqliteStore, "point_pipelines", StoreBase.point_pipelines)
        assert export_stores([db], str(slow), rows="points") == n
    assert n > 0 and fast.read_text() == slow.read_text()
    owners = {(row["run_id"], row["pipeline_id"]) for row in _read(fast, "jsonl")}
    assert visited == owners  # only the series that exist
    # the old way also visited the run scopes and, in the second run, the re-run pipelines
    s = open_store(db, read_only=True)
    second = s.runs()[-1].run_id
    s.close()
    assert owners < asked and any(run == second and pid for run, pid in asked - owners)


def test_rows_of_every_kind_are_json_ready_builtins(store: str) -> None:
    """The writers encode ``iter_kind``'s rows as they are: each must already be plain data, so
    that encoding it equals encoding its builtins form (no record, set or bytes left inside)."""
    import msgspec

    from pyattacker.store.codecs import CodecRegistry
    from pyattacker.views.common import encode_json

    plain = (dict, list, str, int, float, bool, type(None))

    def only_plain(value: Any) -> bool:
        if isinstance(value, dict):
            return all(isinstance(k, str) and only_plain(v) for k, v in value.items())
        if isinstance(value, list):
            return all(only_plain(v) for v in value)
        return isinstance(value, plain)

    codecs = CodecRegistry.from_plugins()
    s = open_store(store, read_only=True)
    try:
        for kind in ROW_KINDS:
            rows = list(export_mod.iter_kind(s, kind, codecs=codecs))
            assert rows, kind
            assert all(only_plain(r) for r in rows), kind
            assert all(export_mod._encode_row(r) == encode_json(r) for r in rows), kind
            assert msgspec.json.decode(export_mod._encode_row(rows[0])) == rows[0]
    finally:
        s.close()


def test_output_that_is_a_store_is_refused_and_left_unchanged(store: str, tmp_path: Path) -> None:
    """``export a.db b.db`` with OUTPUT forgotten used to replace the second store with JSONL of
    the first (exit 0). A store, or an input named again as OUTPUT, is refused with exit 2."""
    import hashlib
    import shutil

    other = tmp_path / "other.db"
    shutil.copy(store, other)
    before = hashlib.sha256(other.read_bytes()).hexdigest()
    for argv in ([store, str(other)], [str(other), str(other)]):
        proc = subprocess.run(
            [sys.executable, "-m", "pyattacker", "export", *argv],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 2, proc.stderr
        assert str(other) in proc.stderr and "overwrit" in proc.stderr
    assert hashlib.sha256(other.read_bytes()).hexdigest() == before
    with pytest.raises(ConfigError, match="one of the stores"):
        export_stores([store], store)


@pytest.mark.parametrize(
    ("rows", "statement", "needle"),
    [
        ("pipelines", "UPDATE pipelines SET tags_json = '[1]' WHERE pk = 1", "column tags_json"),
        ("attempts", "UPDATE attempts SET decision_json = '{' WHERE attempt_id = 3", "attempt_id=3"),
        ("events", "UPDATE events SET data_json = '[' WHERE event_id = 2", "event_id=2"),
        ("points", "UPDATE metric_points SET value_json = 'x'", "table metric_points"),
        ("artifacts", "UPDATE artifacts SET size = 'big'", "column size holds 'big'"),
    ],
)
def test_a_row_damaged_by_hand_exits_2_and_writes_no_output(
    tmp_path: Path, rows: str, statement: str, needle: str
) -> None:
    import sqlite3

    path = build_store(tmp_path / "hand.db", 4)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(statement)
    conn.close()
    out = tmp_path / "out.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "pyattacker", "export", path, str(out), "--rows", rows],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert needle in proc.stderr and path in proc.stderr
    assert not [p.name for p in tmp_path.iterdir() if "out" in p.name]  # not even a temp file


def _export_cli(*args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pyattacker", "export", *args],
        capture_output=True,
        text=True,
        timeout=60,
        **kwargs,
    )


def test_an_output_that_is_a_directory_is_refused_before_reading(store: str, tmp_path: Path) -> None:
    """Every row was read and written to a temporary file, then the rename onto the folder
    failed with a traceback (exit 1). It is refused first, exit 2, the folder untouched."""
    folder = tmp_path / "out"
    folder.mkdir()
    proc = _export_cli(store, str(folder))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"OUTPUT {folder} is a directory" in proc.stderr
    assert list(folder.iterdir()) == [] and [p.name for p in tmp_path.iterdir()] == ["out"]


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc (Linux)")
def test_an_output_where_no_file_can_be_created_exits_2(store: str) -> None:
    """/proc exists but takes no new file, even for root: the temporary file could not be
    created, which was a traceback (exit 1)."""
    proc = _export_cli(store, "/proc/pyattacker-export.jsonl")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert "export: cannot write OUTPUT /proc/pyattacker-export.jsonl" in proc.stderr


def test_a_write_that_fails_midway_exits_2_and_leaves_no_file(tmp_path: Path) -> None:
    """A file-size limit (the kernel's EFBIG, as a full disk's ENOSPC) cuts the export short:
    one line naming OUTPUT, exit 2, and neither OUTPUT nor the temporary file is left."""
    import resource

    path = build_store(tmp_path / "big.db", 200)
    out = tmp_path / "o" / "rows.jsonl"
    out.parent.mkdir()

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))

    proc = _export_cli(path, str(out), preexec_fn=limit)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert f"export: writing OUTPUT {out} failed: File too large" in proc.stderr
    assert list(out.parent.iterdir()) == []


@pytest.mark.parametrize("fmt", ["jsonl", "json", "csv"])
def test_stdout_piped_to_head_exits_0_without_a_traceback(tmp_path: Path, fmt: str) -> None:
    """`export STORE - | head` ended quietly but with exit 1, rich-click's code for a closed
    pipe and this CLI's code for failed pipelines; the CLI means 0 (the reader chose to stop)."""
    path = build_store(tmp_path / "big.db", 200)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pyattacker", "export", path, "-", "--format", fmt],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err


@pytest.mark.parametrize("fmt", ["jsonl", "json", "csv"])
def test_payloads_kept_by_msgpack_export_as_json(tmp_path: Path, fmt: str) -> None:
    """An output JSON cannot hold exactly (integer keys, a NaN) is stored with msgpack; every
    export format still writes it, as JSON does: keys as strings, a NaN as null."""
    from pyattacker import Runner, pipeline, task

    @task
    async def score(row: int, ctx: Any) -> dict[Any, Any]:
        return {"by_id": {1: "a"}, "score": float("nan") if row else 0.5}

    db = str(tmp_path / "m.db")
    with Runner(store=db, concurrency=2) as runner:
        assert runner.run(pipeline("p", score).map(range(2))).exit_code == 0
    for kind in ("results", "artifacts", "pipelines"):
        out = tmp_path / f"{kind}.{fmt}"
        proc = _export_cli(db, str(out), "--rows", kind, "--format", fmt)
        assert proc.returncode == 0, proc.stderr
        assert "Traceback" not in proc.stderr
    results = _read(tmp_path / f"results.{fmt}", fmt)
    values = [json.loads(r["result"]) if fmt == "csv" else r["result"] for r in results]
    values.sort(key=lambda v: str(v["score"]))
    assert values == [{"by_id": {"1": "a"}, "score": 0.5}, {"by_id": {"1": "a"}, "score": None}]


def _blob_run(tmp_path: Path) -> str:
    """A finished run whose every output (and seed) went to blobs under tmp_path/blobs."""
    from pyattacker import Runner, pipeline, task

    @task
    async def big(row: int, ctx: Any) -> dict[str, Any]:
        return {"i": row, "text": "x" * 64}

    db = str(tmp_path / "b.db")
    backend = {"kind": "file", "root": str(tmp_path / "blobs"), "min_bytes": 1}
    with Runner(store=db, concurrency=2, artifact_backend=backend) as runner:
        assert runner.run(pipeline("p", big).map(range(3))).exit_code == 0
    return db


def _results(db: str, tmp_path: Path, *extra: str) -> list[dict[str, Any]]:
    out = tmp_path / "r.jsonl"
    proc = _export_cli(db, str(out), "--rows", "results", *extra)
    assert proc.returncode == 0, proc.stderr
    return sorted(_read(out, "jsonl"), key=lambda r: str(r["result"]))


def test_results_kept_in_blobs_are_exported_through_the_runs_backend(tmp_path: Path) -> None:
    """Export reads blobs back through the backend the run recorded (it wrote `absent` before);
    moved blobs are absent until `--artifact-backend` names their new folder."""
    db = _blob_run(tmp_path)
    with open_store(db, read_only=True) as store:
        finals = [a for a in store.page("artifacts", limit=100) if a.is_final]
    assert finals and all(a.payload is None and a.blob_ref for a in finals)  # really in blobs
    expected = [{"i": i, "text": "x" * 64} for i in range(3)]
    rows = _results(db, tmp_path)
    assert [r["result"] for r in rows] == expected
    assert all(r["artifact_available"] and r["result_encoding"] == "decoded" for r in rows)

    (tmp_path / "blobs").rename(tmp_path / "moved")
    assert all(r["result_encoding"] == "absent" for r in _results(db, tmp_path))
    rows = _results(db, tmp_path, "--artifact-backend", f"file://{tmp_path / 'moved'}")
    assert [r["result"] for r in rows] == expected


def test_a_bad_artifact_backend_flag_is_refused_naming_it(tmp_path: Path) -> None:
    db = _blob_run(tmp_path)
    proc = _export_cli(db, str(tmp_path / "x.jsonl"), "--artifact-backend", '{"kind": "nope"}')
    assert proc.returncode == 2
    assert "--artifact-backend.kind" in proc.stderr and "nope" in proc.stderr
    assert not (tmp_path / "x.jsonl").exists()


def test_a_recorded_backend_that_cannot_be_built_is_one_warning_and_absent_payloads(tmp_path: Path) -> None:
    """A run written with a backend plugin not installed here (its record edited to one): the
    export still succeeds, its blob payloads are absent, and one warning names the store and
    the backend, not one per artifact."""
    import sqlite3

    db = _blob_run(tmp_path)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE runs SET config_json = json_set(config_json, '$.artifact_backend.kind', 's3')")
    out = tmp_path / "r.jsonl"
    proc = _export_cli(db, str(out), "--rows", "results")
    assert proc.returncode == 0, proc.stderr
    assert [r["result_encoding"] for r in _read(out, "jsonl")] == ["absent"] * 3
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1, proc.stderr
    assert db in warnings[0] and "s3" in warnings[0]


@task(resource="llm", retry={"max_attempts": 3, "base": 0.0, "on": ["RuntimeError"]})
async def _leasing(row: Any, ctx: Any) -> Any:
    async with ctx.acquire():
        if row["i"] == 1 and ctx.attempt == 1:
            raise RuntimeError("first try fails")
        return row


@pytest.mark.parametrize("kind", ["sqlite", "memory", "jsonl"])
def test_task_rows_say_which_lease_their_last_attempt_used(kind: str, tmp_path: Path) -> None:
    """The CLI reference's `tasks` row: state, duration, error, and which lease was used."""
    from pyattacker import Pool, Resource
    from pyattacker_plugins.store_memory import MemoryStore

    store: Any = MemoryStore() if kind == "memory" else str(tmp_path / "l.db")
    if kind == "jsonl":
        store = f"jsonl:{tmp_path / 'l'}"
    pools = [
        Pool("llm", [Resource.create("llm", id="api-1", capacity=1), Resource.create("llm", id="api-2")])
    ]
    with Runner(store=store, pools=pools, handle_signals=False) as runner:
        assert runner.run(pipeline("leased", _leasing).map([{"i": 0}, {"i": 1}])).succeeded == 2
    reader = store if kind == "memory" else open_store(store, read_only=True)
    rows = list(iter_kind(reader, "tasks"))
    assert len(rows) == 2
    for row in rows:
        (lease,) = row["leases"]  # one lease per attempt; the retried task shows its last one
        assert lease["pool"] == "llm" and lease["resource_id"] in ("api-1", "api-2")
        assert set(lease) == {"pool", "resource_id", "held_ms", "waited_ms"}
    attempts = {a["task_run_id"]: a for a in iter_kind(reader, "attempts")}  # the last per task
    assert {r["task_run_id"]: r["leases"] for r in rows} == {k: a["leases"] for k, a in attempts.items()}


def test_a_damaged_lease_column_is_named(tmp_path: Path) -> None:
    import sqlite3

    from pyattacker import Pool, Resource
    from pyattacker.errors import CorruptRow

    path = str(tmp_path / "d.db")
    with Runner(store=path, pools=[Pool("llm", [Resource.create("llm", id="a")])], handle_signals=False) as r:
        assert r.run(pipeline("leased", _leasing).map([{"i": 0}])).succeeded == 1
    con = sqlite3.connect(path)
    con.execute("UPDATE attempts SET leases_json = '{not json'")
    con.commit()
    con.close()
    with pytest.raises(CorruptRow, match=r"table attempts, task_run_id=.*column leases_json"):
        list(iter_kind(open_store(path, read_only=True), "tasks"))


def _flip_final_payload(db: str, pipeline_id: str, xor: int) -> None:
    import sqlite3

    with sqlite3.connect(db) as conn:
        (pk,) = conn.execute("SELECT pk FROM pipeline_keys WHERE pipeline_id = ?", (pipeline_id,)).fetchone()
        (payload,) = conn.execute("SELECT payload FROM artifacts WHERE pk = ? AND is_final", (pk,)).fetchone()
        data = bytearray(payload)
        data[len(data) // 2] ^= xor
        conn.execute("UPDATE artifacts SET payload = ? WHERE pk = ? AND is_final", (bytes(data), pk))


@pytest.mark.parametrize("xor", [0x01, 0x80], ids=["still-decodes", "no-longer-decodes"])
def test_a_result_whose_bytes_changed_is_marked_damaged_never_shown(tmp_path: Path, xor: int) -> None:
    """One byte of a stored result changed on disk (its digest kept): export shows no value for
    it, marks it ``damaged`` and warns once naming the store; the other results are unchanged.
    Before, it printed the changed value (or, when the bytes no longer decoded, their base64)."""

    @task
    async def answer(row: int) -> dict[str, Any]:
        return {"i": row, "text": "abcdefgh"}

    db = str(tmp_path / "d.db")
    with Runner(store=db, concurrency=2) as runner:
        assert runner.run(pipeline("p", answer).map(range(3))).exit_code == 0
    with open_store(db, read_only=True) as store:
        victim = sorted(p.pipeline_id for p in store.page("pipelines", limit=10))[0]
    _flip_final_payload(db, victim, xor)
    for rows, value, encoding in (
        ("results", "result", "result_encoding"),
        ("artifacts", "payload", "payload_encoding"),
    ):
        out = tmp_path / f"{rows}.jsonl"
        proc = _export_cli(db, str(out), "--rows", rows)
        assert proc.returncode == 0, proc.stderr
        exported = [r for r in _read(out, "jsonl") if r.get("seq", 0) >= 0]
        damaged = [r for r in exported if r[encoding] == "damaged"]
        assert [(r["pipeline_id"], r[value]) for r in damaged] == [(victim, None)]
        assert all(r[encoding] == "decoded" for r in exported if r["pipeline_id"] != victim)
        if rows == "results":
            assert damaged[0]["artifact_available"] is False
        warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
        assert len(warnings) == 1 and db in warnings[0] and "digest" in warnings[0], proc.stderr


def test_a_blob_a_backend_hands_back_changed_is_damaged_in_views() -> None:
    """A backend plugin that reads a blob back without checking it: the view checks the bytes
    against the artifact's digest itself."""
    from pyattacker.digest import digest_bytes
    from pyattacker.model import ArtifactRecord
    from pyattacker.store.codecs import CodecRegistry
    from pyattacker.views.blobs import ViewCodecs
    from pyattacker.views.common import render_payload

    good = b'{"v":1}'
    art = ArtifactRecord(
        artifact_id="p:0", pipeline_id="p", task_name="t", seq=0, type_name="dict", codec="json",
        digest=digest_bytes(good), size=len(good), created_at=0.0, blob_ref="x://1",
    )  # fmt: skip

    class Blobs:
        def __init__(self, data: bytes) -> None:
            self.data = data

        def hydrate(self, a: ArtifactRecord) -> ArtifactRecord:
            import msgspec

            return msgspec.structs.replace(a, payload=self.data)

    codecs = CodecRegistry.from_plugins()
    assert render_payload(art, ViewCodecs(codecs, Blobs(good))) == ({"v": 1}, "decoded")  # type: ignore[arg-type]
    view = ViewCodecs(codecs, Blobs(b'{"v":2}'))  # type: ignore[arg-type]
    assert render_payload(art, view) == (None, "damaged") and view.damaged == 1
