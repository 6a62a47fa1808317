"""The parent side: run a faulted child, snapshot the store with our own readers, resume, judge.

The snapshot taken right after the child died (before anything reopens the store) is the
reference for "committed history": it is what was *committed* at crash time, not what the
child had merely produced. The store is read with ``sqlite3`` / raw journal bytes, artifacts
are hashed by us, and executions are counted from the audit ledger, so no verdict rests on
the library describing itself.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import criteria as C
from .child import CRASH_EXIT, WRITE_KINDS
from .criteria import Verdict

REPO_ROOT = Path(__file__).resolve().parents[2]
N_TASKS = 3
CHILD_TIMEOUT_S = 120.0
#: ``stop_after_s`` of the ``stop_time`` fault, in ms (the child's tasks are slowed to outlast it)
STOP_AFTER_MS = 300.0
#: every fault the harness knows; ``crash`` takes a write kind and an occurrence
FAULT_KINDS = (
    "crash",
    "sigkill",
    "sigint",
    "cancel",
    "enospc",
    "sink_error",
    "stop_failures",
    "stop_time",
    "drift_chain",
    "drift_seed",
)
#: ``sqlite-full``: the SQLite store with ``synchronous=full``, whose group commits are made
#: durable by a thread of their own (a crash then lands while later commits are being written)
STORES = ("sqlite", "jsonl", "sqlite-full")
BACKENDS = ("inline", "file")


@dataclass(frozen=True, slots=True)
class Scenario:
    """One fault run: what to break, where, and against which store and artifact backend."""

    fault: str
    store: str = "sqlite"
    backend: str = "inline"
    kind: str = "checkpoint"
    occurrence: str | int = "first"  # first | middle | last | an index
    seed: int = 0
    pipelines: int = 120
    via: str = "sdk"

    @property
    def name(self) -> str:
        crashing = self.fault in ("crash", "damage_digest", "damage_wal_lost", "damage_wal_bit")
        crashing = crashing or self.fault.startswith("backward_")
        what = f"{self.fault}:{self.kind}@{self.occurrence}" if crashing else self.fault
        if self.fault in ("sigkill", "sigint", "cancel", "enospc", "shards_sigkill") and isinstance(
            self.occurrence, int
        ):
            what += f"@{self.occurrence}"
        return f"{what}/{self.store}/{self.backend}/{self.via}/seed{self.seed}"


@dataclass
class Outcome:
    """Verdicts of one scenario plus the counts the soak report adds up."""

    scenario: Scenario
    verdicts: list[Verdict] = field(default_factory=list)
    #: process deaths injected (self-kill after a write, torn write, SIGKILL)
    crashes: int = 0
    #: runs ended by SIGINT, cancellation, a failing store or a stop limit
    stops: int = 0
    resumes: int = 0
    pipelines_checked: int = 0
    tasks_executed: int = 0
    replays: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def breaches(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.status == C.BREACHED]

    @property
    def undetermined(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.status == C.UNDETERMINED]

    def render(self) -> str:
        lines = [f"## {self.scenario.name}"]
        lines += [f"- {v.describe()}" for v in self.verdicts]
        lines += [f"- (note) {n}" for n in self.notes]
        return "\n".join(lines)


# -- reading the store ourselves ---------------------------------------------------------------------
def _blake(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def _bytes_of(payload: bytes | None, blob_ref: str | None) -> str | None:
    """Digest of the artifact's bytes as *we* find them (inline payload or the blob file)."""
    if payload is not None:
        return _blake(payload)
    if blob_ref and blob_ref.startswith("file://"):
        try:
            return _blake(Path(blob_ref[len("file://") :]).read_bytes())
        except OSError:
            return None
    return None


@dataclass
class Snapshot:
    """Everything the criteria need from a store at one moment."""

    pipelines: dict[str, dict[str, Any]] = field(default_factory=dict)
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    artifacts: dict[str, tuple[str, str | None]] = field(default_factory=dict)
    artifact_slots: dict[str, set[int]] = field(default_factory=dict)
    attempts: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    events: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    journal: bytes = b""
    committed: bytes = b""

    @property
    def durable(self) -> set[tuple[str, int]]:
        return {(pid, seq) for pid, seqs in self.artifact_slots.items() for seq in seqs if seq >= 0}

    def last_run(self) -> dict[str, Any] | None:
        rows = sorted(self.runs.values(), key=lambda r: (r.get("started_at") or 0, r["run_id"]))
        return rows[-1] if rows else None


def snapshot(store: str, path: Path) -> Snapshot:
    return _snapshot_sqlite(path) if store.startswith("sqlite") else _snapshot_jsonl(path)


def _snapshot_sqlite(path: Path) -> Snapshot:
    snap = Snapshot()
    if not path.exists():
        return snap
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    conn.row_factory = sqlite3.Row
    try:
        keys = dict(conn.execute("SELECT pk, pipeline_id FROM pipeline_keys").fetchall())
        for row in conn.execute("SELECT * FROM pipelines"):
            snap.pipelines[row["pipeline_id"]] = dict(row)
        for task in _with_ids(conn, "tasks", keys, ("task_run_id", "output_artifact_id")):
            snap.tasks[task["task_run_id"]] = task
        for row in conn.execute("SELECT * FROM runs"):
            snap.runs[row["run_id"]] = dict(row)
        for art in _with_ids(conn, "artifacts", keys, ("artifact_id",)):
            snap.artifacts[art["artifact_id"]] = (art["digest"], _bytes_of(art["payload"], art["blob_ref"]))
            snap.artifact_slots.setdefault(art["pipeline_id"], set()).add(int(art["seq"]))
        for attempt in _with_ids(conn, "attempts", keys, ("task_run_id",)):
            snap.attempts[int(attempt["attempt_id"])] = tuple(attempt.values())
        for ev in _with_ids(conn, "events", keys, ()):
            snap.events[int(ev["event_id"])] = tuple(ev.values())
    finally:
        conn.close()
    return snap


def _with_ids(
    conn: sqlite3.Connection, table: str, keys: dict[int, str], slots: tuple[str, ...]
) -> list[dict[str, Any]]:
    """``table``'s rows with the ids a schema-4 writer leaves out filled in, worked out here from
    the file's own rules (docs/stores.md), not by the library: a row with a ``pk`` belongs to
    that key's pipeline, and an empty BLOB in an id column stands for ``pipeline_id:seq``."""
    rows = []
    for row in conn.execute(f"SELECT * FROM {table}"):
        item = dict(row)
        if item["pk"] is not None:
            item["pipeline_id"] = keys[item["pk"]]
            for column in slots:
                if isinstance(item[column], bytes):
                    item[column] = f"{item['pipeline_id']}:{item['seq']}"
        rows.append(item)
    return rows


def committed_prefix(raw: bytes) -> bytes:
    """The journal up to and including its last commit-marker line."""
    end = 0
    pos = 0
    while True:
        nl = raw.find(b"\n", pos)
        if nl < 0:
            return raw[:end]
        if raw.startswith(b'["commit",', pos):
            end = nl + 1
        pos = nl + 1


def _snapshot_jsonl(path: Path) -> Snapshot:
    snap = Snapshot()
    journal = path / "journal.jsonl"
    if not journal.exists():
        return snap
    snap.journal = journal.read_bytes()
    snap.committed = committed_prefix(snap.journal)
    for line in snap.committed.splitlines():
        item = json.loads(line)
        tag, rec = item[0], item[1]
        if tag == "pipeline":
            old = snap.pipelines.get(rec["pipeline_id"])
            if old is not None:
                rec["created_at"] = old["created_at"]
            snap.pipelines[rec["pipeline_id"]] = rec
        elif tag == "task":
            snap.tasks[rec["task_run_id"]] = rec
        elif tag == "run":
            snap.runs[rec["run_id"]] = rec
        elif tag == "artifact":
            payload = rec.get("payload")
            data = base64.b64decode(payload) if isinstance(payload, str) else None
            snap.artifacts[rec["artifact_id"]] = (rec["digest"], _bytes_of(data, rec.get("blob_ref")))
            snap.artifact_slots.setdefault(rec["pipeline_id"], set()).add(int(rec["seq"]))
        elif tag == "attempt":
            snap.attempts[len(snap.attempts) + 1] = tuple(sorted(rec.items(), key=lambda kv: kv[0]))
        elif tag == "event":
            snap.events[len(snap.events) + 1] = tuple(sorted((k, json.dumps(v)) for k, v in rec.items()))
    return snap


# -- the ledger ----------------------------------------------------------------------------------------
def read_ledger(path: Path) -> list[tuple[str, int, int]]:
    """Newline-terminated ledger lines (a torn tail was never a completed append)."""
    if not path.exists():
        return []
    raw = path.read_bytes()
    cut = raw.rfind(b"\n")
    out = []
    for line in raw[: cut + 1].decode().splitlines():
        pid, seq, attempt = line.split("\t")
        out.append((pid, int(seq), int(attempt)))
    return out


def _count_lines(path: Path) -> int:
    try:
        with open(path, "rb") as fh:
            return fh.read().count(b"\n")
    except FileNotFoundError:
        return 0


# -- running children -----------------------------------------------------------------------------------
@dataclass
class Paths:
    root: Path
    store: str
    backend: str

    @property
    def ledger(self) -> Path:
        return self.root / "ledger.tsv"

    @property
    def store_path(self) -> Path:
        return self.root / ("store.db" if self.store.startswith("sqlite") else "store")

    @property
    def uri(self) -> str:
        if self.store == "sqlite-full":
            return f"sqlite:{self.store_path}?synchronous=full"
        return f"{self.store}:{self.store_path}"

    @property
    def backend_arg(self) -> str:
        return "inline" if self.backend == "inline" else f"file:{self.root / 'blobs'}"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.setdefault("PYTHONHASHSEED", "0")
    return env


def _child_argv(paths: Paths, sc: Scenario, result: Path, extra: Sequence[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "tests.faults.child",
        "--store",
        paths.uri,
        "--backend",
        paths.backend_arg,
        "--ledger",
        str(paths.ledger),
        "--pipelines",
        str(sc.pipelines),
        "--seed",
        str(sc.seed),
        "--pause",
        "0.004" if sc.fault == "stop_time" else "0.0",
        "--doom-every",
        "7" if sc.fault == "stop_failures" else "0",
        "--workdir",
        str(paths.root),
        "--result",
        str(result),
        *extra,
    ]


@dataclass
class ChildRun:
    returncode: int
    result: dict[str, Any] | None
    stderr: str
    signalled: bool = False


def run_child(argv: list[str], result: Path, *, signal_at: tuple[int, Path] | None = None) -> ChildRun:
    """Run one child to its end (or signal it once the ledger reaches a line count).

    The child is always stopped by its own PID in ``finally`` so a hung child never outlives us.
    """
    if result.exists():
        result.unlink()
    errfile = result.with_suffix(".stderr")
    with open(errfile, "wb") as err:
        proc = subprocess.Popen(argv, cwd=REPO_ROOT, env=_env(), stdout=subprocess.DEVNULL, stderr=err)
        signalled = False
        try:
            deadline = time.monotonic() + CHILD_TIMEOUT_S
            if signal_at is not None:
                sig_threshold, ledger = signal_at
                sig = signal.SIGKILL if sig_threshold >= 0 else signal.SIGINT
                threshold = abs(sig_threshold)
                while proc.poll() is None and time.monotonic() < deadline:
                    if _count_lines(ledger) >= threshold:
                        proc.send_signal(sig)
                        signalled = True
                        break
                    time.sleep(0.002)
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    data = json.loads(result.read_text()) if result.exists() else None
    return ChildRun(proc.returncode, data, errfile.read_text(errors="replace")[-3000:], signalled)


_calibration: dict[tuple[str, str, str, int], dict[str, int]] = {}
_calibration_lock = threading.Lock()  # soak threads must not calibrate one combo twice at once


def calibrate(sc: Scenario, scratch: Path) -> dict[str, int]:
    """How many commits of each kind a clean run makes (to place first / middle / last).

    Kept per process and in ``scratch/calibration.json``, so the processes that share
    ``scratch`` (the test suite's parallel workers) calibrate each combination once."""
    key = (sc.store, sc.backend, sc.via, sc.pipelines)
    with _calibration_lock:
        if key in _calibration:
            return _calibration[key]
        scratch.mkdir(parents=True, exist_ok=True)
        with open(scratch / "calibration.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be calibrating this combination
            kept_file = scratch / "calibration.json"
            kept = json.loads(kept_file.read_text()) if kept_file.exists() else {}
            name = "/".join(map(str, key))
            if name in kept:
                _calibration[key] = kept[name]
                return _calibration[key]
            counts = _calibrate_locked(key, sc, scratch)
            kept_file.write_text(json.dumps({**kept, name: counts}))
            return counts


def _calibrate_locked(key: tuple[str, str, str, int], sc: Scenario, scratch: Path) -> dict[str, int]:
    if key not in _calibration:
        paths = Paths(scratch / f"calibrate-{sc.store}-{sc.backend}-{sc.via}", sc.store, sc.backend)
        shutil.rmtree(paths.root, ignore_errors=True)
        paths.root.mkdir(parents=True)
        res = paths.root / "result.json"
        run = run_child(
            _child_argv(
                paths,
                Scenario("none", sc.store, sc.backend, seed=0, pipelines=sc.pipelines, via=sc.via),
                res,
                ["--via", sc.via],
            ),
            res,
        )
        if run.result is None or "occurrences" not in run.result:
            raise RuntimeError(f"calibration run failed (rc {run.returncode}): {run.stderr}")
        _calibration[key] = dict(run.result["occurrences"])
        shutil.rmtree(paths.root, ignore_errors=True)
    return _calibration[key]


def _place(occurrence: str | int, count: int) -> int:
    if isinstance(occurrence, int):
        return occurrence
    return {"first": 0, "middle": count // 2, "last": max(0, count - 1)}[occurrence]


# -- scenarios ---------------------------------------------------------------------------------------
def run_scenario(sc: Scenario, workdir: Path) -> Outcome:
    """Run one scenario in ``workdir`` (created fresh) and return its verdicts."""
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    out = Outcome(sc)
    try:
        if sc.fault == "crash":
            _crash_scenario(sc, workdir, out)
        elif sc.fault in ("drift_chain", "drift_seed"):
            _drift_scenario(sc, workdir, out)
        elif sc.fault == "sink_error":
            _sink_scenario(sc, workdir, out)
        elif sc.fault.startswith("backward_"):
            from .backward import run_backward  # (a rewind loop or a retry-all, crashed at its commit)

            run_backward(sc, workdir, out)
        elif sc.fault.startswith(("damage_", "shards_")):
            from .damage import run_damage  # (damage builds on this module's parts)

            run_damage(sc, workdir, out)
        else:
            _stop_scenario(sc, workdir, out)
    except Exception as exc:  # the harness itself broke: recorded, never shown as a pass
        out.verdicts.append(C.undetermined("scenario_ran", f"the harness raised {type(exc).__name__}: {exc}"))
    return out


def _crash_scenario(sc: Scenario, workdir: Path, out: Outcome) -> None:
    counts = calibrate(sc, workdir.parent)
    torn = sc.kind == "torn"
    at = _place(sc.occurrence, counts.get("checkpoint", 0) if torn else counts.get(sc.kind, 0))
    for attempt in range(3):
        paths = Paths(workdir / f"try{attempt}", sc.store, sc.backend)
        paths.root.mkdir(parents=True)
        note = paths.root / "crash.json"
        res = paths.root / "crashed.json"
        fault = ["--fault", "torn"] if torn else ["--fault", "crash", "--kind", sc.kind]
        run = run_child(
            _child_argv(paths, sc, res, ["--via", sc.via, *fault, "--n", str(at), "--crash-note", str(note)]),
            res,
        )
        if run.returncode == CRASH_EXIT and note.exists():
            out.crashes += 1
            crash = json.loads(note.read_text())
            how = "half-way through the journal write of commit" if torn else f"right after {sc.kind} commit"
            out.verdicts.append(
                C.fault_fired(
                    "fault_fired",
                    True,
                    f"child exited {CRASH_EXIT} {how} #{at} (commit {crash['commit_no']}: "
                    f"{len(crash['artifacts'])} artifacts, {crash['attempts']} attempts, "
                    f"{crash['events']} events, "
                    f"pipeline states {crash['pipeline_states']}, runs {crash['runs']})",
                )
            )
            _judge_resume(sc, paths, out, crashed=run)
            return
        seen = (run.result or {}).get("commits" if torn else "occurrences", {})
        seen = seen if isinstance(seen, int) else seen.get(sc.kind)
        out.notes.append(f"try {attempt}: {sc.kind} #{at} never happened (rc {run.returncode}, saw {seen})")
        if not isinstance(seen, int) or seen == 0 or run.returncode not in (0, 1):
            break
        at = seen - 1
    out.verdicts.append(
        C.fault_fired(
            "fault_fired",
            False,
            f"the chosen {sc.kind} commit never occurred; no crash was injected ({'; '.join(out.notes)})",
        )
    )


def _stop_scenario(sc: Scenario, workdir: Path, out: Outcome) -> None:
    """SIGKILL / SIGINT from outside, cancel, ENOSPC, stop_after_*: end the run, then resume."""
    paths = Paths(workdir, sc.store, sc.backend)
    res = paths.root / "first.json"
    expected_total = sc.pipelines * N_TASKS
    rnd = random.Random(f"{sc.seed}|{sc.fault}|{sc.occurrence}")
    pick = sc.occurrence if isinstance(sc.occurrence, int) else rnd.randint(1, expected_total)
    extra = ["--via", sc.via]
    signal_at: tuple[int, Path] | None = None
    no_stop: str | None = None  # why a stop limit never fired, when it did not
    if sc.fault == "sigkill":
        signal_at = (pick, paths.ledger)
    elif sc.fault == "sigint":
        signal_at = (-pick, paths.ledger)
    elif sc.fault == "cancel":
        extra += ["--fault", "cancel", "--n", str(pick)]
    elif sc.fault == "enospc":
        extra += [
            "--fault",
            "enospc",
            "--n",
            str(pick if isinstance(sc.occurrence, int) else rnd.randint(2, 60)),
        ]
    elif sc.fault == "stop_failures":
        extra += ["--fault", "stop_failures", "--n", "2"]
    elif sc.fault == "stop_time":
        extra += ["--fault", "stop_time", "--n", str(int(STOP_AFTER_MS))]
    run = run_child(_child_argv(paths, sc, res, extra), res, signal_at=signal_at)
    r = run.result or {}
    report = r.get("report") or {}
    if sc.fault == "sigkill":
        fired = run.signalled and run.returncode == -signal.SIGKILL
        out.verdicts.append(
            C.fault_fired(
                "fault_fired",
                fired,
                f"SIGKILL sent at ledger line {pick}: signalled={run.signalled}, "
                f"child returncode {run.returncode}",
            )
        )
        if not fired:
            return
        out.crashes += 1
    elif sc.fault == "sigint":
        out.verdicts.append(
            C.fault_fired(
                "fault_fired",
                run.signalled,
                f"SIGINT sent at ledger line {pick}: signalled={run.signalled}, returncode {run.returncode}",
            )
        )
        if not run.signalled:
            return
        out.stops += 1
        out.verdicts.append(C.equals("sigint_exit_code", run.returncode, 130, "child exit status"))
        out.verdicts.append(
            C.equals("sigint_stop_reason", report.get("stop_reason"), "signal", "RunReport.stop_reason")
        )
    elif sc.fault == "cancel":
        out.stops += 1
        out.verdicts.append(
            C.equals(
                "cancel_propagates",
                r.get("exception"),
                "CancelledError",
                "exception raised by the awaited run_async task",
            )
        )
    elif sc.fault == "enospc":
        refused = r.get("refused_commits")
        out.verdicts.append(
            C.fault_fired(
                "fault_fired",
                bool(refused),
                f"ENOSPC raised from {refused} commit(s) after {r.get('commits')} good ones",
            )
        )
        if not refused:  # the run ended before the chosen commit: there is no failure to judge
            out.verdicts.append(
                C.undetermined(
                    "enospc_reported",
                    f"the run made {r.get('commits')} commits, fewer than the {sc.occurrence} after which"
                    " ENOSPC was to be raised",
                )
            )
        elif sc.via == "cli":
            out.verdicts.append(
                C.equals("enospc_exit_code", run.returncode, 2, "`pyattacker resume` exit status")
            )
            text = r.get("stderr", "")
            out.verdicts.append(
                C.equals(
                    "enospc_error_named",
                    "store" in text.lower() and "No space" in text,
                    True,
                    f"CLI stderr {text.strip()[-200:]!r} names the store failure",
                )
            )
        else:
            out.verdicts.append(
                C.equals(
                    "enospc_raises", r.get("exception"), "StoreUnavailable", "exception raised by Runner.run"
                )
            )
        out.stops += 1 if refused else 0
    elif sc.fault in ("stop_failures", "stop_time"):
        want = "stop_after_failures" if sc.fault == "stop_failures" else "stop_after_s"
        limit_ms = STOP_AFTER_MS if sc.fault == "stop_time" else None
        stopped = C.stop_fired("stop_reason", report, want, limit_ms)
        out.verdicts.append(stopped)
        no_stop = stopped.evidence if stopped.status == C.UNDETERMINED else None
        out.stops += 0 if no_stop else 1
    if run.result is not None:
        out.verdicts.append(
            C.no_lease_held("no_lease_held_after_fault", r.get("pool_active"), r.get("pool_leaked"))
        )
    if no_stop is not None:  # nothing was stopped: the run row has no stop to show
        for name in ("run_record_status", "run_record_stop_reason"):
            out.verdicts.append(C.undetermined(name, f"no stop happened: {no_stop}"))
    elif sc.fault in ("sigint", "cancel", "stop_failures", "stop_time"):
        snap = snapshot(sc.store, paths.store_path)
        row = snap.last_run() or {}
        out.verdicts.append(
            C.equals("run_record_status", row.get("status"), "interrupted", "the store's run row")
        )
        want_reason = {
            "sigint": "signal",
            "cancel": "cancelled",
            "stop_failures": "stop_after_failures",
            "stop_time": "stop_after_s",
        }[sc.fault]
        out.verdicts.append(
            C.equals("run_record_stop_reason", row.get("stop_reason"), want_reason, "the store's run row")
        )
    _judge_resume(sc, paths, out, crashed=run)


def _judge_resume(sc: Scenario, paths: Paths, out: Outcome, *, crashed: ChildRun) -> None:
    """Snapshot what was committed when the first run ended, resume, and apply the common criteria."""
    mark = len(read_ledger(paths.ledger))
    before = snapshot(sc.store, paths.store_path)
    res = paths.root / "resumed.json"
    resumed = run_child(_child_argv(paths, sc, res, ["--via", sc.via]), res)
    out.resumes += 1
    after = snapshot(sc.store, paths.store_path)
    _common(sc, paths, out, before, after, mark, resumed)


def _common(
    sc: Scenario,
    paths: Paths,
    out: Outcome,
    before: Snapshot,
    after: Snapshot,
    mark: int,
    resumed: ChildRun,
    damaged: frozenset[tuple[str, int]] = frozenset(),
) -> None:
    """The criteria every resume is judged by. ``damaged``: slots whose bytes were changed on
    purpose after the crash; running them again is owed, not a task the crash cost."""
    ledger = read_ledger(paths.ledger)
    out.tasks_executed += len(ledger)
    out.pipelines_checked += len(after.pipelines)
    r = resumed.result or {}
    expect_exit = 1 if sc.fault == "stop_failures" else 0
    out.verdicts.append(
        C.equals(
            "resume_exit_code",
            resumed.returncode,
            expect_exit,
            f"resume exit status (stderr tail {resumed.stderr.strip()[-150:]!r})",
        )
    )
    if sc.store == "jsonl":
        out.notes.append(
            f"{len(before.journal) - len(before.committed)} uncommitted tail bytes in the journal "
            "at crash time"
        )
        out.verdicts.append(
            C.committed_prefix_preserved("history_unchanged", before.committed, after.journal)
        )
    else:
        out.verdicts.append(
            C.rows_preserved("attempts_unchanged", before.attempts, after.attempts, "attempt")
        )
        out.verdicts.append(C.rows_preserved("events_unchanged", before.events, after.events, "event"))
    out.verdicts.append(C.artifacts_preserved("artifacts_unchanged", before.artifacts, after.artifacts))
    durable = before.durable
    post = ledger[mark:]
    verdict = C.no_replay("no_replay_of_durable_task", durable, post, mark)
    out.replays += sum(1 for pid, seq, _ in post if (pid, seq) in durable)
    out.verdicts.append(verdict)
    started_before = {(pid, seq) for pid, seq, _ in ledger[:mark]}
    lost: dict[str, int] = {}
    for pid, _seq in {(p, s) for p, s, _ in post} & (started_before - durable - damaged):
        lost[pid] = lost.get(pid, 0) + 1
    out.verdicts.append(C.at_most_one_lost("crash_costs_at_most_one_task", lost))
    states = {pid: row["state"] for pid, row in after.pipelines.items()}
    out.verdicts.append(C.all_terminal("all_pipelines_terminal", states, sc.pipelines))
    out.verdicts.append(
        C.finals_complete(
            "succeeded_have_all_artifacts",
            [p for p, s in states.items() if s == "succeeded"],
            after.artifact_slots,
            N_TASKS,
        )
    )
    out.verdicts.append(
        C.no_lease_held("no_lease_held_after_resume", r.get("pool_active"), r.get("pool_leaked"))
    )
    row = after.last_run() or {}
    out.verdicts.append(
        C.equals("resume_run_completed", row.get("status"), "completed", "the store's newest run row")
    )


def _sink_scenario(sc: Scenario, workdir: Path, out: Outcome) -> None:
    paths = Paths(workdir, sc.store, sc.backend)
    res = paths.root / "run.json"
    run = run_child(_child_argv(paths, sc, res, ["--via", "sdk", "--fault", "sink_error"]), res)
    r = run.result or {}
    report = r.get("report") or {}
    raised = r.get("sink_raised")
    counted = (report.get("counters") or {}).get("sink_errors")
    out.verdicts.append(
        C.fault_fired(
            "fault_fired", bool(raised), f"the sink raised {raised} time(s) in {r.get('sink_calls')} calls"
        )
    )
    out.verdicts.append(
        C.equals(
            "sink_errors_counted",
            counted,
            raised,
            "RunReport.counters['sink_errors'] vs the sink's own count",
        )
    )
    out.verdicts.append(
        C.equals("run_completes_despite_sink", report.get("status"), "completed", "RunReport.status")
    )
    snap = snapshot(sc.store, paths.store_path)
    states = {pid: row["state"] for pid, row in snap.pipelines.items()}
    out.verdicts.append(C.all_terminal("all_pipelines_terminal", states, sc.pipelines))
    out.verdicts.append(C.no_lease_held("no_lease_held", r.get("pool_active"), r.get("pool_leaked")))
    out.pipelines_checked += len(states)
    out.tasks_executed += len(read_ledger(paths.ledger))


def _normalise(rows: dict[str, dict[str, Any]], keep: set[str] | None) -> dict[str, dict[str, Any]]:
    """Rows of the pipelines that must be untouched; ``running`` -> ``interrupted`` is allowed."""
    out = {}
    for key, row in rows.items():
        pid = row.get("pipeline_id", key)
        if keep is not None and pid not in keep:
            continue
        row = dict(row)
        if row.get("state") == "running":
            row["state"] = "interrupted"
        out[key] = row
    return out


def _drift_scenario(sc: Scenario, workdir: Path, out: Outcome) -> None:
    """Crash mid-run, resume with a changed chain / seed under the same keys: refused, nothing touched."""
    paths = Paths(workdir, sc.store, sc.backend)
    counts = calibrate(
        Scenario("none", sc.store, sc.backend, seed=sc.seed, pipelines=sc.pipelines, via=sc.via),
        workdir.parent,
    )
    res = paths.root / "crashed.json"
    note = paths.root / "crash.json"
    at = counts.get("checkpoint", 2) // 2
    run = run_child(
        _child_argv(
            paths,
            sc,
            res,
            [
                "--via",
                sc.via,
                "--fault",
                "crash",
                "--kind",
                "checkpoint",
                "--n",
                str(at),
                "--crash-note",
                str(note),
            ],
        ),
        res,
    )
    fired = run.returncode == CRASH_EXIT
    out.verdicts.append(
        C.fault_fired(
            "fault_fired", fired, f"crash after checkpoint #{at}: child returncode {run.returncode}"
        )
    )
    if not fired:
        return
    out.crashes += 1
    mark = len(read_ledger(paths.ledger))
    before = snapshot(sc.store, paths.store_path)
    variant = "chain" if sc.fault == "drift_chain" else "seed"
    drifted = paths.root / "drifted.json"
    refused = run_child(_child_argv(paths, sc, drifted, ["--via", sc.via, "--variant", variant]), drifted)
    out.resumes += 1
    mid = snapshot(sc.store, paths.store_path)
    r = refused.result or {}
    text = r.get("stderr", "") + r.get("error", "") + refused.stderr
    if sc.via == "cli":
        out.verdicts.append(
            C.equals("drift_exit_code", refused.returncode, 2, "`pyattacker resume` exit status")
        )
    else:
        out.verdicts.append(
            C.equals("drift_exception", r.get("exception"), "PipelineIdentityConflict", "Runner.run raised")
        )
    named = "different task chain" if variant == "chain" else "different seed"
    out.verdicts.append(
        C.equals("drift_error_names_conflict", named in text, True, f"error text {text.strip()[-220:]!r}")
    )
    keep = None if variant == "chain" else {"p00002"}
    out.verdicts.append(
        C.rows_untouched(
            "drifted_pipeline_rows_untouched",
            _normalise(before.pipelines, keep),
            _normalise(mid.pipelines, keep),
            "pipeline",
        )
    )
    out.verdicts.append(
        C.rows_untouched(
            "drifted_task_rows_untouched", _normalise(before.tasks, keep), _normalise(mid.tasks, keep), "task"
        )
    )
    kept_arts = {k: v for k, v in before.artifacts.items() if keep is None or k.split(":")[0] in keep}
    out.verdicts.append(C.artifacts_preserved("drifted_artifacts_untouched", kept_arts, mid.artifacts))
    post = read_ledger(paths.ledger)[mark:]
    touched = [x for x in post if keep is None or x[0] in keep]
    out.verdicts.append(
        (C.passed if not touched else C.breached)(
            "refused_pipeline_not_executed",
            f"{len(post)} executions after the crash; {len(touched)} of them of a pipeline "
            "whose identity drifted",
        )
    )
    # the unchanged config still resumes everything afterwards
    _judge_after_refusal(sc, paths, out, before, mark)


def _judge_after_refusal(sc: Scenario, paths: Paths, out: Outcome, before: Snapshot, mark: int) -> None:
    res = paths.root / "resumed.json"
    resumed = run_child(_child_argv(paths, sc, res, ["--via", sc.via]), res)
    out.resumes += 1
    after = snapshot(sc.store, paths.store_path)
    _common(sc, paths, out, before, after, mark, resumed)


# -- matrices ----------------------------------------------------------------------------------------
def ci_matrix() -> list[Scenario]:
    """A representative matrix that runs in a few minutes on two cores."""
    out: list[Scenario] = []
    combos = [("sqlite", "inline"), ("jsonl", "file"), ("sqlite", "file"), ("jsonl", "inline")]
    for i, kind in enumerate(WRITE_KINDS):
        for j, occ in enumerate(("first", "middle", "last")):
            store, backend = combos[(i + j) % len(combos)]
            out.append(Scenario("crash", store, backend, kind=kind, occurrence=occ, seed=i * 3 + j))
    out += [
        Scenario("crash", "jsonl", "inline", kind="torn", occurrence="middle", seed=20),
        Scenario("sigkill", "sqlite", "inline", occurrence=150, seed=21),
        Scenario("sigkill", "jsonl", "file", occurrence=90, seed=22),
        Scenario("sigint", "sqlite", "file", occurrence=120, seed=23),
        Scenario("sigint", "jsonl", "inline", occurrence=100, seed=32, via="cli"),
        Scenario("cancel", "jsonl", "inline", occurrence=100, seed=24),
        Scenario("enospc", "sqlite", "inline", occurrence=20, seed=25, via="cli"),
        Scenario("enospc", "jsonl", "file", occurrence=12, seed=26),
        Scenario("stop_failures", "sqlite", "inline", seed=27),
        Scenario("stop_time", "jsonl", "inline", seed=28),
        Scenario("sink_error", "sqlite", "inline", seed=29),
        Scenario("drift_chain", "sqlite", "file", seed=30, via="cli"),
        Scenario("drift_seed", "jsonl", "inline", seed=31, via="cli"),
        Scenario("crash", "sqlite-full", "inline", kind="checkpoint", occurrence="middle", seed=33),
        Scenario("crash", "sqlite-full", "file", kind="terminal", occurrence="last", seed=34),
        Scenario("sigkill", "sqlite-full", "inline", occurrence=150, seed=35),
        Scenario("sigint", "sqlite-full", "file", occurrence=110, seed=36, via="cli"),
        Scenario("damage_digest", "jsonl", "inline", kind="checkpoint", occurrence="middle", seed=37),
        Scenario("damage_wal_lost", "sqlite", "inline", kind="checkpoint", occurrence="middle", seed=38),
        Scenario("damage_wal_bit", "sqlite", "file", kind="attempts", occurrence="middle", seed=39),
        Scenario("damage_hot_journal", "sqlite", "inline", seed=40),
        Scenario("shards_sigkill", "sqlite", "inline", occurrence=150, seed=41),
        # backward moves (tests/faults/backward.py): a rewind loop and a retry-all, each crashed
        # right after the commit of one of its moves
        Scenario("backward_rewind", "sqlite", "inline", kind="rewind", occurrence=1, seed=42, pipelines=12),
        Scenario(
            "backward_retry_all", "jsonl", "file", kind="retry_all", occurrence=0, seed=43, pipelines=12
        ),
    ]
    return out


def random_scenario(rnd: random.Random, pipelines: int) -> Scenario:
    """A random fault (crashes weighted up), store, backend, occurrence and seed."""
    from .backward import BACKWARD_WEIGHTS, backward_scenario  # (it builds on this module)

    fault = rnd.choices(
        [
            "crash",
            "sigkill",
            "sigint",
            "cancel",
            "enospc",
            "stop_failures",
            "stop_time",
            *DAMAGE_WEIGHTS,
            *BACKWARD_WEIGHTS,
        ],
        weights=[10, 3, 1, 1, 1, 0.5, 0.5, *DAMAGE_WEIGHTS.values(), *BACKWARD_WEIGHTS.values()],
    )[0]
    store, backend = rnd.choice(STORES), rnd.choice(BACKENDS)
    seed = rnd.randrange(1_000_000)
    if fault in BACKWARD_WEIGHTS:
        return backward_scenario(rnd, fault, store, backend, seed, pipelines)
    if fault in DAMAGE_WEIGHTS:
        return _damage_scenario(rnd, fault, backend, seed, pipelines)
    if fault == "crash":
        kind = rnd.choice((*WRITE_KINDS, "torn"))
        if kind == "torn":
            store = "jsonl"
        occ: str | int = rnd.choice(["first", "middle", "last", "random"])
        if occ == "random":
            occ = rnd.randrange(0, 4 if kind == "run" else 40)
        return Scenario("crash", store, backend, kind=kind, occurrence=occ, seed=seed, pipelines=pipelines)
    occurrence: int | str = (
        rnd.randint(1, pipelines * N_TASKS) if fault in ("sigkill", "sigint", "cancel") else "first"
    )
    if fault == "enospc":
        occurrence = rnd.randint(2, 60)
    via = "cli" if fault == "enospc" and rnd.random() < 0.5 else "sdk"
    return Scenario(fault, store, backend, occurrence=occurrence, seed=seed, pipelines=pipelines, via=via)


#: the damage scenarios' share of a soak (``damage``), beside the weights of the faults above
DAMAGE_WEIGHTS = {
    "damage_digest": 2.0,
    "damage_wal_lost": 1.0,
    "damage_wal_bit": 1.0,
    "damage_hot_journal": 0.5,
    "shards_sigkill": 1.5,
}


def _damage_scenario(rnd: random.Random, fault: str, backend: str, seed: int, pipelines: int) -> Scenario:
    """A damage scenario: the WAL and the rollback journal exist only in SQLite stores."""
    if fault == "shards_sigkill":
        store = rnd.choice(("sqlite", "jsonl"))
        at = rnd.randint(1, pipelines * N_TASKS)
        return Scenario(fault, store, backend, occurrence=at, seed=seed, pipelines=pipelines)
    sqlite_only = fault != "damage_digest"
    store = rnd.choice(("sqlite", "sqlite-full") if sqlite_only else STORES)
    kind = rnd.choice(WRITE_KINDS)
    occ: str | int = rnd.choice(["first", "middle", "last", "random"])
    if occ == "random":
        occ = rnd.randrange(0, 4 if kind == "run" else 40)
    return Scenario(fault, store, backend, kind=kind, occurrence=occ, seed=seed, pipelines=pipelines)


__all__ = [
    "BACKENDS",
    "FAULT_KINDS",
    "STORES",
    "Outcome",
    "Scenario",
    "Snapshot",
    "calibrate",
    "ci_matrix",
    "committed_prefix",
    "random_scenario",
    "read_ledger",
    "run_child",
    "run_scenario",
    "snapshot",
]
