"""Resume rules on real stores: torn terminal states, summary journal, null backend, codecs."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest

from pyattacker import pipeline, task
from pyattacker.model import Batch
from pyattacker.store.base import iter_rows
from pyattacker.store.location import open_store
from tests.support.runner import seeds, vrunner

CALLS: dict[str, int] = {}


@task
def first(x: Any) -> Any:
    CALLS["first"] = CALLS.get("first", 0) + 1
    return {"v": x["i"] * 2}


@task
def second(x: Any) -> Any:
    CALLS["second"] = CALLS.get("second", 0) + 1
    return {"v": x["v"] + 1}


TEMPLATE = pipeline("p", first, second)


def _events(path: str, kind: str) -> list[Any]:
    store = open_store(path, read_only=True)
    try:
        return [e for e in iter_rows(store, "events") if e.kind == kind]
    finally:
        store.close()


def _tear(path: str, pipeline_id: str) -> None:
    """Rewrite a succeeded row as a writer that died between its two writes would leave it."""
    store = open_store(path)
    try:
        row = store.lookup_pipelines([pipeline_id])[pipeline_id]
        row.state, row.error_type, row.error_message = "failed", "Crash", "died before settling"
        batch = Batch()
        batch.pipelines.append(row)
        store.commit(batch)
    finally:
        store.close()


@pytest.fixture(autouse=True)
def _reset_calls() -> None:
    CALLS.clear()


def test_torn_terminal_state_is_repaired_without_rerunning(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    with vrunner(store=path) as r:
        r.run(TEMPLATE.map(seeds(3)))
    key = TEMPLATE.bind({"i": 1}).key
    _tear(path, key)
    CALLS.clear()
    with vrunner(store=path) as r:
        rep = r.run(TEMPLATE.map(seeds(3)))
    assert CALLS == {} and rep.succeeded == 1 and rep.skipped == 2 and rep.exit_code == 0
    (repaired,) = _events(path, "pipeline.terminal_repaired")
    assert repaired.pipeline_id == key and repaired.data["previous_state"] == "failed"
    store = open_store(path, read_only=True)
    assert store.lookup_pipelines([key])[key].state == "succeeded"
    store.close()


def test_failed_repair_keeps_the_original_failure_and_exits_1(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    with vrunner(store=path) as r:
        r.run(TEMPLATE.map(seeds(2)))
    key = TEMPLATE.bind({"i": 0}).key
    _tear(path, key)
    with vrunner(store=path) as r:
        real_commit = r.store.commit

        def failing(batch: Batch) -> None:
            if any(p.pipeline_id == key and p.state == "succeeded" for p in batch.pipelines):
                raise OSError("disk trouble")
            real_commit(batch)

        r.store.commit = failing  # type: ignore[method-assign]
        rep = r.run(TEMPLATE.map(seeds(2)))
    assert rep.repair_failures == 1 and rep.exit_code == 1 and CALLS == {"first": 2, "second": 2}
    store = open_store(path, read_only=True)
    row = store.lookup_pipelines([key])[key]
    store.close()
    assert (row.state, row.error_type) == ("failed", "Crash")
    (failed,) = _events(path, "pipeline.terminal_repair_failed")
    assert failed.data["phase"] == "settle" and "disk trouble" in failed.data["error"]


def _second_fails_until_switched_off() -> tuple[Any, dict[str, bool]]:
    """``first -> flaky``: flaky raises while ``switch["on"]`` (a first run leaves every
    pipeline failed at its second task, the first output durable), then passes its value on."""
    switch = {"on": True}

    @task
    def flaky(x: Any) -> Any:
        if switch["on"]:
            raise ValueError("later")
        return x

    return pipeline("p", first, flaky), switch


@pytest.mark.parametrize("setting", [{"journal": "summary"}, {"artifact_backend": "null"}])
def test_no_payloads_means_restart_with_checkpoint_missing(tmp_path: Path, setting: dict[str, Any]) -> None:
    path = str(tmp_path / "s.db")
    tpl, fail = _second_fails_until_switched_off()
    with vrunner(store=path, **setting) as r:
        rep = r.run(tpl.map(seeds(2)))
    assert rep.failed == 2 and CALLS["first"] == 2
    fail["on"] = False
    with vrunner(store=path, **setting) as r:
        rep = r.run(tpl.map(seeds(2)))
    assert rep.succeeded == 2 and CALLS["first"] == 4  # no payload: the first task ran again
    assert len(_events(path, "pipeline.checkpoint_missing")) == 2


def test_file_backend_checkpoints_are_reused(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    backend = {"kind": "file", "root": str(tmp_path / "blobs"), "min_bytes": 0}
    fail = {"on": True}

    @task
    def flaky(x: Any) -> Any:
        if fail["on"]:
            raise ValueError("later")
        return x

    tpl = pipeline("p", first, flaky)
    with vrunner(store=path, artifact_backend=backend) as r:
        r.run(tpl.map(seeds(2)))
    assert any((tmp_path / "blobs").rglob("*"))
    fail["on"] = False
    with vrunner(store=path, artifact_backend=backend) as r:
        rep = r.run(tpl.map(seeds(2)))
    assert rep.succeeded == 2 and CALLS["first"] == 2


@dataclasses.dataclass
class Answer:
    text: str
    score: float


class Verdict(msgspec.Struct):
    ok: bool
    reasons: list[str]


def test_dataclasses_and_structs_round_trip_to_their_type(tmp_path: Path) -> None:
    @task
    def answer(x: Any) -> Answer:
        return Answer(text=f"a{x['i']}", score=0.5)

    @task
    def verdict(a: Answer) -> Verdict:
        assert isinstance(a, Answer)
        return Verdict(ok=a.score > 0.1, reasons=[a.text])

    path = str(tmp_path / "s.db")
    with vrunner(store=path) as r:
        r.run(pipeline("p", answer, verdict).map(seeds(2)))
        arts = [a for a in iter_rows(r.store, "artifacts") if a.seq >= 0]
        values = [r.codecs.decode(a.codec, a.type_name, a.payload) for a in arts]
    assert {type(v) for v in values} == {Answer, Verdict}
    assert Verdict(ok=True, reasons=["a0"]) in values


def test_help_imports_no_optional_dependency() -> None:
    code = (
        "import sys\n"
        "from pyattacker.cli.main import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('yaml', 'boto3', 'ray', 'tenacity', 'pytest') if m in sys.modules]\n"
        "print(','.join(heavy))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "COLUMNS": "80"},
    )
    assert out.stdout.splitlines()[-1] == "", out.stdout


def test_narrow_lookup_still_refuses_a_changed_chain(tmp_path: Path) -> None:
    """SQLite answers the skip decision from four columns; identity is still checked there."""
    from pyattacker.errors import PipelineIdentityConflict

    path = str(tmp_path / "s.db")
    keyed = {"key_of": lambda s: f"k{s['i']}"}
    with vrunner(store=path) as r:
        assert hasattr(r.store, "lookup_states")
        r.run(TEMPLATE.map(seeds(3), **keyed))
        assert r.store.lookup_states(["k0", "nope"]) == {
            "k0": ("succeeded", TEMPLATE.spec_digest, TEMPLATE.bind({"i": 0}).seed_digest, r.run_id)
        }
    with vrunner(store=path) as r, pytest.raises(PipelineIdentityConflict):
        r.run(pipeline("p", second, first).map(seeds(3), **keyed))
    with vrunner(store=path) as r:
        rep = r.run(TEMPLATE.map(seeds(3), **keyed))
    assert rep.skipped == 3 and rep.exit_code == 0


def _edit(path: str, statement: str) -> None:
    import sqlite3

    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute(statement)
    finally:
        conn.close()


def _resume_after_editing(path: str, edit: str) -> tuple[str, Any]:
    """One pipeline ``first -> flaky`` whose second task failed (its first output durable),
    the store then edited by hand (``edit``, with ``{key}``), then resumed: (key, the report)."""
    tpl, fail = _second_fails_until_switched_off()
    with vrunner(store=path) as r:
        r.run(tpl.map(seeds(1)))
    fail["on"] = False
    CALLS.clear()
    key = tpl.bind({"i": 0}).key
    _edit(path, edit.format(key=key))
    with vrunner(store=path) as r:
        return key, r.run(tpl.map(seeds(1)))


def test_a_negative_cursor_is_a_corrupt_checkpoint_not_a_silent_rerun(tmp_path: Path) -> None:
    """A cursor below 0 (edited by hand) is refused like one past the chain: before, it started
    the pipeline from its seed and ran again the tasks whose outputs were durable, with no event."""
    path = str(tmp_path / "s.db")
    key, rep = _resume_after_editing(path, "UPDATE pipelines SET cursor = -1 WHERE pipeline_id = '{key}'")
    assert CALLS == {} and rep.failed == 1 and rep.exit_code == 1
    (corrupt,) = _events(path, "pipeline.corrupt_cursor")
    assert corrupt.pipeline_id == key and corrupt.data == {"cursor": -1}


def test_a_damaged_checkpoint_row_restarts_with_an_event(tmp_path: Path) -> None:
    """An artifact row that cannot be read (text in its size column) is an unusable checkpoint,
    like bytes no codec decodes: an event naming the row, then a restart from the seed."""
    path = str(tmp_path / "s.db")
    _, rep = _resume_after_editing(
        path,
        "UPDATE artifacts SET size = 'big'"
        " WHERE pk = (SELECT pk FROM pipeline_keys WHERE pipeline_id = '{key}') AND seq = 0",
    )
    assert rep.succeeded == 1 and CALLS == {"first": 1}
    (unusable,) = _events(path, "pipeline.checkpoint_unusable")
    assert "table artifacts" in unusable.data["error"] and "column size" in unusable.data["error"]


def test_a_damaged_pipeline_row_refuses_the_resume_naming_it(tmp_path: Path) -> None:
    """A pipeline row that cannot be read is a clear refusal (CLI exit 2), never a guess: the
    run stops with ``CorruptRow`` naming store, row and column; nothing runs, the row stays."""
    from pyattacker.errors import StoreUnavailable

    path = str(tmp_path / "s.db")
    with pytest.raises(StoreUnavailable, match="column cursor holds 'abc'"):
        _resume_after_editing(path, "UPDATE pipelines SET cursor = 'abc' WHERE pipeline_id = '{key}'")
    assert CALLS == {}
    import sqlite3

    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    assert conn.execute("SELECT cursor FROM pipelines").fetchall() == [("abc",)]  # the one row, kept
    conn.close()


def test_a_finished_cursor_without_its_final_artifact_runs_the_last_task_again(tmp_path: Path) -> None:
    """The cursor says every task is done but the final output is not on disk (its row deleted
    by hand): its answer cannot be reused, so the last task runs again (only it) and the
    pipeline finishes. Before, it stayed unfinished and every resume said the same and exited 0."""
    path = str(tmp_path / "s.db")
    with vrunner(store=path) as r:
        r.run(TEMPLATE.map(seeds(2)))
    key = TEMPLATE.bind({"i": 1}).key
    _tear(path, key)
    _edit(
        path,
        "DELETE FROM artifacts WHERE seq = 1 AND pk = (SELECT pk FROM pipeline_keys"
        f" WHERE pipeline_id = '{key}')",
    )
    CALLS.clear()
    with vrunner(store=path) as r:
        rep = r.run(TEMPLATE.map(seeds(2)))
    assert CALLS == {"second": 1} and rep.succeeded == 1 and rep.skipped == 1 and rep.exit_code == 0
    (missing,) = _events(path, "pipeline.checkpoint_missing")
    assert missing.pipeline_id == key
    assert missing.data == {"seq": 1, "reason": "terminal_artifact_missing", "action": "rerun_last_task"}
    store = open_store(path, read_only=True)
    try:
        row = store.lookup_pipelines([key])[key]
        final = store.get_artifact(key, 1)
    finally:
        store.close()
    assert row.state == "succeeded" and row.cursor == 2 and final is not None and final.is_final


def _damage_blob(path: Path, how: str) -> None:
    if how == "deleted":
        path.unlink()
    elif how == "truncated":
        path.write_bytes(path.read_bytes()[:-2])
    else:  # replaced by other bytes of the same length: only the digest tells
        path.write_bytes(b"x" * path.stat().st_size)


@pytest.mark.parametrize("how", ["deleted", "truncated", "replaced"])
def test_a_lost_blob_reruns_only_the_task_that_produced_it(tmp_path: Path, how: str) -> None:
    """``first -> second -> third`` with every output in a file blob, ``third`` failing; then
    the blob of ``second``'s output is lost. Resume must run ``second`` again from ``first``'s
    durable output (never ``first``, whose answer is on disk), with an event saying which blob
    and why, and never hand ``third`` the wrong bytes. It used to restart from the seed and
    blame the journal or the null backend."""
    path = str(tmp_path / "s.db")
    backend = {"kind": "file", "root": str(tmp_path / "blobs"), "min_bytes": 0}
    fail = {"on": True}
    seen: list[Any] = []

    @task
    def third(x: Any) -> Any:
        seen.append(x)
        if fail["on"]:
            raise ValueError("later")
        return x

    tpl = pipeline("p", first, second, third)
    with vrunner(store=path, artifact_backend=backend) as r:
        r.run(tpl.map(seeds(2)))
    key = tpl.bind({"i": 1}).key
    store = open_store(path, read_only=True)
    try:
        ref = store.get_artifact(key, 1).blob_ref
    finally:
        store.close()
    assert ref is not None and ref.startswith("file://")
    _damage_blob(Path(ref[len("file://") :]), how)
    fail["on"] = False
    CALLS.clear()
    seen.clear()
    with vrunner(store=path, artifact_backend=backend) as r:
        rep = r.run(tpl.map(seeds(2)))
    assert rep.succeeded == 2 and CALLS == {"second": 1}  # not first, whose output is on disk
    assert sorted(v["v"] for v in seen) == [1, 3]  # {"v": 2i + 1}: the right values, recomputed
    (missing,) = _events(path, "pipeline.checkpoint_missing")
    assert missing.pipeline_id == key
    assert missing.data["reason"] == "blob_unavailable" and missing.data["blob_ref"] == ref
    assert (missing.data["seq"], missing.data["task"], missing.data["resume_from"]) == (1, "second", 1)
    (resumed,) = [e for e in _events(path, "pipeline.resumed") if e.pipeline_id == key]
    assert resumed.data["from_seq"] == 1


def test_an_undecodable_checkpoint_resumes_from_the_output_before_it(tmp_path: Path) -> None:
    """Bytes no codec decodes at the cursor: the output before it is used (its task is not run
    again), with one ``pipeline.checkpoint_unusable`` event naming the task and where it resumes."""
    path = str(tmp_path / "s.db")
    fail = {"on": True}

    @task
    def third(x: Any) -> Any:
        if fail["on"]:
            raise ValueError("later")
        return x

    tpl = pipeline("p", first, second, third)
    with vrunner(store=path) as r:
        r.run(tpl.map(seeds(1)))
    _edit(path, "UPDATE artifacts SET codec = 'gone' WHERE seq = 1")
    fail["on"] = False
    CALLS.clear()
    with vrunner(store=path) as r:
        rep = r.run(tpl.map(seeds(1)))
    assert rep.succeeded == 1 and CALLS == {"second": 1}
    (unusable,) = _events(path, "pipeline.checkpoint_unusable")
    assert "'gone'" in unusable.data["error"]
    assert (unusable.data["seq"], unusable.data["task"], unusable.data["resume_from"]) == (1, "second", 1)


def _flip_payload_byte(path: str, seq: int) -> None:
    """Change one byte of the stored output of task ``seq`` (every pipeline), as disk damage would
    (the row and its digest left as they were)."""
    if path.startswith("jsonl:"):
        import base64
        import json

        from pyattacker_plugins.store_jsonl import JOURNAL

        journal = Path(path[len("jsonl:") :]) / JOURNAL
        lines = journal.read_bytes().split(b"\n")
        for i, line in enumerate(lines):
            if line.startswith(b'["artifact"') and json.loads(line)[1]["seq"] == seq:
                old = json.loads(line)[1]["payload"]
                data = bytearray(base64.b64decode(old))
                data[-2] ^= 0x01
                new = base64.b64encode(bytes(data)).decode()
                assert len(new) == len(old)  # the journal's line lengths stay as they were
                lines[i] = line.replace(old.encode(), new.encode())
        journal.write_bytes(b"\n".join(lines))
    else:
        import sqlite3

        conn = sqlite3.connect(path, isolation_level=None)
        for pk, payload in conn.execute("SELECT pk, payload FROM artifacts WHERE seq = ?", (seq,)).fetchall():
            data = bytearray(payload)
            data[-2] ^= 0x01
            conn.execute("UPDATE artifacts SET payload = ? WHERE pk = ? AND seq = ?", (bytes(data), pk, seq))
        conn.close()


@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
def test_a_checkpoint_whose_bytes_changed_is_not_fed_to_the_next_task(tmp_path: Path, kind: str) -> None:
    """One byte of a failed pipeline's checkpointed output changed on disk (digest kept): resume
    must not hand the changed value to the next task. It runs the task that produced it again
    from the output before it, with a ``checkpoint_unusable`` event saying the digest did not
    match. Before, the next task got the changed value, with exit 0 and no event."""
    path = str(tmp_path / "s.db") if kind == "sqlite" else f"jsonl:{tmp_path / 's'}"
    fail = {"on": True}
    seen: list[Any] = []

    @task
    def third(x: Any) -> Any:
        seen.append(x)
        if fail["on"]:
            raise ValueError("later")
        return x

    tpl = pipeline("p", first, second, third)
    with vrunner(store=path) as r:
        r.run(tpl.map(seeds(1)))
    _flip_payload_byte(path, 1)
    fail["on"] = False
    CALLS.clear()
    seen.clear()
    with vrunner(store=path) as r:
        rep = r.run(tpl.map(seeds(1)))
    assert rep.succeeded == 1 and CALLS == {"second": 1}
    assert seen == [{"v": 1}]  # the value ``second`` returns for seed 0, recomputed
    (unusable,) = _events(path, "pipeline.checkpoint_unusable")
    assert unusable.data["reason"] == "digest_mismatch" and "damaged" in unusable.data["error"]
    assert (unusable.data["seq"], unusable.data["task"], unusable.data["resume_from"]) == (1, "second", 1)


def test_a_final_output_whose_bytes_changed_is_not_settled_as_succeeded(tmp_path: Path) -> None:
    """A torn terminal state whose final output's bytes changed on disk: the pipeline is not
    settled on those bytes (they would be exported as its result); its last task runs again."""
    path = str(tmp_path / "s.db")
    with vrunner(store=path) as r:
        r.run(TEMPLATE.map(seeds(1)))
    key = TEMPLATE.bind({"i": 0}).key
    _tear(path, key)
    _flip_payload_byte(path, 1)
    CALLS.clear()
    with vrunner(store=path) as r:
        rep = r.run(TEMPLATE.map(seeds(1)))
    assert CALLS == {"second": 1} and rep.succeeded == 1
    (unusable,) = _events(path, "pipeline.checkpoint_unusable")
    assert unusable.data["reason"] == "digest_mismatch" and unusable.data["action"] == "rerun_last_task"
    assert not _events(path, "pipeline.terminal_repaired")


def _flip_hex(digest: str) -> str:
    """``digest`` with one bit flipped in its first character, still a hex digit (``0`` <-> ``1``)."""
    first = digest[0] if not digest.startswith("v2:") else digest[3]
    other = format(int(first, 16) ^ 1, "x")
    return digest.replace(first, other, 1)


@pytest.mark.parametrize(
    ("column", "keyed", "needle"),
    [
        ("seed_digest", False, "key is derived from this seed and chain"),
        ("spec_digest", False, "key is derived from this seed and chain"),
        ("seed_digest", True, "the seed stored with it has this very seed's digest"),
        ("spec_digest", True, "is not a digest"),
    ],
)
def test_a_damaged_identity_is_named_as_damage_not_as_a_changed_config(
    tmp_path: Path, column: str, keyed: bool, needle: str
) -> None:
    """A bit flipped in a stored row's seed or chain digest: resume used to say "stored with a
    different seed / task chain", sending the user after a change nobody made. Where the digests
    show the bytes are damaged, the refusal says so (``CorruptRow``, exit 2), naming the row."""
    from pyattacker.errors import CorruptRow

    path = str(tmp_path / "s.db")
    rows = [{"i": 0, "id": "k0"}]
    specs = (
        (lambda: TEMPLATE.map(rows, key_of=lambda s: s["id"])) if keyed else (lambda: TEMPLATE.map(seeds(1)))
    )
    with vrunner(store=path) as r:
        r.run(specs())
    key = "k0" if keyed else TEMPLATE.bind({"i": 0}).key
    import sqlite3

    conn = sqlite3.connect(path)
    (value,) = conn.execute(f"SELECT {column} FROM pipelines WHERE pipeline_id = ?", (key,)).fetchone()
    damaged = _flip_hex(value) if not (keyed and column == "spec_digest") else value.replace("v2:", "v2;", 1)
    conn.execute(f"UPDATE pipelines SET {column} = ? WHERE pipeline_id = ?", (damaged, key))
    conn.commit()
    conn.close()
    CALLS.clear()
    with pytest.raises(CorruptRow, match="damaged") as info, vrunner(store=path) as r:
        r.run(specs())
    assert needle in str(info.value) and key in str(info.value) and "different" not in str(info.value)
    assert CALLS == {}


def test_a_changed_seed_under_an_explicit_key_is_still_a_changed_config(tmp_path: Path) -> None:
    """The same check leaves a real change alone: another seed under the same key is refused as
    a changed seed, as before."""
    from pyattacker.errors import PipelineIdentityConflict

    path = str(tmp_path / "s.db")
    with vrunner(store=path) as r:
        r.run(TEMPLATE.map([{"i": 0, "id": "k0"}], key_of=lambda s: s["id"]))
    with pytest.raises(PipelineIdentityConflict, match="different seed"), vrunner(store=path) as r:
        r.run(TEMPLATE.map([{"i": 5, "id": "k0"}], key_of=lambda s: s["id"]))
