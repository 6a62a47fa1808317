"""SQLite store specifics: the file marker, refusing files that are not ours (unchanged), the
writer lock across processes, live read-only readers, and the synchronous option."""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from pyattacker import ConfigError
from pyattacker.errors import StoreUnavailable
from pyattacker.model import OK_DECISION, HandoffRecord
from pyattacker.store.location import resolve_opener
from pyattacker_plugins.store_jsonl import JsonlStoreOpener
from pyattacker_plugins.store_sqlite import APPLICATION_ID, SCHEMA_VERSION, SqliteStore, SqliteStoreOpener
from tests.support.sqlite_downgrades import downgrade_to_v1, downgrade_to_v2, downgrade_to_v3, raw
from tests.support.store_contract import artifact, attempt, commit, event, pipeline, task

OPENER = SqliteStoreOpener()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def siblings(path: Path) -> set[str]:
    return {p.name for p in path.parent.iterdir()}


def make_store(path: Path) -> None:
    store = OPENER.open(str(path))
    commit(store, pipelines=[pipeline("p1")])
    store.close()


def test_new_file_has_marker_version_and_tables(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "dir" / "runs.db"
    make_store(path)
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        meta = dict(conn.execute("SELECT key, value FROM store_meta"))
        assert meta["application"] == "pyattacker" and meta["schema_version"] == str(SCHEMA_VERSION)
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {"runs", "pipelines", "tasks", "attempts", "events", "artifacts", "metrics"} <= tables
        assert {"metric_points", "resources", "store_meta"} <= tables
        indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        assert {"pipelines_by_run_state", "pipelines_by_created"} <= indexes
        assert {"attempts_by_pipeline", "events_by_pipeline"} <= indexes
        # a run's attempts and events are found through its span of ids (schema 5), not an index
        assert not {"attempts_by_run", "events_by_run"} & indexes and "run_spans" in tables
        # tasks and artifacts are clustered by (pipeline_id, seq): no extra index to maintain
        ddl = dict(conn.execute("SELECT name, sql FROM sqlite_master WHERE type='table'").fetchall())
        assert "WITHOUT ROWID" in ddl["tasks"] and "WITHOUT ROWID" in ddl["artifacts"]
        assert "pipeline_keys" in ddl  # per-pipeline rows cluster by a sequential key
    finally:
        conn.close()
    # reopening an existing store does not migrate or rewrite it
    store = OPENER.open(str(path))
    assert set(store.lookup_pipelines(["p1"])) == {"p1"}
    store.close()


def test_query_plans_use_indexes(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    make_store(path)
    conn = sqlite3.connect(path)
    try:
        plan = " ".join(
            str(r[-1])
            for r in conn.execute(
                "EXPLAIN QUERY PLAN SELECT * FROM pipelines WHERE (created_at, pipeline_id) > (?, ?)"
                " ORDER BY created_at, pipeline_id LIMIT 10",
                (1.0, "x"),
            )
        )
        assert "pipelines_by_created" in plan and "TEMP B-TREE" not in plan
        from pyattacker_plugins.store_sqlite import read_sql

        def plan_of(sql: str) -> str:
            return " ".join(
                str(r[-1]) for r in conn.execute("EXPLAIN QUERY PLAN " + sql, [1] * sql.count("?"))
            )

        # tasks/artifacts page in (pipeline_id, seq) order through the sorted id index (schema
        # 6), without sorting; the keys not merged into it yet are a range of the key table's
        # rowid, sorted (at most KEY_TAIL_MAX of them)
        for kind in ("tasks", "artifacts"):
            codec = read_sql.PAGE_CODECS[kind]
            for filters, keyset in (((), False), ((), True), (("pipeline_id",), True)):
                plan = plan_of(read_sql.clustered_page_sql(codec, filters, keyset, "pipeline_ids"))
                assert "PRIMARY KEY (pk=?)" in plan and "TEMP B-TREE" not in plan and "SCAN t" not in plan
                assert "SCAN k" not in plan or filters == ()  # (a page of every pipeline walks the index)
                plan = plan_of(read_sql.clustered_page_sql(codec, filters, keyset, read_sql.IDS_TAIL))
                assert ("rowid>?" in plan or "(pk>?)" in plan) and "SCAN" not in plan  # a range, never a scan
        # a lookup by id probes the sorted index and reads only the newer keys' range
        plan = plan_of(read_sql.lookup_sql(2, "pipeline_key_ids"))
        assert "SEARCH pipeline_ids USING PRIMARY KEY (pipeline_id=?)" in plan
        assert "SEARCH pipeline_keys USING INTEGER PRIMARY KEY (rowid>?)" in plan and "SCAN p" not in plan
        assert "SCAN pipeline_ids" not in plan and "SCAN pipeline_keys" not in plan
    finally:
        conn.close()


def test_foreign_sqlite_file_refused_and_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "theirs.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO customers (name) VALUES ('ada')")
    conn.commit()
    conn.close()
    before, names = digest(path), siblings(path)
    for read_only in (False, True):
        with pytest.raises(ConfigError, match="not a pyattacker store") as info:
            OPENER.open(str(path), read_only=read_only)
        assert str(path) in str(info.value)
    assert digest(path) == before
    assert siblings(path) == names  # no lock file, no -wal left behind


def test_newer_schema_refused_and_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    make_store(path)
    conn = sqlite3.connect(path)
    conn.execute("UPDATE store_meta SET value = '99' WHERE key = 'schema_version'")
    conn.execute("PRAGMA user_version = 99")
    conn.commit()
    conn.close()
    before = digest(path)
    for read_only in (False, True):
        with pytest.raises(ConfigError, match=rf"newer pyattacker \(schema 99 > {SCHEMA_VERSION}\); upgrade"):
            OPENER.open(str(path), read_only=read_only)
    assert digest(path) == before


@pytest.mark.parametrize(
    "content", [b"this is not a database at all\n" * 200, b"SQLite format 3\x00" + b"\xff" * 4000]
)
def test_corrupt_file_refused_and_unchanged(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "broken.db"
    path.write_bytes(content)
    for read_only in (False, True):
        with pytest.raises(ConfigError) as info:
            OPENER.open(str(path), read_only=read_only)
        assert str(path) in str(info.value)
    assert path.read_bytes() == content


def test_read_only_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope" / "missing.db"
    with pytest.raises(ConfigError, match="does not exist"):
        OPENER.open(str(path), read_only=True)
    assert not path.parent.exists()


def test_unwritable_location(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    with pytest.raises(StoreUnavailable, match="cannot create directory"):
        OPENER.open(str(blocker / "sub" / "runs.db"))
    target = tmp_path / "ro" / "runs.db"
    target.parent.mkdir()
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda p, mode: False if str(p) == str(target.parent) else real_access(p, mode)
    )
    with pytest.raises(StoreUnavailable, match="is not writable"):
        OPENER.open(str(target))
    assert not target.exists()


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_directory_permissions(tmp_path: Path) -> None:
    directory = tmp_path / "locked"
    directory.mkdir()
    directory.chmod(0o500)
    try:
        with pytest.raises(StoreUnavailable, match="not writable"):
            OPENER.open(str(directory / "runs.db"))
    finally:
        directory.chmod(0o700)


HOLD_WRITER = textwrap.dedent(
    """
    import sys
    from pyattacker_plugins.store_sqlite import SqliteStoreOpener
    store = SqliteStoreOpener().open(sys.argv[1])
    print("ready", flush=True)
    sys.stdin.readline()
    """
)


def test_second_writer_in_another_process_refused(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD_WRITER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        with pytest.raises(StoreUnavailable, match=rf"is being written by pid {proc.pid} on host \S+"):
            OPENER.open(str(path))
        reader = OPENER.open(str(path), read_only=True)  # readers are never locked out
        reader.close()
    finally:
        proc.communicate("\n", timeout=30)
    OPENER.open(str(path)).close()


KILLED_WRITER = textwrap.dedent(
    """
    import os, sys
    from pyattacker.model import Batch, PipelineRecord, RunRecord
    from pyattacker_plugins.store_sqlite import SqliteStoreOpener
    store = SqliteStoreOpener().open(sys.argv[1])
    b = Batch()
    b.runs.append(RunRecord(run_id="dead", started_at=1.0))
    b.pipelines.append(PipelineRecord(pipeline_id="p1", run_id="dead", name="n", key="k", state="running"))
    store.commit(b)
    os._exit(9)  # no close, no checkpoint: like a crash
    """
)


def test_dead_writer_leaves_resumable_rows(tmp_path: Path) -> None:
    path = tmp_path / "runs.db"
    subprocess.run([sys.executable, "-c", KILLED_WRITER, str(path)], check=False, timeout=60)
    store = OPENER.open(str(path))  # the lock died with its process
    try:
        assert store.lookup_pipelines(["p1"])["p1"].state == "running"
        assert store.interrupt_running("next", 5.0) == 1
        assert store.lookup_pipelines(["p1"])["p1"].state == "interrupted"
        assert store.get_run("dead").status == "interrupted"  # type: ignore[union-attr]
    finally:
        store.close()


CHECKPOINTING_WRITER = textwrap.dedent(
    """
    import hashlib, sys
    from pyattacker.model import ArtifactRecord, Batch, PipelineRecord
    from pyattacker_plugins.store_sqlite import SqliteStoreOpener
    store = SqliteStoreOpener().open(sys.argv[1])
    for k in range(100_000):
        b = Batch()
        for i in range(4):
            pid = f"p{k}-{i}"
            payload = hashlib.sha256(pid.encode()).digest() * 8192  # 256 KiB, known to the test
            b.pipelines.append(PipelineRecord(pipeline_id=pid, run_id="r", name="n", key=pid, created_at=1.0))
            b.artifacts.append(ArtifactRecord(
                artifact_id=f"{pid}:0", pipeline_id=pid, task_name="t0", seq=0, type_name="bytes",
                codec="bytes", digest="00" * 16, size=len(payload), created_at=1.0, payload=payload))
        store.commit(b)
        print(k, store.checkpointer.checkpoints, flush=True)
    """
)


def test_a_writer_killed_while_its_thread_checkpoints_loses_no_acknowledged_commit(tmp_path: Path) -> None:
    """SIGKILL a writer that commits 1 MiB batches back to back while its checkpoint thread copies
    the log (checkpoints seen, the database file grown): every batch whose commit returned is in
    the store afterwards, its payload intact, and the store opens for writing again."""
    import signal

    path = tmp_path / "runs.db"
    child = subprocess.Popen(
        [sys.executable, "-c", CHECKPOINTING_WRITER, str(path)], stdout=subprocess.PIPE, text=True
    )
    acknowledged = -1
    try:
        assert child.stdout is not None
        for line in child.stdout:
            k, checkpoints = map(int, line.split())
            acknowledged = k
            if k >= 40 and checkpoints >= 3 and path.stat().st_size > 8 * 2**20:
                break
        os.kill(child.pid, signal.SIGKILL)
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL and acknowledged >= 40
    store = OPENER.open(str(path))
    try:
        for k in range(acknowledged + 1):
            for i in range(4):
                pid = f"p{k}-{i}"
                art = store.get_artifact(pid, 0)
                assert art is not None, pid
                assert art.payload == hashlib.sha256(pid.encode()).digest() * 8192, pid
        assert store.count_rows("artifacts") >= 4 * (acknowledged + 1)
    finally:
        store.close()


LIVE_READER = textwrap.dedent(
    """
    import sys, time
    from pyattacker_plugins.store_sqlite import SqliteStoreOpener
    path, goal = sys.argv[1], int(sys.argv[2])
    store = SqliteStoreOpener().open(path, read_only=True)
    reads, seen = 0, set()
    deadline = time.time() + 60
    while time.time() < deadline:
        s = store.stats(None)
        n = s["pipelines"]["total"]
        tasks = s["tasks"]["by_name"].get("t0", {}).get("succeeded", 0)
        if s["attempts_total"] != 3 * n or s["events_total"] != n or tasks != n:
            print("INCONSISTENT", s, flush=True)
            sys.exit(1)
        if s["pipelines"]["by_state"].get("succeeded", 0) != n:
            print("INCONSISTENT", s, flush=True)
            sys.exit(1)
        reads += 1
        seen.add(n)
        if n >= goal:
            break
    store.close()
    print("OK", reads, len(seen), flush=True)
    """
)


def test_reader_in_another_process_sees_consistent_stats(tmp_path: Path) -> None:
    path = tmp_path / "live.db"
    store = OPENER.open(str(path))
    goal = 300

    def one(i: int) -> None:
        commit(
            store,
            pipelines=[pipeline(f"p{i}", state="succeeded", started_at=1.0, finished_at=1.0 + i / 1000)],
            tasks=[task(f"p{i}", 0, state="succeeded")],
            attempts=[attempt(f"p{i}", n=k) for k in (1, 2, 3)],
            events=[event(pid=f"p{i}")],
        )

    one(0)
    proc = subprocess.Popen(
        [sys.executable, "-c", LIVE_READER, str(path), str(goal)], stdout=subprocess.PIPE, text=True
    )
    try:
        for i in range(1, goal):
            one(i)
        out, _ = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
        store.close()
    assert proc.returncode == 0, out
    assert out.startswith("OK"), out


def test_synchronous_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def level(store: SqliteStore) -> int:
        return int(store._db().execute("PRAGMA synchronous").fetchone()[0])

    monkeypatch.delenv("PYATTACKER_SQLITE_SYNCHRONOUS", raising=False)
    store = OPENER.open(str(tmp_path / "a.db"))
    assert (store.synchronous, level(store)) == ("normal", 1)
    store.close()
    store = OPENER.open(str(tmp_path / "a.db") + "?synchronous=full")
    assert (store.synchronous, level(store)) == ("full", 2)
    commit(store, pipelines=[pipeline("p1")])
    store.close()
    monkeypatch.setenv("PYATTACKER_SQLITE_SYNCHRONOUS", "FULL")
    store = OPENER.open(str(tmp_path / "a.db"))
    assert (store.synchronous, level(store)) == ("full", 2)
    store.close()
    with pytest.raises(ConfigError, match="synchronous"):
        OPENER.open(str(tmp_path / "a.db") + "?synchronous=sometimes")
    with pytest.raises(ConfigError, match="unknown sqlite option"):
        OPENER.open(str(tmp_path / "a.db") + "?journal=off")


def test_location_resolution(tmp_path: Path) -> None:
    openers = {"sqlite": OPENER, "jsonl": JsonlStoreOpener()}
    for location in ("runs/x.db", "x.sqlite", "x.SQLITE3", "sqlite:runs/x", "plain/path"):
        assert resolve_opener(location, openers) is OPENER, location  # type: ignore[arg-type]
    with OPENER.open(f"sqlite://{tmp_path}/x.db") as store:  # the opener strips its scheme itself
        assert store.location == f"{tmp_path}/x.db"


def test_large_batches_round_trip_every_row_in_order(tmp_path: Path) -> None:
    """20 batches of 1000 attempts: all stored, ids in commit order (speed lives in benchmarks/)."""
    store = OPENER.open(str(tmp_path / "big.db"))
    rows = [attempt(f"p{i % 100}", n=i, decision={"retry": True, "delay": 0.1}) for i in range(20_000)]
    for i in range(0, len(rows), 1000):
        commit(store, attempts=rows[i : i + 1000])
    stored = store.page("attempts", limit=30_000)
    store.close()
    assert [a.attempt for a in stored] == [r.attempt for r in rows]
    assert [a.attempt_id for a in stored] == list(range(1, 20_001))


def test_none_booleans_and_blobs_round_trip_through_null_pattern_statements(tmp_path: Path) -> None:
    """Columns that are None are written as literal NULLs (sqlite3 never adapts None); values
    that sqlite3 would adapt (bool, bytes) are bound as int/bytearray. Reads see the originals,
    whatever mix of patterns a batch holds, and a key upserted twice in one batch keeps the last
    row even when the two rows have different NULL patterns."""
    from pyattacker.model import Batch

    store = OPENER.open(str(tmp_path / "n.db"))
    try:
        b = Batch()
        b.tasks += [
            task("p", 0, state="failed", error_class="transient", error_type="E", error_message="boom"),
            task("p", 0, state="succeeded", output_artifact_id="p:0"),  # same slot, other NULLs
            task("p", 1, state="failed", error_message="only a message"),
        ]
        b.artifacts += [
            artifact("p", 0, payload=b'"x"', is_final=True),
            artifact("p", 1, payload=None, blob_ref="file:abc"),
        ]
        store.commit(b)
        tasks = {t.task_run_id: t for t in store.page("tasks", pipeline_id="p")}
        assert tasks["p:0"].state == "succeeded"
        assert (tasks["p:0"].error_class, tasks["p:0"].error_message) == (None, None)
        assert tasks["p:0"].output_artifact_id == "p:0"
        assert (tasks["p:1"].error_class, tasks["p:1"].error_message) == (None, "only a message")
        first, second = store.get_artifact("p", 0), store.get_artifact("p", 1)
        assert first is not None and second is not None
        assert (first.payload, first.is_final, first.blob_ref) == (b'"x"', True, None)
        assert type(first.payload) is bytes and type(first.is_final) is bool
        assert (second.payload, second.is_final, second.blob_ref) == (None, False, "file:abc")
    finally:
        store.close()


def test_multi_row_statements_keep_order_across_chunks(tmp_path: Path) -> None:
    """Consecutive rows of one NULL pattern go to SQLite as multi-row statements of at most
    ``MAX_ROWS_PER_STATEMENT`` rows (cut into power-of-two chunks). A batch of 101 task rows that
    upserts one slot in several chunks and switches pattern in between keeps every other row and
    the last version of the repeated slot; 150 pipelines register 150 distinct keys."""
    from pyattacker.model import Batch
    from pyattacker_plugins.store_sqlite.statements import MAX_ROWS_PER_STATEMENT

    assert MAX_ROWS_PER_STATEMENT < 101
    store = OPENER.open(str(tmp_path / "m.db"))
    try:
        b = Batch()
        b.pipelines += [pipeline(f"p{i}") for i in range(150)]
        for i in range(101):
            if i % 40 == 0:  # the repeated slot, alternating NULL patterns
                b.tasks.append(task("p0", 0, state="failed", error_message=f"try {i}"))
            else:
                b.tasks.append(task(f"p{i}", 0, state="succeeded", output_artifact_id=f"p{i}:0"))
        b.tasks.append(task("p0", 0, state="succeeded", output_artifact_id="p0:0"))  # last word
        store.commit(b)
        assert store.count_rows("pipelines") == 150
        tasks = {t.pipeline_id: t for t in store.page("tasks", limit=1000)}
        assert len(tasks) == 99  # p1..p100 minus p40 and p80, plus p0
        assert (tasks["p0"].state, tasks["p0"].error_message) == ("succeeded", None)
        assert all(tasks[f"p{i}"].output_artifact_id == f"p{i}:0" for i in range(1, 101) if i % 40)
    finally:
        store.close()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # binding once, forced on any Python
def test_values_shared_by_a_group_are_bound_once_and_stored_as_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows of one NULL pattern that agree on a table's shared text columns (run id, state...)
    bind those once per statement (``write_shared_rows``); rows that differ there, or hold
    equal values that are not texts (1 and 1.0 store differently), bind every value. Either way
    each row is stored as given. (Where ``sqlite3`` warns about numbered markers nothing is bound
    once by default: test_store_sqlite_placeholders.)"""
    from pyattacker.model import OK_DECISION, Batch
    from pyattacker_plugins.store_sqlite import commit as commit_module
    from pyattacker_plugins.store_sqlite import statements

    for _attr, statement in commit_module._WRITES:
        monkeypatch.setattr(statement, "bind_once", True)
        monkeypatch.setattr(statement, "_cache", {})

    shared_calls: list[tuple[object, ...]] = []
    real = statements.write_shared_rows

    def spy(conn: sqlite3.Connection, sql_for: object, k: int, params: list, n: int) -> None:
        if k:  # the flat parameters start with the shared values
            shared_calls.append(tuple(params[:k]))
        real(conn, sql_for, k, params, n)  # type: ignore[arg-type]

    monkeypatch.setattr(statements, "write_shared_rows", spy)
    store = OPENER.open(str(tmp_path / "s.db"))
    try:
        b = Batch()
        b.tasks += [task(f"a{i}", 0, state="succeeded", resource="apis") for i in range(70)]
        for t in b.tasks[:40]:
            t.output_artifact_id = t.task_run_id  # the slot id: derived (x'')
        for t in b.tasks[40:]:
            t.output_artifact_id = f"out-{t.pipeline_id}"
        b.attempts += [attempt(f"a{i}", decision=OK_DECISION) for i in range(3)]
        store.commit(b)
        ok = '{"retry":false,"reason":"ok","delay_s":0.0}'
        # the tasks are two groups (output id derived or not), each sharing its values
        # (the attempts' shared OK decision is not bound at all: schema 4 writes a marker for it)
        assert shared_calls == [("r1", "succeeded", "apis")] * 2 + [("r1", "succeeded")]
        b = Batch()
        b.attempts += [attempt("b", outcome="failed"), attempt("c")]  # outcomes differ
        b.tasks += [task("x", 0, run_id=1, state="s"), task("y", 0, run_id=1.0, state="s")]  # type: ignore[arg-type]
        store.commit(b)
        assert len(shared_calls) == 3  # both groups bound every value
        conn = sqlite3.connect(str(tmp_path / "s.db"))
        try:
            rows = conn.execute(
                "SELECT pipeline_id, run_id, typeof(run_id), state, resource FROM tasks_full ORDER BY pk"
            ).fetchall()
            outputs = conn.execute(
                "SELECT task_run_id, output_artifact_id FROM tasks_full ORDER BY pk"
            ).fetchall()
            outcomes = conn.execute(
                "SELECT pipeline_id, outcome, decision_json FROM attempts_full"
            ).fetchall()
        finally:
            conn.close()
        assert rows[:70] == [(f"a{i}", "r1", "text", "succeeded", "apis") for i in range(70)]
        assert [r[1] for r in rows[70:]] == ["1", "1.0"]  # (TEXT affinity: each as its own text)
        assert outputs[:70] == [(f"a{i}:0", f"a{i}:0" if i < 40 else f"out-a{i}") for i in range(70)]
        assert sorted(o[:2] for o in outcomes) == [
            ("a0", "succeeded"), ("a1", "succeeded"), ("a2", "succeeded"), ("b", "failed"), ("c", "succeeded")
        ]  # fmt: skip
        assert {o[2] for o in outcomes if o[0] not in ("b", "c")} == {ok}
    finally:
        store.close()


def test_multi_row_statements_respect_an_old_sqlites_parameter_limit() -> None:
    """SQLite before 3.32 allows 999 parameters per statement: 100 rows of 25 columns are then
    written in smaller multi-row statements, all of them."""
    import sqlite3

    from pyattacker_plugins.store_sqlite.statements import write_rows

    conn = sqlite3.connect(":memory:")
    try:
        conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 999)
        conn.execute(f"CREATE TABLE t ({', '.join(f'c{i}' for i in range(25))})")
        write_rows(conn, f"INSERT INTO t VALUES ({', '.join('?' * 25)})", [(i,) * 25 for i in range(100)])
        assert conn.execute("SELECT c0 FROM t ORDER BY rowid").fetchall() == [(i,) for i in range(100)]
    finally:
        conn.close()


def test_keys_of_a_rolled_back_batch_are_registered_again(tmp_path: Path) -> None:
    """The writer remembers committed pipeline keys; a failed batch must not be remembered."""
    from pyattacker.model import Batch

    store = OPENER.open(str(tmp_path / "k.db"))
    try:

        def batch(attempts_used: object = 0) -> Batch:
            b = Batch()
            b.pipelines.append(pipeline("p9"))
            b.tasks.append(task("p9", 0, attempts_used=attempts_used))
            return b

        with pytest.raises(StoreUnavailable):
            store.commit(batch(attempts_used=object()))  # sqlite3 cannot bind it: rolled back
        store.commit(batch())  # would fail (no key row) if the rolled-back key had been remembered
        assert [t.task_run_id for t in store.page("tasks", pipeline_id="p9")] == ["p9:0"]
    finally:
        store.close()


def test_a_constraint_failing_inside_sqlite_rolls_back_the_whole_batch(tmp_path: Path) -> None:
    """Write statements are ``OR ROLLBACK``: SQLite keeps no statement journal for them, and a
    constraint that fails half-way through a multi-row statement ends the whole transaction.
    Nothing of the batch is stored, the ids it was given are handed out again, and the store
    takes the next batch."""
    from pyattacker.model import Batch

    store = OPENER.open(str(tmp_path / "c.db"))
    try:
        commit(store, pipelines=[pipeline("p1")], tasks=[task("p1", 0)], attempts=[attempt("p1")])
        before = [a.attempt_id for a in store.page("attempts")]

        bad = Batch()
        bad.pipelines += [pipeline(f"q{i}") for i in range(8)]
        bad.tasks += [task(f"q{i}", 0) for i in range(8)]
        bad.tasks[5].seq = None  # type: ignore[assignment]  # NOT NULL (a clustered key) fails in SQLite
        bad.attempts += [attempt(f"q{i}") for i in range(8)]
        with pytest.raises(StoreUnavailable, match=r"NOT NULL constraint failed: tasks\.seq"):
            store.commit(bad)
        assert [p.pipeline_id for p in store.page("pipelines")] == ["p1"]
        assert [t.task_run_id for t in store.page("tasks")] == ["p1:0"]
        assert [a.attempt_id for a in store.page("attempts")] == before
        assert all(a.attempt_id is None for a in bad.attempts)

        commit(store, pipelines=[pipeline("q1")], tasks=[task("q1", 0)], attempts=[attempt("q1")])
        assert [a.attempt_id for a in store.page("attempts")] == [*before, before[-1] + 1]
        assert [t.task_run_id for t in store.page("tasks", pipeline_id="q1")] == ["q1:0"]
    finally:
        store.close()


def test_ids_a_lookup_found_without_a_key_are_registered_without_another_lookup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``lookup_states`` tells the writer which ids have no key row; their first commit then
    registers them without looking them up again. An id whose key row exists without a pipeline
    row (its events were committed) is not absent: its pipeline row gets the key it has. A key
    registered by a commit is not absent any more, even once the writer forgot its pk."""
    from pyattacker.model import Batch
    from pyattacker_plugins.store_sqlite import store as sqlite_store

    store = OPENER.open(str(tmp_path / "a.db"))
    looked_up: list[list[str]] = []
    real = sqlite_store.SqliteStore._stored_keys

    def spy(self: sqlite_store.SqliteStore, conn: sqlite3.Connection, ids: list[str]) -> dict[str, int]:
        looked_up.append(list(ids))
        return real(self, conn, ids)

    monkeypatch.setattr(sqlite_store.SqliteStore, "_stored_keys", spy)
    try:
        b = Batch()
        b.events.append(event(pid="e"))  # a key row, no pipeline row
        store.commit(b)
        assert looked_up == [["e"]]
        store._known.clear()  # (as when more pipelines are in flight than it keeps)
        assert store.lookup_states(["a", "b", "e"]) == {}
        b = Batch()
        b.pipelines += [pipeline("a"), pipeline("e"), pipeline("c")]
        store.commit(b)
        assert looked_up[1:] == [["e", "c"]]  # a was known to be absent; e has a key row
        store._known.clear()
        b = Batch()
        b.pipelines += [pipeline("a", state="running"), pipeline("b")]
        store.commit(b)  # a is registered already (looked up again), b is still known absent
        assert looked_up[2:] == [["a"]]
        with sqlite3.connect(str(tmp_path / "a.db")) as conn:
            keys = dict(conn.execute("SELECT pipeline_id, pk FROM pipeline_keys").fetchall())
        assert sorted(keys) == ["a", "b", "c", "e"] and len(set(keys.values())) == 4
        assert {p.pipeline_id: p.state for p in store.page("pipelines")}["a"] == "running"
        assert set(store.lookup_states(["a", "b", "c", "e"])) == {"a", "b", "c", "e"}
    finally:
        store.close()


def test_count_rows_counts_what_page_returns(tmp_path: Path) -> None:
    """``count_rows`` (the merged report's event count) agrees with paging for every kind and
    run selection; artifacts, which carry no run, ignore the run filter exactly as ``page``
    does; an unknown kind is refused by name."""
    from pyattacker.store.base import PAGE_KINDS, iter_rows

    store = OPENER.open(str(tmp_path / "c.db"))
    try:
        commit(
            store,
            pipelines=[pipeline("a"), pipeline("b", run_id="r2")],
            tasks=[task("a", 0), task("a", 1), task("b", 0, run_id="r2")],
            artifacts=[artifact("a", 0), artifact("b", 0)],
            attempts=[attempt("a"), attempt("a", n=2), attempt("b", run_id="r2")],
            events=[event(), event(pid="a"), event(run_id="r2", pid="b"), event(run_id=None)],
        )
        for kind in PAGE_KINDS:
            for run in (None, "r1", "r2", "nope"):
                expected = sum(1 for _ in iter_rows(store, kind, run_id=run))
                assert store.count_rows(kind, run) == expected, (kind, run)
        assert store.count_rows("events", "r1") == 2 and store.count_rows("artifacts", "r2") == 2
        with pytest.raises(ValueError, match="'bogus'"):
            store.count_rows("bogus")
    finally:
        store.close()


def test_pipeline_summaries_of_a_run_scan_in_key_order_without_sorting(tmp_path: Path) -> None:
    """The merged report pages a run's pipeline summaries in pk order: a range scan of the table,
    never a per-page sort of the run's rows (checked on the statements the store really ran)."""
    store = OPENER.open(str(tmp_path / "s.db"))
    try:
        commit(store, pipelines=[pipeline(f"p{i}", run_id="r1" if i % 3 else "r2") for i in range(30)])
        ran: list[str] = []
        store._conn.set_trace_callback(ran.append)  # type: ignore[union-attr]
        got = list(store.pipeline_summaries("r1", page=4))
        store._conn.set_trace_callback(None)  # type: ignore[union-attr]
        assert [pid for pid, *_ in got] == [f"p{i}" for i in range(30) if i % 3]
        assert [pid for pid, *_ in store.pipeline_summaries(None, page=7)] == [f"p{i}" for i in range(30)]
        pages = [sql for sql in ran if sql.startswith("SELECT pipeline_id, state")]
        assert len(pages) == 6  # 20 rows, 4 per page, and the empty page that ends it
        for sql in pages:
            plan = " ".join(str(r[-1]) for r in store._conn.execute("EXPLAIN QUERY PLAN " + sql))  # type: ignore[union-attr]
            assert "TEMP B-TREE" not in plan, plan
    finally:
        store.close()


def test_interrupt_running_reads_only_the_stale_rows(tmp_path: Path) -> None:
    """A run start finds the pipelines dead runs left ``running`` through an index, and leaves
    task rows alone in a file that never held a running one (what the runner writes): its cost
    follows the stale rows and the number of runs, never the size of the store (checked on the
    plans of the statements it actually runs)."""
    store = OPENER.open(str(tmp_path / "runs.db"))
    try:
        commit(
            store,
            pipelines=[pipeline(f"p{i}", run_id=f"r{i % 3}", state="succeeded") for i in range(30)]
            + [pipeline("stale", run_id="r1", state="running")],
            tasks=[task(f"p{i}", 0, run_id=f"r{i % 3}", state="succeeded") for i in range(30)],
        )
        conn = store._writer()
        # what ``PRAGMA optimize`` leaves after a long run: statistics saying that the run index
        # does not narrow anything (every pipeline in one run, one state)
        conn.execute("ANALYZE")
        conn.execute("DELETE FROM sqlite_stat1 WHERE tbl = 'pipelines'")
        conn.execute(
            "INSERT INTO sqlite_stat1 VALUES ('pipelines', 'pipelines_by_run_state', '50000 50000 50000'),"
            " ('pipelines', 'pipelines_by_created', '50000 1 1')"
        )
        conn.execute("ANALYZE sqlite_schema")  # reload the statistics
        statements: list[str] = []
        conn.set_trace_callback(statements.append)
        assert store.interrupt_running("r9", 2.0) == 1
        conn.set_trace_callback(None)
        assert store.lookup_pipelines(["stale"])["stale"].state == "interrupted"
        assert all(
            s.lstrip().split()[0].upper() in ("BEGIN", "COMMIT", "SELECT", "UPDATE") for s in statements
        )
        touched = [s.split()[1] for s in statements if s.lstrip().upper().startswith("UPDATE")]
        assert touched == ["pipelines", "runs"]  # no task row looked at
        for sql in statements:
            if sql.lstrip().upper().startswith(("UPDATE", "SELECT")):
                plan = [str(r[-1]) for r in conn.execute("EXPLAIN QUERY PLAN " + sql)]
                scans = [step.split()[1] for step in plan if step.startswith("SCAN") and "INDEX" not in step]
                assert not {"pipelines", "tasks"} & set(scans), (sql, plan)
    finally:
        store.close()


def test_version_1_file_migrated_by_the_writer_only(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    store = OPENER.open(str(path))
    commit(
        store,
        pipelines=[pipeline("p1", run_id="dead", state="running")],
        tasks=[task("p1", 0, run_id="dead")],
    )
    store.close()
    downgrade_to_v1(path)
    before = digest(path)
    reader = OPENER.open(str(path), read_only=True)  # readers read version 1 as it is
    try:
        assert reader.lookup_pipelines(["p1"])["p1"].state == "running"
    finally:
        reader.close()
    assert digest(path) == before
    writer = OPENER.open(str(path))
    try:
        conn = sqlite3.connect(path)
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 9
        meta = dict(conn.execute("SELECT key, value FROM store_meta"))
        conn.close()
        assert meta["schema_version"] == "9" and meta["tasks_running"] == "1"
        assert writer.interrupt_running("next", 3.0) == 1  # the rows written before the migration
        assert [t.state for t in writer.page("tasks")] == ["interrupted"]
    finally:
        writer.close()


def test_task_rows_are_searched_only_in_a_marked_file(tmp_path: Path) -> None:
    """The runner writes finished task rows only; a file is marked when a running one is
    committed, and a run start looks at task rows only then (and clears the mark once none is
    left running)."""
    path = tmp_path / "runs.db"
    store = OPENER.open(str(path))

    def marked() -> bool:
        conn = sqlite3.connect(path)
        try:
            return conn.execute("SELECT 1 FROM store_meta WHERE key = 'tasks_running'").fetchone() is not None
        finally:
            conn.close()

    try:
        commit(
            store,
            pipelines=[pipeline("p1", run_id="r1")],
            tasks=[task("p1", 0, run_id="r1", state="succeeded")],
        )
        assert not marked()
        commit(store, tasks=[task("p1", 1, run_id="r1"), task("p1", 2, run_id="r2")])  # running
        assert marked()
        assert store.interrupt_running("r2", 2.0) == 0  # r2 is the new run: its own row stays
        states = {t.task_run_id: t.state for t in store.page("tasks")}
        assert states == {"p1:0": "succeeded", "p1:1": "interrupted", "p1:2": "running"}
        assert marked()  # a running row is left
        assert store.interrupt_running("r3", 3.0) == 0
        assert {t.task_run_id: t.state for t in store.page("tasks")}["p1:2"] == "interrupted"
        assert not marked()
    finally:
        store.close()


def test_pipeline_totals_counts_sorts_and_sums_one_run(tmp_path: Path) -> None:
    """States counted, durations of the rows that have both ends sorted ascending (as the fold
    computes them), attempts summed; ``None`` covers every run."""
    store = OPENER.open(str(tmp_path / "t.db"))
    try:
        commit(
            store,
            pipelines=[
                pipeline("a", state="succeeded", started_at=10.0, finished_at=10.5, attempts_total=2),
                pipeline("b", state="failed", started_at=10.0, finished_at=10.125, attempts_total=3),
                pipeline("c", state="running", started_at=10.0, attempts_total=1),  # no finish yet
                pipeline("d", state="succeeded", started_at=11.0, finished_at=11.25, attempts_total=0),
                pipeline("e", "r2", state="succeeded", started_at=1.0, finished_at=2.0, attempts_total=7),
            ],
        )
        by_state, durations, attempts = store.pipeline_totals("r1")
        assert by_state == {"succeeded": 2, "failed": 1, "running": 1}
        assert list(durations) == [(10.125 - 10.0) * 1000.0, (11.25 - 11.0) * 1000.0, (10.5 - 10.0) * 1000.0]
        assert attempts == 6
        every_state, every_duration, every_attempt = store.pipeline_totals(None)
        assert every_state["succeeded"] == 3 and len(every_duration) == 4 and every_attempt == 13
        assert store.pipeline_totals("nope") == ({}, type(durations)("d"), 0)
    finally:
        store.close()


def test_the_wal_is_checkpointed_at_its_size_limit_not_at_sqlites_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer checkpoints the log every ``WAL_CHECKPOINT_PAGES`` pages (about the 16 MiB the
    file is cut back to), not at SQLite's 1,000 (4 MB): the file grows past 8 MiB, stays within
    its limit and one commit, and every row stays readable. (The checkpointer thread is kept
    out of it: it may restart the log sooner, and it has a test of its own.)"""
    from pyattacker_plugins.store_sqlite import checkpointer
    from pyattacker_plugins.store_sqlite.opening import WAL_CHECKPOINT_PAGES, WAL_SIZE_LIMIT

    monkeypatch.setattr(checkpointer, "START_AT", 2**31)
    assert WAL_CHECKPOINT_PAGES * (4096 + 24) <= WAL_SIZE_LIMIT
    path = tmp_path / "runs.db"
    wal = Path(str(path) + "-wal")
    store = OPENER.open(str(path))
    payload = os.urandom(256 * 1024)
    sizes = []
    try:
        for n in range(0, 160, 4):  # 40 commits of 1 MiB: 40 MiB through the log
            rows = [artifact(f"p{n + i}", 0, payload) for i in range(4)]
            commit(store, pipelines=[pipeline(r.pipeline_id) for r in rows], artifacts=rows)
            sizes.append(wal.stat().st_size)
        assert max(sizes) > 8 * 2**20, sizes  # SQLite's default would have restarted it at 4 MB
        assert max(sizes) <= WAL_SIZE_LIMIT + 2 * 2**20, sizes  # checkpointed, then restarted
        assert store.count_rows("artifacts") == 160
    finally:
        store.close()


def test_a_thread_beside_the_writer_copies_the_log_into_the_database(tmp_path: Path) -> None:
    """A commit that leaves ``START_AT`` frames or more in the log wakes a thread of the writer
    (started then: a small log has none), which checkpoints on a connection of its own (a
    commit no longer pays for it): the database file takes the rows while the writer commits
    nothing and before its own checkpoint (4,000 pages) is reached; closing the store ends the
    thread, and a read-only store has none."""
    import threading

    from pyattacker_plugins.store_sqlite import checkpointer

    path = tmp_path / "runs.db"
    store = OPENER.open(str(path))
    payload = os.urandom(256 * 1024)
    try:
        ckpt = store.checkpointer
        assert ckpt is not None and not ckpt.running  # started by the first commit that needs it
        commit(store, pipelines=[pipeline("small")])
        assert not ckpt.running  # a log of a few frames: no thread
        before = path.stat().st_size
        for n in range(0, 32, 4):  # 8 MiB: about 2,100 frames, past START_AT, short of 4,000
            rows = [artifact(f"p{n + i}", 0, payload) for i in range(4)]
            commit(store, pipelines=[pipeline(r.pipeline_id) for r in rows], artifacts=rows)
        assert checkpointer.START_AT < 2_100 < 4_000
        assert ckpt.running
        deadline = time.monotonic() + 120  # generous: it only fails if nothing ever copies
        while path.stat().st_size < before + 8 * 2**20 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert path.stat().st_size >= before + 8 * 2**20  # copied with no commit to trigger it
        assert ckpt.checkpoints >= 1 and ckpt.errors == 0
        reader = OPENER.open(str(path), read_only=True)
        try:
            assert reader.checkpointer is None
            assert reader.count_rows("artifacts") == 32
        finally:
            reader.close()
    finally:
        store.close()
    assert not ckpt.running
    assert ckpt._thread not in threading.enumerate()


def test_the_checkpoint_thread_syncs_the_database_after_its_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite syncs the database file only after a checkpoint that copied the whole log; the
    thread's PASSIVE ones beside a writer seldom do, so the thread syncs the file itself after
    each (else the writer's own checkpoint flushed all of it, on the event loop's time)."""
    from pyattacker_plugins.store_sqlite import checkpointer

    path = tmp_path / "runs.db"
    synced: list[int] = []

    def spy(fd: int) -> None:
        synced.append(os.fstat(fd).st_ino)

    monkeypatch.setattr(checkpointer, "_sync_data", spy)
    store = OPENER.open(str(path))
    payload = os.urandom(256 * 1024)
    try:
        ckpt = store.checkpointer
        assert ckpt is not None
        for n in range(0, 32, 4):  # 8 MiB: about 2,100 frames, past START_AT
            rows = [artifact(f"p{n + i}", 0, payload) for i in range(4)]
            commit(store, pipelines=[pipeline(r.pipeline_id) for r in rows], artifacts=rows)
        deadline = time.monotonic() + 60  # generous: it only fails if nothing is ever synced
        while not synced and time.monotonic() < deadline:
            time.sleep(0.01)
        assert synced and set(synced) == {path.stat().st_ino}  # the database file, not the log
    finally:
        store.close()  # (ends the thread: its counts are final)
    assert ckpt.syncs == len(synced) <= ckpt.checkpoints and ckpt.errors == 0


def _log_counts(shm: int) -> tuple[int, int]:
    """``(mxFrame, nBackfill)``: the log's last frame and the frames copied into the database,
    read from the ``-shm`` file as sqlite.org/walformat.html lays it out (offsets 16 and 96)."""
    last = int.from_bytes(os.pread(shm, 4, 16), sys.byteorder)
    return last, int.from_bytes(os.pread(shm, 4, 96), sys.byteorder)


def test_the_checkpoint_thread_is_woken_by_frames_not_yet_copied_not_by_the_log_size(tmp_path: Path) -> None:
    """Once the thread has copied a grown log, commits that add a few frames wake it no more,
    though the log stays past ``START_AT`` (a reader keeps the writer from restarting it): it
    counts the frames no checkpoint has copied (``mxFrame - nBackfill`` in the ``-shm`` header),
    so it does not sync both files after every commit to copy a few pages."""
    from pyattacker_plugins.store_sqlite import checkpointer

    path = tmp_path / "runs.db"
    store = OPENER.open(str(path))
    ckpt = store.checkpointer
    assert ckpt is not None
    payload = os.urandom(256 * 1024)
    shm = -1
    reader: sqlite3.Connection | None = None
    try:
        with ckpt.lock:  # the thread waits: the log grows past START_AT, nothing copied yet
            for n in range(0, 32, 4):  # 8 MiB: about 2,100 frames, short of the writer's 4,000
                rows = [artifact(f"p{n + i}", 0, payload) for i in range(4)]
                commit(store, pipelines=[pipeline(r.pipeline_id) for r in rows], artifacts=rows)
            assert ckpt.running
            reader = sqlite3.connect(path, isolation_level=None)
            reader.execute("BEGIN")
            reader.execute("SELECT COUNT(*) FROM pipelines").fetchone()  # holds the log: no restart
        shm = os.open(str(path) + "-shm", os.O_RDONLY)
        deadline = time.monotonic() + 120  # generous: it only fails if nothing ever copies
        while _log_counts(shm)[1] < _log_counts(shm)[0] and time.monotonic() < deadline:
            time.sleep(0.01)
        last, copied_frames = _log_counts(shm)
        assert last > checkpointer.START_AT and copied_frames == last
        assert checkpointer.frames_to_copy(shm) == 0
        copied = -1
        while copied != ckpt.checkpoints:  # (a wake-up left from the blocked commits makes one more)
            copied = ckpt.checkpoints
            time.sleep(5 * checkpointer.GAP_S)
        for i in range(5):
            commit(store, pipelines=[pipeline(f"small{i}")])
            time.sleep(5 * checkpointer.GAP_S)  # room for a checkpoint the thread would make
        last, copied_frames = _log_counts(shm)
        assert last > checkpointer.START_AT and 0 < last - copied_frames < checkpointer.START_AT
        assert checkpointer.frames_to_copy(shm) == last - copied_frames
        assert ckpt.checkpoints == copied  # the log is past START_AT; only a few frames wait
        assert store.count_rows("pipelines") == 37
    finally:
        if reader is not None:
            reader.close()
        if shm >= 0:
            os.close(shm)
        store.close()


def test_a_log_index_that_cannot_be_opened_leaves_the_checkpoints_to_the_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If the ``-shm`` file cannot be opened, the checkpoint thread is given up once (one error
    counted, not one per commit) and every commit is still stored."""
    real_open = os.open

    def refusing(path: str, *args: object, **kwargs: object) -> int:
        if str(path).endswith("-shm"):
            raise PermissionError(13, "refused", path)
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    store = OPENER.open(str(tmp_path / "runs.db"))
    monkeypatch.setattr(os, "open", refusing)
    payload = os.urandom(256 * 1024)
    try:
        for n in range(0, 40, 4):  # 10 MiB: past the thread's start
            rows = [artifact(f"p{n + i}", 0, payload) for i in range(4)]
            commit(store, pipelines=[pipeline(r.pipeline_id) for r in rows], artifacts=rows)
        ckpt = store.checkpointer
        assert ckpt is not None and not ckpt.running and ckpt.errors == 1
        assert store.count_rows("artifacts") == 40
    finally:
        monkeypatch.undo()
        store.close()


def test_a_restart_of_the_log_waits_for_the_checkpoint_threads_checkpoint(tmp_path: Path) -> None:
    """SQLite refuses a second checkpoint while one is under way, without waiting; so the
    writer's restart of a grown log (the readers' bound) takes the lock its checkpoint thread
    holds around each checkpoint: it waits for the thread's, then goes through."""
    import threading

    store = OPENER.open(str(path := tmp_path / "runs.db"))
    try:
        commit(store, pipelines=[pipeline("p1")])
        ckpt, bound = store.checkpointer, store.wal_bound
        assert ckpt is not None and bound is not None
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        results: list[bool] = []
        with ckpt.lock:  # the thread's checkpoint, under way
            restarting = threading.Thread(target=lambda: results.append(bound.restart(conn)))
            restarting.start()
            restarting.join(0.5)
            assert restarting.is_alive() and results == []  # waiting, not refused
        restarting.join(60)
        conn.close()
        assert results == [True] and bound.restarts == 1 and bound.busy == 0
    finally:
        store.close()


def test_without_pread_the_writer_checkpoints_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where ``os.pread`` is missing (Windows) no checkpoint thread starts: the writer's own
    automatic checkpoints keep the log bounded and every commit is stored."""
    monkeypatch.delattr(os, "pread")
    path = tmp_path / "runs.db"
    store = OPENER.open(str(path))
    payload = os.urandom(256 * 1024)
    try:
        for n in range(0, 80, 4):  # 20 MiB: past the thread's start and the writer's backstop
            rows = [artifact(f"p{n + i}", 0, payload) for i in range(4)]
            commit(store, pipelines=[pipeline(r.pipeline_id) for r in rows], artifacts=rows)
        assert store.checkpointer is not None and not store.checkpointer.running
        assert store.checkpointer.checkpoints == 0 and store.checkpointer.errors == 0
        assert store.count_rows("artifacts") == 80
    finally:
        store.close()


def test_wal_grown_behind_a_long_reader_shrinks_back_after_it_ends(tmp_path: Path) -> None:
    """A reader holding one snapshot (the live view's statistics) keeps the WAL from restarting,
    so the file grows while the run writes; once the reader is done, the log restarts and the
    writer truncates the file back to ``WAL_SIZE_LIMIT`` instead of leaving it at its peak."""
    from pyattacker_plugins.store_sqlite.opening import WAL_SIZE_LIMIT

    path = tmp_path / "runs.db"
    wal = Path(str(path) + "-wal")
    store = OPENER.open(str(path))
    reader = sqlite3.connect(path, isolation_level=None)
    payload = os.urandom(256 * 1024)
    n = 0

    def write(blobs: int) -> None:
        nonlocal n
        rows = [artifact(f"p{n + i}", 0, payload) for i in range(blobs)]
        commit(store, pipelines=[pipeline(r.pipeline_id) for r in rows], artifacts=rows)
        n += blobs

    try:
        write(1)
        reader.execute("BEGIN")
        assert reader.execute("SELECT COUNT(*) FROM pipelines").fetchone()[0] == 1  # snapshot held
        for _ in range(12):  # 12 x 8 x 256 KiB: far past the limit, none of it can be reset
            write(8)
        peak = wal.stat().st_size
        assert peak > 1.5 * WAL_SIZE_LIMIT
        reader.execute("COMMIT")
        # a checkpoint folds the log in (the writer's, or its checkpoint thread's, which may still
        # be copying the grown log when the next commits come), then a commit restarts the log and
        # truncates the file: small commits until then (generous: it fails only if that never comes)
        sizes = []
        deadline = time.monotonic() + 60
        while not sizes or (sizes[-1] > WAL_SIZE_LIMIT and time.monotonic() < deadline):
            commit(store, pipelines=[pipeline(f"small{len(sizes)}")])
            sizes.append(wal.stat().st_size)
            time.sleep(0.01)
        assert sizes[-1] <= WAL_SIZE_LIMIT, (peak, sizes[:8], len(sizes))
        total = n + len(sizes)
        assert reader.execute("SELECT COUNT(*) FROM pipelines").fetchone()[0] == total  # nothing lost
    finally:
        reader.close()
        store.close()


@pytest.mark.timeout(120)
def test_wal_stays_bounded_beside_readers_that_never_leave_a_gap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two readers take turns holding a snapshot, so one is always in the log (a dashboard
    polled by many clients): SQLite alone never restarts the log and the file grows by all
    that is written. The writer's RESTART checkpoint keeps it near ``RESTART_AT``, and closing
    the store empties it although a reader is still connected."""
    import threading
    import time

    from pyattacker_plugins.store_sqlite import wal_bound

    monkeypatch.setattr(wal_bound, "RESTART_AT", 4 * 2**20)
    monkeypatch.setattr(wal_bound, "CHECK_EVERY", 1)
    monkeypatch.setattr(wal_bound, "RETRY_S", 0.0)  # a restart that met a reader is tried at the next commit
    path = tmp_path / "runs.db"
    wal = Path(str(path) + "-wal")
    store = OPENER.open(str(path))
    payload = os.urandom(256 * 1024)
    commit(store, pipelines=[pipeline("p-first")])
    stop = threading.Event()

    def reader(offset: float) -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        time.sleep(offset)
        while not stop.is_set():
            conn.execute("BEGIN")
            conn.execute("SELECT COUNT(*) FROM pipelines").fetchone()
            time.sleep(0.02)  # the snapshot is held; the other reader starts before this ends
            conn.execute("COMMIT")
        conn.close()

    readers = [threading.Thread(target=reader, args=(d,)) for d in (0.0, 0.01)]
    for t in readers:
        t.start()
    later = sqlite3.connect(path, isolation_level=None)  # still connected when the store closes
    peak = 0
    try:
        time.sleep(0.05)
        for i in range(160):  # 160 x 256 KiB = 40 MiB, ten times RESTART_AT
            commit(store, pipelines=[pipeline(f"p{i}")], artifacts=[artifact(f"p{i}", 0, payload)])
            peak = max(peak, wal.stat().st_size)
        assert peak < 16 * 2**20, peak  # bounded near RESTART_AT, not 40 MiB
        assert store.wal_bound is not None and store.wal_bound.restarts >= 1
    finally:
        stop.set()
        for t in readers:
            t.join(30)
    assert later.execute("SELECT COUNT(*) FROM pipelines").fetchone()[0] == 161  # `later` uses the log
    assert wal.stat().st_size > 0
    store.close()
    assert wal.stat().st_size == 0  # emptied at close although `later` is still connected
    assert later.execute("SELECT COUNT(*) FROM pipelines").fetchone()[0] == 161  # nothing lost
    later.close()


# -- rows damaged by hand: a clear error naming store, table, row and column ------------------


def _damaged(tmp_path: Path, *statements: str) -> Path:
    """A store written by the real runner, then edited with plain sqlite3 as a user might."""
    from tests.support.views import build_store

    path = tmp_path / "d.db"
    build_store(path, 8)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for statement in statements:
            conn.execute(statement)
    finally:
        conn.close()
    return path


_FIRST = "WHERE pk = (SELECT min(pk) FROM pipelines)"


@pytest.mark.parametrize(
    ("statement", "needle"),
    [
        (f"UPDATE pipelines SET tags_json = '{{bad' {_FIRST}", "column tags_json is not valid JSON"),
        (f"UPDATE pipelines SET tags_json = '[1, 2]' {_FIRST}", "column tags_json is not valid JSON"),
        (f"UPDATE pipelines SET cursor = 'abc' {_FIRST}", "column cursor holds 'abc', expected int"),
        (f"UPDATE pipelines SET state = NULL {_FIRST}", "column state is NULL"),
        (f"UPDATE pipelines SET started_at = 'yesterday' {_FIRST}", "column started_at holds 'yesterday'"),
    ],
)
def test_a_damaged_pipeline_row_names_table_row_and_column(
    tmp_path: Path, statement: str, needle: str
) -> None:
    path = _damaged(tmp_path, statement)
    before = digest(path)
    store = SqliteStore.open_reader(str(path))
    try:
        with pytest.raises(StoreUnavailable) as info:
            store.page("pipelines", limit=100)
    finally:
        store.close()
    message = str(info.value)
    assert type(info.value).__name__ == "CorruptRow"
    assert f"store {path}: table pipelines, row pipeline_id='k0'" in message and needle in message
    assert digest(path) == before


@pytest.mark.parametrize(
    ("statement", "read", "needle"),
    [
        ("UPDATE runs SET config_json = 'nope'", lambda s: s.runs(), "table runs"),
        ("UPDATE events SET data_json = '[' WHERE event_id = 2", lambda s: s.page("events"), "event_id=2"),
        ("UPDATE attempts SET duration_ms = 'slow' WHERE attempt_id = 2",
         lambda s: s.attempt_summaries(None, None, 100), "column duration_ms holds 'slow'"),
        ("UPDATE events SET kind = NULL WHERE event_id = 2",
         lambda s: s.event_summaries(None, None, 100), "column kind is NULL"),
        (f"UPDATE pipelines SET attempts_total = 'many' {_FIRST}",
         lambda s: s.pipeline_totals(), "attempts_total"),
        (f"UPDATE pipelines SET state = NULL {_FIRST}",
         lambda s: list(s.pipeline_summaries()), "state is NULL"),
        ("UPDATE tasks SET name = NULL", lambda s: s.task_counts(), "table tasks"),
        ("UPDATE tasks SET state = NULL", lambda s: s.stats(), "table tasks"),
        ("UPDATE metrics SET value_json = 'x'", lambda s: s.metrics(), "table metrics"),
        ("UPDATE resources SET spec_json = 'x'", lambda s: s.resources(), "table resources"),
    ],
)  # fmt: skip
def test_every_read_names_the_damaged_row(tmp_path: Path, statement: str, read: object, needle: str) -> None:
    """Narrow reads (counts, summaries) check the columns they return in SQL, whole rows are
    checked as they are decoded: none lets a wrong type reach a view as a TypeError."""
    path = _damaged(tmp_path, statement)
    store = SqliteStore.open_reader(str(path))
    try:
        with pytest.raises(StoreUnavailable, match=f"store {path}: ") as info:
            read(store)  # type: ignore[operator]
    finally:
        store.close()
    assert needle in str(info.value)


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE tasks SET state = CAST(state AS BLOB) WHERE pk = (SELECT min(pk) FROM tasks) AND seq = 0",
        "UPDATE tasks SET name = NULL WHERE pk = (SELECT max(pk) FROM tasks) AND seq = 1",
        "UPDATE tasks SET name = x'7430' WHERE pk = (SELECT max(pk) FROM tasks) AND seq = 0",
    ],
)
def test_task_counts_finds_one_damaged_row_among_good_ones(tmp_path: Path, statement: str) -> None:
    """``task_counts`` tests the types once per (name, state) group: a single bad row, even one
    whose value equals its neighbours' as bytes, is its own group and is named, with or without
    a run. That holds because both columns accept text only (checked here)."""
    from pyattacker_plugins.store_sqlite.rows import TASKS

    for column in ("name", "state"):
        assert TASKS.accepted[TASKS.plain.index(column)] == ((str,), False)
    path = _damaged(tmp_path, statement)
    store = SqliteStore.open_reader(str(path))
    try:
        (run,) = store.runs()
        for run_id in (None, run.run_id):
            with pytest.raises(StoreUnavailable, match=f"store {path}: table tasks, row ") as info:
                store.task_counts(run_id)
            assert type(info.value).__name__ == "CorruptRow"
    finally:
        store.close()


def test_a_missing_table_is_refused_naming_it(tmp_path: Path) -> None:
    path = _damaged(tmp_path, "DROP TABLE events")
    before = digest(path)
    for opener in (SqliteStore.open_reader, SqliteStore.open_writer):
        with pytest.raises(ConfigError, match="is damaged: table events is missing"):
            opener(str(path))
    assert digest(path) == before


def test_a_directory_in_place_of_the_file_is_named(tmp_path: Path) -> None:
    (tmp_path / "x.db").mkdir()
    with pytest.raises(ConfigError, match="is a directory"):
        SqliteStore.open_reader(str(tmp_path / "x.db"))


def test_a_reader_kept_open_sees_the_ledger_once_a_writer_migrates_the_file(tmp_path: Path) -> None:
    """``watch`` opened on a schema-2 file, then ``resume`` migrates it and hands off: the open
    reader counts the jumps instead of reporting none for the whole live run."""
    path = tmp_path / "v2.db"
    store = OPENER.open(str(path))
    commit(store, pipelines=[pipeline("p1", state="failed")])
    store.close()
    downgrade_to_v2(path)
    reader = OPENER.open(str(path), read_only=True)
    try:
        assert not reader.has_ledger and reader.count_handoffs() == 0
        writer = OPENER.open(str(path))
        try:
            jump = HandoffRecord(
                pipeline_id="p1", run_id="r1", from_seq=1, from_task="ask", to_seq=3, to_task="report",
                entry_seq=5, entry_artifact_id="p1:5", entry_reused=False, reason="r", ts=1.0,
            )  # fmt: skip
            commit(writer, handoffs=[jump])
        finally:
            writer.close()
        assert reader.has_ledger and reader.count_handoffs() == 1
        assert reader.stats()["handoffs_total"] == 1 and len(reader.handoffs("p1")) == 1
    finally:
        reader.close()


def test_an_id_looked_up_without_a_key_reads_no_ledger_until_a_commit_registers_it(tmp_path: Path) -> None:
    """A run opens every pipeline with control by reading its ledger and looking for its seed
    row; for an id the writer's lookup found without a key row both answers are known (those
    rows carry the key), so no query is made. A pipeline whose row was deleted by hand keeps its
    key, and is still read."""
    store = OPENER.open(str(tmp_path / "l.db"))

    def jump(pid: str) -> HandoffRecord:
        return HandoffRecord(
            pipeline_id=pid, run_id="r1", from_seq=0, from_task="ask", to_seq=2, to_task="report",
            entry_seq=3, entry_artifact_id=f"{pid}:3", entry_reused=False, reason="r", ts=1.0,
        )  # fmt: skip

    try:
        commit(store, pipelines=[pipeline("kept")], handoffs=[jump("kept")])
        store._db().execute("DELETE FROM pipelines")  # the row deleted by hand; key and ledger stay
        assert store.lookup_states(["kept", "new"]) == {}
        reads: list[str] = []
        store._db().set_trace_callback(reads.append)
        assert store.handoffs("new") == [] and store.get_artifact("new", -1) is None and reads == []
        assert [h.to_task for h in store.handoffs("kept")] == ["report"] and len(reads) == 1
        commit(store, pipelines=[pipeline("new")], handoffs=[jump("new")], artifacts=[artifact("new", -1)])
        assert [h.entry_artifact_id for h in store.handoffs("new")] == ["new:3"]
        seed = store.get_artifact("new", -1)
        assert seed is not None and seed.artifact_id == "new:-1"
    finally:
        store.close()


def test_version_2_file_read_as_it_is_and_migrated_by_the_writer(tmp_path: Path) -> None:
    path = tmp_path / "v2.db"
    store = OPENER.open(str(path))
    commit(store, pipelines=[pipeline("p1", state="failed")])
    store.close()
    downgrade_to_v2(path)
    before = digest(path)
    reader = OPENER.open(str(path), read_only=True)  # report, export, watch on an older file
    try:
        assert reader.handoffs("p1") == [] and reader.count_handoffs() == 0
        assert reader.stats()["handoffs_total"] == 0
        assert reader.rows_by_pipeline("handoffs", ["p1"]) == {}
    finally:
        reader.close()
    assert digest(path) == before
    writer = OPENER.open(str(path))
    try:
        assert writer.has_ledger and writer.handoffs("p1") == []
    finally:
        writer.close()
    conn = sqlite3.connect(path)
    try:
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert "handoffs" in tables and conn.execute("PRAGMA user_version").fetchone()[0] == 9
    finally:
        conn.close()


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # ?1, forced on 3.12.0-3.12.3 too
@pytest.mark.parametrize("n", [1, 2, 3, 64, 100, 130])
def test_flat_parameters_are_cut_into_statements_in_row_order(n: int) -> None:
    """``write_shared_rows`` takes one flat list (the shared values, then each row's own):
    however the rows are cut into power-of-two statements, every row is stored once, in order,
    with the shared value bound once per statement."""
    from pyattacker_plugins.store_sqlite import statements

    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (i INTEGER, s TEXT, x TEXT)")

    def sql_for(rows: int) -> str:  # the store's form: the shared value declared first
        return "WITH _shared AS (SELECT ?1) INSERT INTO t (i, s, x) VALUES " + ", ".join(
            ["(?, ?1, ?)"] * rows
        )

    params: list[object] = ["shared"]
    for i in range(n):
        params += (i, f"x{i}")
    statements.write_shared_rows(conn, sql_for, 1, params, n)
    got = conn.execute("SELECT i, s, x FROM t ORDER BY rowid").fetchall()
    assert got == [(i, "shared", f"x{i}") for i in range(n)]


def _derived_batch() -> dict[str, list[Any]]:
    """Rows whose ids are the ones their pipeline gives, and rows whose ids are not."""
    tasks = [
        task("p1", 0, state="succeeded"),
        task("p1", 1, state="failed"),
        task("p2", 0, state="succeeded"),
    ]
    tasks[0].output_artifact_id = tasks[0].task_run_id  # the slot's id (the same object)
    tasks[2].output_artifact_id = "p2:0"  # the slot's id (an equal text)
    tasks.append(task("p2", 1, state="succeeded", output_artifact_id="elsewhere:7"))
    tasks.append(task("p3", 0, state="succeeded", output_artifact_id=""))  # empty, not derived
    odd = task("p3", 1, state="succeeded")
    odd.task_run_id = "p3:one"  # not ``pipeline_id:seq``: stored as given
    tasks.append(odd)
    attempts = [attempt("p1", 0), attempt("p1", 1, n=2), attempt("p2", 0)]
    attempts[2].task_run_id = "custom"
    attempts[0].decision = OK_DECISION  # the runner's shared decision: a marker
    attempts[1].decision = dict(OK_DECISION)  # an equal copy: stored as given
    attempts[2].decision = {"retry": True, "reason": "boom", "delay_s": 1.5}
    artifacts = [artifact("p1", -1), artifact("p1", 0), artifact("p2", 0)]
    artifacts[2].artifact_id = "p2:0:copy"
    events = [event("run.started", pid=None), event("pipeline.started", pid="p1"), event("x", pid="")]
    events[1].task_run_id = "p1:0"
    return {
        "pipelines": [pipeline("p1"), pipeline("p2"), pipeline("p3")],
        "tasks": tasks,
        "attempts": attempts,
        "artifacts": artifacts,
        "events": events,
    }


def test_ids_that_a_row_s_pipeline_gives_are_derived_not_stored(tmp_path: Path) -> None:
    """Schema 4: a row with a pk stores NULL for its pipeline id and ``x''`` for an id equal to
    its slot's (``pipeline_id:seq``); every other id is stored as given. Every read path, and
    the ``*_full`` views, give back exactly the ids that were committed."""
    path = tmp_path / "s.db"
    store = OPENER.open(str(path))
    try:
        rows = _derived_batch()
        commit(store, **rows)
        raw_tasks = raw(
            path,
            "SELECT typeof(task_run_id), typeof(pipeline_id), typeof(output_artifact_id), output_artifact_id"
            " FROM tasks ORDER BY pk, seq",
        )
        assert raw_tasks == [
            ("blob", "null", "blob", b""),  # p1:0, output = the slot
            ("blob", "null", "null", None),  # p1:1, failed: no output
            ("blob", "null", "blob", b""),  # p2:0
            ("blob", "null", "text", "elsewhere:7"),
            ("blob", "null", "text", ""),  # an empty text stays a text
            ("text", "null", "null", None),  # p3:one
        ]
        raw_attempts = "SELECT typeof(pipeline_id), typeof(task_run_id) FROM attempts ORDER BY attempt_id"
        assert raw(path, raw_attempts) == [
            ("null", "blob"), ("null", "blob"), ("null", "text"),
        ]  # fmt: skip
        raw_decisions = "SELECT typeof(decision_json) FROM attempts ORDER BY attempt_id"
        assert raw(path, raw_decisions) == [("blob",), ("text",), ("text",)]
        assert raw(path, "SELECT typeof(artifact_id), artifact_id FROM artifacts ORDER BY pk, seq") == [
            ("blob", b""), ("blob", b""), ("text", "p2:0:copy"),
        ]  # fmt: skip
        assert raw(path, "SELECT pk, pipeline_id FROM events ORDER BY event_id") == [
            (None, None), (1, None), (None, ""),
        ]  # fmt: skip

        def ids(records: list[Any], *fields: str) -> list[tuple[Any, ...]]:
            return sorted(tuple(getattr(r, f) for f in fields) for r in records)

        task_ids = ("task_run_id", "pipeline_id", "output_artifact_id")
        assert ids(store.page("tasks"), *task_ids) == ids(rows["tasks"], *task_ids)
        attempt_ids = ("attempt_id", "pipeline_id", "task_run_id")
        assert ids(store.page("attempts"), *attempt_ids) == ids(rows["attempts"], *attempt_ids)
        assert ids(store.page("attempts", pipeline_id="p2"), *attempt_ids) == [(3, "p2", "custom")]
        assert [a.decision for a in store.page("attempts")] == [a.decision for a in rows["attempts"]]
        art_ids = ("artifact_id", "pipeline_id", "seq")
        assert ids(store.page("artifacts"), *art_ids) == ids(rows["artifacts"], *art_ids)
        event_ids = ("event_id", "pipeline_id", "task_run_id")
        assert ids(store.page("events"), *event_ids) == ids(rows["events"], *event_ids)
        assert [s[2] for s in store.event_summaries("r1", None, 10)] == [None, "p1", ""]
        got = store.get_artifact("p2", 0)
        assert got is not None and got.artifact_id == "p2:0:copy"
        got = store.get_artifact("p1", -1)
        assert got is not None and (got.artifact_id, got.pipeline_id) == ("p1:-1", "p1")
        children = store.rows_by_pipeline("tasks", ["p3", "p1"])
        assert [t.task_run_id for t in children["p3"]] == ["p3:0", "p3:one"]
        assert [t.output_artifact_id for t in children["p1"]] == ["p1:0", None]
        assert set(store.task_leases(["p1", "p2"])) == {"p1:0", "p1:1", "custom"}
        assert raw(
            path, "SELECT task_run_id, pipeline_id, output_artifact_id FROM tasks_full ORDER BY pk, seq"
        ) == [(t.task_run_id, t.pipeline_id, t.output_artifact_id) for t in rows["tasks"]]
        assert raw(path, "SELECT artifact_id FROM artifacts_full ORDER BY pk, seq") == [
            ("p1:-1",), ("p1:0",), ("p2:0:copy",),
        ]  # fmt: skip
        assert raw(path, "SELECT pipeline_id, task_run_id FROM attempts_full ORDER BY attempt_id")[2] == (
            "p2",
            "custom",
        )
        full_decisions = raw(path, "SELECT decision_json FROM attempts_full ORDER BY attempt_id")
        assert full_decisions[0] == ('{"retry":false,"reason":"ok","delay_s":0.0}',)
        assert raw(path, "SELECT pipeline_id FROM events_full ORDER BY event_id") == [
            (None,),
            ("p1",),
            ("",),
        ]
    finally:
        store.close()


def test_version_3_file_read_as_it_is_and_migrated_by_the_writer(tmp_path: Path) -> None:
    """A file of schema 3 holds every id as text: readers read it unchanged, and a writer
    migrates it (views added, no row rewritten) and then derives the ids of the rows it adds."""
    path = tmp_path / "v3.db"
    store = OPENER.open(str(path))
    commit(store, **_derived_batch())
    expected = {kind: [r for r in store.page(kind)] for kind in ("tasks", "attempts", "artifacts", "events")}
    store.close()
    downgrade_to_v3(path)
    assert raw(path, "SELECT typeof(task_run_id), typeof(pipeline_id) FROM tasks LIMIT 1") == [
        ("text", "text")
    ]
    before = digest(path)
    reader = OPENER.open(str(path), read_only=True)
    try:
        for kind, rows in expected.items():
            assert reader.page(kind) == rows, kind
    finally:
        reader.close()
    assert digest(path) == before
    writer = OPENER.open(str(path))
    try:
        for kind, rows in expected.items():
            assert writer.page(kind) == rows, kind
        commit(writer, pipelines=[pipeline("p9")], tasks=[task("p9", 0)])
        assert [t.task_run_id for t in writer.page("tasks", pipeline_id="p9")] == ["p9:0"]
    finally:
        writer.close()
    assert raw(path, "SELECT typeof(task_run_id), typeof(pipeline_id) FROM tasks ORDER BY pk, seq")[0] == (
        "text",
        "text",
    )
    assert raw(
        path, "SELECT typeof(task_run_id), typeof(pipeline_id) FROM tasks ORDER BY pk DESC LIMIT 1"
    ) == [("blob", "null")]
    assert raw(path, "PRAGMA user_version") == [(9,)]
