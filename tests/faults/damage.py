"""Damage after durability (issue 44): bytes changed on disk, a lost or damaged ``-wal``, a hot
rollback journal, and SIGKILLs of a sharded run.

Each damage scenario first crashes a child right after a chosen commit (as ``crash`` does), then
damages what is on disk the way a disk, a copy or a second crash would, then resumes. The
evidence stays outside the library: the damaged bytes are chosen and changed here, what the
damaged store still holds is counted here on a copy with ``sqlite3``, and executions come from
the audit ledger.

* ``damage_digest``: one byte of a durable checkpoint of an unfinished pipeline changed (the
  SQLite row, the JSONL journal line or the blob file; its digest kept). Resume must name it (a
  ``checkpoint_unusable`` / ``checkpoint_missing`` event for that slot), run that one task
  again, and replay nothing else that was durable.
* ``damage_wal_lost`` / ``damage_wal_bit`` (SQLite): the ``-wal`` deleted, or one bit flipped in
  it. When the store then holds less than its ``.contents`` record, resume must refuse (exit 2,
  naming the file), run nothing, and ``fresh_restart`` must then finish every pipeline.
* ``damage_hot_journal`` (SQLite): a writer killed in its first transaction left a hot
  ``-journal``; the next run must roll it back and finish.
* ``shards_sigkill``: ``pyattacker run --shards 2`` SIGKILLed (its whole process group) at a
  random ledger line, then ``resume --shards 2``: no replay, nothing lost, across both stores.
"""

from __future__ import annotations

import base64
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from . import criteria as C
from . import harness as H
from .child import CRASH_EXIT, build_parser

DAMAGE_FAULTS = ("damage_digest", "damage_wal_lost", "damage_wal_bit", "damage_hot_journal", "shards_sigkill")


def run_damage(sc: H.Scenario, workdir: Path, out: H.Outcome) -> None:
    if sc.fault == "shards_sigkill":
        _shards(sc, workdir, out)
    elif sc.fault == "damage_hot_journal":
        _hot_journal(sc, workdir, out)
    else:
        paths = _crash(sc, workdir, out)
        if paths is None:
            return
        if sc.fault == "damage_digest":
            _digest(sc, paths, out)
        else:
            _wal(sc, paths, out)


def _crash(sc: H.Scenario, workdir: Path, out: H.Outcome) -> H.Paths | None:
    """Crash a child right after commit ``sc.occurrence`` of kind ``sc.kind``; its paths, or None."""
    counts = H.calibrate(sc, workdir.parent)
    at = H._place(sc.occurrence, counts.get(sc.kind, 0))
    paths = H.Paths(workdir / "run", sc.store, sc.backend)
    paths.root.mkdir(parents=True)
    note = paths.root / "crash.json"
    res = paths.root / "crashed.json"
    extra = ["--via", "sdk", "--fault", "crash", "--kind", sc.kind, "--n", str(at), "--crash-note", str(note)]
    run = H.run_child(H._child_argv(paths, sc, res, extra), res)
    fired = run.returncode == CRASH_EXIT and note.exists()
    out.verdicts.append(
        C.fault_fired("fault_fired", fired, f"child exit {run.returncode} after {sc.kind} commit #{at}")
    )
    if not fired:
        return None
    out.crashes += 1
    return paths


# -- changed bytes ---------------------------------------------------------------------------------
def _digest(sc: H.Scenario, paths: H.Paths, out: H.Outcome) -> None:
    before = H.snapshot(sc.store, paths.store_path)
    rnd = random.Random(f"{sc.seed}|digest")
    unfinished = sorted(
        (pid, max(seqs))
        for pid, seqs in before.artifact_slots.items()
        if max(seqs) >= 0 and before.pipelines.get(pid, {}).get("state") not in ("succeeded", "failed")
    )
    if not unfinished:
        out.verdicts.append(C.undetermined("damage_named", "no unfinished pipeline had a durable checkpoint"))
        return
    pid, seq = rnd.choice(unfinished)
    where = _flip_artifact(sc.store, paths.store_path, f"{pid}:{seq}")
    before = H.snapshot(sc.store, paths.store_path)  # the journal's committed bytes as damaged
    mark = len(H.read_ledger(paths.ledger))
    # the damaged slot is no longer durable: it must run again, everything else must not
    before.artifact_slots[pid].discard(seq)
    before.artifacts.pop(f"{pid}:{seq}", None)
    res = paths.root / "resumed.json"
    resumed = H.run_child(H._child_argv(paths, sc, res, ["--via", "sdk"]), res)
    out.resumes += 1
    after = H.snapshot(sc.store, paths.store_path)
    named = [e for e in _events(sc.store, paths.store_path) if _names_slot(e, pid, seq)]
    out.verdicts.append(
        C.passed("damage_named", f"{named[0]['kind']} for {pid} seq {seq} ({where})")
        if named
        else C.breached("damage_named", f"no checkpoint_unusable/missing event for {pid} seq {seq} ({where})")
    )
    reran = [e for e in H.read_ledger(paths.ledger)[mark:] if (e[0], e[1]) == (pid, seq)]
    out.verdicts.append(
        C.passed("damaged_slot_ran_again", f"{pid} seq {seq} ran again ({len(reran)} attempt(s))")
        if reran
        else C.breached(
            "damaged_slot_ran_again", f"{pid} seq {seq} was not run again after its bytes changed"
        )
    )
    H._common(sc, paths, out, before, after, mark, resumed, frozenset({(pid, seq)}))


def _flip_artifact(store: str, path: Path, artifact_id: str) -> str:
    """Change one byte of ``artifact_id``'s bytes where they live; says where."""
    pid, seq = artifact_id.rsplit(":", 1)
    if store.startswith("sqlite"):
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            row = conn.execute(
                "SELECT a.pk, a.payload, a.blob_ref FROM artifacts a JOIN pipeline_keys k ON a.pk = k.pk"
                " WHERE k.pipeline_id = ? AND a.seq = ?",
                (pid, int(seq)),
            ).fetchone()
            pk, payload, ref = row
            if payload is not None:
                conn.execute(
                    "UPDATE artifacts SET payload = ? WHERE pk = ? AND seq = ?",
                    (_flip(payload), pk, int(seq)),
                )
                return "sqlite row"
        finally:
            conn.close()
        return _flip_blob(ref)
    journal = path / "journal.jsonl"
    lines = journal.read_bytes().split(b"\n")
    ref = None
    for i, line in enumerate(lines):
        if line.startswith(b'["artifact"'):
            rec = json.loads(line)[1]
            if rec["artifact_id"] == artifact_id and isinstance(rec.get("payload"), str):
                old = rec["payload"]
                new = base64.b64encode(_flip(base64.b64decode(old))).decode()
                lines[i] = line.replace(old.encode(), new.encode())
                journal.write_bytes(b"\n".join(lines))
                return "jsonl journal line"
            if rec["artifact_id"] == artifact_id:
                ref = rec.get("blob_ref")
    return _flip_blob(ref)


def _flip(data: bytes) -> bytes:
    changed = bytearray(data)
    changed[len(changed) // 2] ^= 0x01
    return bytes(changed)


def _flip_blob(ref: str | None) -> str:
    if not ref or not ref.startswith("file://"):
        return f"nothing to change (blob_ref {ref!r})"
    blob = Path(ref[len("file://") :])
    blob.write_bytes(_flip(blob.read_bytes()))
    return "blob file"


def _events(store: str, path: Path) -> list[dict[str, Any]]:
    if store.startswith("sqlite"):
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            rows = conn.execute(
                "SELECT e.kind, k.pipeline_id, e.data_json FROM events e LEFT JOIN pipeline_keys k"
                " ON e.pk = k.pk WHERE e.kind LIKE 'pipeline.checkpoint_%'"
            ).fetchall()
        finally:
            conn.close()
        return [{"kind": k, "pipeline_id": p, "data": json.loads(d or "{}")} for k, p, d in rows]
    out = []
    for line in (path / "journal.jsonl").read_bytes().splitlines():
        if line.startswith(b'["event"'):
            rec = json.loads(line)[1]
            if str(rec.get("kind", "")).startswith("pipeline.checkpoint_"):
                out.append(rec)
    return out


def _names_slot(event: dict[str, Any], pid: str, seq: int) -> bool:
    return event.get("pipeline_id") == pid and (event.get("data") or {}).get("seq") == seq


# -- the write-ahead log ---------------------------------------------------------------------------------
def _held(db: Path) -> dict[str, int]:
    """What the damaged file holds, counted by us on a copy (SQLite reads the log as it finds it)."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "copy.db"
        shutil.copyfile(db, copy)
        if Path(f"{db}-wal").exists():
            shutil.copyfile(f"{db}-wal", f"{copy}-wal")
        conn = sqlite3.connect(copy)
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}

            def count(sql: str, table: str) -> int:
                return int(conn.execute(sql).fetchone()[0] or 0) if table in tables else 0

            return {
                "runs": count("SELECT count(*) FROM runs", "runs"),
                "pipelines": count("SELECT max(pk) FROM pipeline_keys", "pipeline_keys"),
                "attempts": count("SELECT max(attempt_id) FROM attempts", "attempts"),
                "events": count("SELECT max(event_id) FROM events", "events"),
            }
        finally:
            conn.close()


def _wal(sc: H.Scenario, paths: H.Paths, out: H.Outcome) -> None:
    db = paths.store_path
    wal = Path(f"{db}-wal")
    crashed = H.snapshot(sc.store, db)
    try:
        recorded = json.loads(Path(f"{db}.contents").read_text())
    except OSError:
        out.verdicts.append(C.undetermined("loss_named", "no .contents record beside the crashed store"))
        return
    if not wal.exists() or wal.stat().st_size <= 32:
        out.verdicts.append(C.undetermined("loss_named", "the crashed store had no -wal frames to damage"))
        return
    if sc.fault == "damage_wal_lost":
        wal.unlink()
        Path(f"{db}-shm").unlink(missing_ok=True)
        what = "-wal deleted"
    else:
        data = bytearray(wal.read_bytes())
        at = random.Random(f"{sc.seed}|wal").randrange(32, len(data))
        data[at] ^= 1 << (at % 8)
        wal.write_bytes(bytes(data))
        what = f"bit {at % 8} of -wal byte {at} (of {len(data)}) flipped"
    held = _held(db)
    short = [k for k in recorded if k in held and held[k] < recorded[k]]
    damaged = _snapshot_or_empty(sc.store, db)  # what the damaged store holds, before anything reopens it
    mark = len(H.read_ledger(paths.ledger))
    res = paths.root / "resumed.json"
    resumed = H.run_child(H._child_argv(paths, sc, res, ["--via", "sdk"]), res)
    out.resumes += 1
    if short:
        error = str((resumed.result or {}).get("error", ""))
        ok = resumed.returncode == 2 and str(db) in error and "holds less" in error
        out.verdicts.append(
            (C.passed if ok else C.breached)(
                "loss_named",
                f"{what}: holds {held}, recorded {recorded};"
                f" resume exit {resumed.returncode}: {error[:160]!r}",
            )
        )
        ran = len(H.read_ledger(paths.ledger)) - mark
        out.verdicts.append(
            (C.passed if ran == 0 else C.breached)(
                "nothing_ran_on_refusal", f"{ran} ledger lines after the refusal"
            )
        )
        res2 = paths.root / "fresh.json"
        fresh = H.run_child(H._child_argv(paths, sc, res2, ["--via", "sdk", "--fresh-restart"]), res2)
        out.resumes += 1
        after = H.snapshot(sc.store, db)
        out.pipelines_checked += len(after.pipelines)
        out.tasks_executed += len(H.read_ledger(paths.ledger))
        out.verdicts.append(C.equals("fresh_restart_exit_code", fresh.returncode, 0, fresh.stderr[-150:]))
        states = {pid: row["state"] for pid, row in after.pipelines.items()}
        out.verdicts.append(C.all_terminal("all_pipelines_terminal", states, sc.pipelines))
        return
    # nothing the record knows of is missing: the store must open, and what it still holds must
    # not run again (slots lost after the last record are the record's known lag, named here)
    lost = crashed.durable - damaged.durable
    out.verdicts.append(
        C.undetermined(
            "loss_named", f"{what}: {len(lost)} durable slot(s) lost after the last .contents record"
        )
        if lost
        else C.passed("loss_named", f"{what}: the store still holds every durable slot; nothing to name")
    )
    H._common(sc, paths, out, damaged, H.snapshot(sc.store, db), mark, resumed)


def _snapshot_or_empty(store: str, db: Path) -> H.Snapshot:
    """``snapshot``; a file left without its tables (its whole log lost) holds nothing."""
    try:
        return H.snapshot(store, db)
    except sqlite3.OperationalError as exc:
        if "no such table" not in str(exc):
            raise
        return H.Snapshot()


# -- a hot rollback journal --------------------------------------------------------------------------
_HOT = r"""
import os, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA cache_size = 1")
conn.execute("BEGIN")
conn.execute("CREATE TABLE t (x)")
for i in range(300):
    conn.execute("INSERT INTO t VALUES (?)", ("x" * 500,))
os._exit(137)
"""


def _hot_journal(sc: H.Scenario, workdir: Path, out: H.Outcome) -> None:
    paths = H.Paths(workdir / "run", sc.store, sc.backend)
    paths.root.mkdir(parents=True)
    db = paths.store_path
    proc = subprocess.run([sys.executable, "-c", _HOT, str(db)], check=False, timeout=60)
    hot = proc.returncode == CRASH_EXIT and Path(f"{db}-journal").exists()
    evidence = f"writer killed in its first transaction: exit {proc.returncode}"
    out.verdicts.append(C.fault_fired("fault_fired", hot, evidence))
    if not hot:
        return
    out.crashes += 1
    res = paths.root / "run.json"
    run = H.run_child(H._child_argv(paths, sc, res, ["--via", sc.via]), res)
    out.resumes += 1
    after = H.snapshot(sc.store, db)
    out.pipelines_checked += len(after.pipelines)
    out.tasks_executed += len(H.read_ledger(paths.ledger))
    out.verdicts.append(C.equals("run_exit_code", run.returncode, 0, f"stderr tail {run.stderr[-150:]!r}"))
    still = Path(f"{db}-journal").exists()
    out.verdicts.append(
        (C.breached if still else C.passed)("hot_journal_rolled_back", f"{db}-journal still there: {still}")
    )
    states = {pid: row["state"] for pid, row in after.pipelines.items()}
    out.verdicts.append(C.all_terminal("all_pipelines_terminal", states, sc.pipelines))
    r = run.result or {}
    out.verdicts.append(
        C.no_lease_held("no_lease_held_after_resume", r.get("pool_active"), r.get("pool_leaked"))
    )


# -- shards -----------------------------------------------------------------------------------------
def _shards(sc: H.Scenario, workdir: Path, out: H.Outcome) -> None:
    paths = H.Paths(workdir / "run", sc.store, sc.backend)
    paths.root.mkdir(parents=True)
    from .child import _cli_config  # the child's own config for the same workload

    args = build_parser().parse_args(
        ["--store", paths.uri, "--backend", paths.backend_arg, "--ledger", str(paths.ledger),
         "--pipelines", str(sc.pipelines), "--seed", str(sc.seed), "--workdir", str(paths.root)]
    )  # fmt: skip
    config = _cli_config(args, paths.root)
    env = H._env()
    env["PYATTACKER_FAULT_LEDGER"] = str(paths.ledger)
    pick = sc.occurrence if isinstance(sc.occurrence, int) else sc.pipelines
    cmd = [sys.executable, "-m", "pyattacker", "run", "-c", str(config), "--shards", "2"]
    proc = subprocess.Popen(cmd, cwd=H.REPO_ROOT, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    fired = False
    try:
        deadline = time.monotonic() + H.CHILD_TIMEOUT_S
        while proc.poll() is None and time.monotonic() < deadline:
            if H._count_lines(paths.ledger) >= pick:
                os.killpg(proc.pid, signal.SIGKILL)  # the run and its shard processes at once
                fired = True
                break
            time.sleep(0.002)
        proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    out.verdicts.append(
        C.fault_fired("fault_fired", fired, f"SIGKILL of the shard group at ledger line {pick}")
    )
    if not fired:
        return
    out.crashes += 1
    time.sleep(0.2)  # the group's processes are gone once killpg returns; their files are closed
    stores = _shard_stores(sc.store, paths.store_path)
    before = _merged(sc.store, stores)
    crashed_journals = [H.snapshot(sc.store, p).committed for p in stores] if sc.store == "jsonl" else []
    mark = len(H.read_ledger(paths.ledger))
    resumed = subprocess.run(
        [sys.executable, "-m", "pyattacker", "resume", "-c", str(config), "--shards", "2"],
        cwd=H.REPO_ROOT, env=env, capture_output=True, text=True, timeout=H.CHILD_TIMEOUT_S * 2,
    )  # fmt: skip
    out.resumes += 1
    stores = _shard_stores(sc.store, paths.store_path)
    after = _merged(sc.store, stores)
    run = H.ChildRun(resumed.returncode, {}, resumed.stderr[-3000:])
    if sc.store == "jsonl":  # the journal prefix is judged per shard below, not on a merge
        sc = H.Scenario("shards_sigkill", "sqlite", sc.backend, seed=sc.seed, pipelines=sc.pipelines)
        for path, crashed in zip(stores, crashed_journals, strict=False):
            out.verdicts.append(
                C.committed_prefix_preserved(
                    f"history_unchanged:{path.name}", crashed, (path / "journal.jsonl").read_bytes()
                )
            )
    H._common(sc, paths, out, before, after, mark, run)
    # (the pool and the run row are per shard process: the parent's exit code stands for them)
    out.verdicts = [
        v for v in out.verdicts if not v.name.startswith(("no_lease_held", "resume_run_completed"))
    ]
    out.notes.append(f"shard stores: {[s.name for s in stores]}")


def _shard_stores(store: str, path: Path) -> list[Path]:
    """The shard stores of ``path`` (``shard_store_path``: ``<root>.shard<i>of2<ext or .db>``)."""
    stem = path.stem if store.startswith("sqlite") else path.name
    return sorted(
        p for p in path.parent.iterdir() if re.fullmatch(rf"{re.escape(stem)}\.shard\dof2\.db", p.name)
    )


def _merged(store: str, stores: list[Path]) -> H.Snapshot:
    """The shards' snapshots as one (history rows keyed by shard and id)."""
    merged = H.Snapshot()
    for index, path in enumerate(stores):
        snap = H.snapshot(store, path)
        merged.pipelines.update(snap.pipelines)
        merged.artifacts.update(snap.artifacts)
        for pid, seqs in snap.artifact_slots.items():
            merged.artifact_slots.setdefault(pid, set()).update(seqs)
        merged.runs.update(snap.runs)
        merged.attempts.update({(index, k): v for k, v in snap.attempts.items()})  # type: ignore[misc]
        merged.events.update({(index, k): v for k, v in snap.events.items()})  # type: ignore[misc]
    return merged
