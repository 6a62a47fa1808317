"""Backward scenarios of the fault harness: a rewind loop and a retry-all, crashed at their commits.

The child runs ``fetch -> transform -> judge_back`` with ``--control rewind`` (the judge sends
a pipeline back to ``transform``) or ``--control retry_all`` (back to the seed), budget
``MAX_HANDOFFS``: even seeds use the whole budget, seeds ``i % 4 == 1`` ask for one move more and
fail. It kills itself right after the chosen commit holding such a move is durable, then runs
again without the fault. Its ledger lines carry the visit, so the verdicts are per visit:

* no task output for a visit computed twice (a slot durable at crash time, at the visit the
  committed ledger gives it, never runs again for that visit);
* the budget never exceeded across resumes, and every move committed once (the ledger);
* a crash costs at most one task visit per pipeline; every pipeline ends; history unchanged.

Evidence is read outside the library (``sqlite3`` in read-only mode, the journal's bytes), and the
visits are replayed here from the committed ledger rows.
"""

from __future__ import annotations

import json
import random
import sqlite3
from collections import Counter
from pathlib import Path

from . import criteria as C
from .child import CONTROL_KINDS, CRASH_EXIT, MAX_HANDOFFS
from .harness import N_TASKS, Outcome, Paths, Scenario, Snapshot, _child_argv, run_child, snapshot
from .harness import committed_prefix as _committed_prefix

__all__ = ["BACKWARD_WEIGHTS", "backward_scenario", "read_visit_ledger", "run_backward", "visits_of"]

#: the backward faults' share of a soak, beside the other faults' weights
BACKWARD_WEIGHTS = {"backward_rewind": 1.5, "backward_retry_all": 1.0}
#: a first guess at where "middle" is (moves are grouped into commits; a miss retries lower)
_MIDDLE = 4
Move = tuple[str, int, "int | None"]


def backward_scenario(
    rnd: random.Random, fault: str, store: str, backend: str, seed: int, pipelines: int
) -> Scenario:
    """A random backward scenario (the commit of its move: first, middle, last or an index)."""
    occ: str | int = rnd.choice(["first", "middle", "last", "random"])
    if occ == "random":
        occ = rnd.randrange(0, 12)
    op = fault.removeprefix("backward_")
    return Scenario(fault, store, backend, kind=op, occurrence=occ, seed=seed, pipelines=pipelines)


def visits_of(moves: list[Move], n: int) -> list[int]:
    """Each task's visit after the ledger rows ``moves`` (operation, from seq, to seq)."""
    visits = [0] * n
    for op, source, target in moves:
        if op == "restart":
            visits = [v + 1 for v in visits]
        elif op in CONTROL_KINDS and target is not None:
            for seq in range(target, min(source, n - 1) + 1):
                visits[seq] += 1
    return visits


def read_visit_ledger(path: Path) -> list[tuple[str, int, int, int]]:
    """``(pipeline, seq, attempt, visit)`` per completed line of a ``--control`` child's ledger."""
    if not path.exists():
        return []
    raw = path.read_bytes()
    out = []
    for line in raw[: raw.rfind(b"\n") + 1].decode().splitlines():
        pid, seq, attempt, visit = line.split("\t")
        out.append((pid, int(seq), int(attempt), int(visit)))
    return out


def _moves(store: str, path: Path) -> dict[str, list[Move]]:
    """The committed control ledger of every pipeline, in order."""
    out: dict[str, list[Move]] = {}
    if store.startswith("sqlite"):
        if not path.exists():
            return out
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            rows = con.execute(
                "SELECT k.pipeline_id, h.operation, h.from_seq, h.to_seq FROM handoffs AS h"
                " JOIN pipeline_keys AS k ON k.pk = h.pk ORDER BY h.handoff_id"
            ).fetchall()
        except sqlite3.OperationalError:  # no table yet: nothing committed
            rows = []
        finally:
            con.close()
        for pid, op, source, target in rows:
            out.setdefault(pid, []).append((op, source, target))
        return out
    journal = path / "journal.jsonl"
    if not journal.exists():
        return out
    for line in _committed_prefix(journal.read_bytes()).splitlines():
        item = json.loads(line)
        if item[0] == "handoff":
            row = item[1]
            out.setdefault(row["pipeline_id"], []).append((row["operation"], row["from_seq"], row["to_seq"]))
    return out


def _chain_slots(store: str, path: Path, snap: Snapshot) -> dict[str, set[int]]:
    """The chain slots holding an output, per pipeline. SQLite deletes the rows a move back
    resets; the journal keeps them and says ``reset`` after (seqs ``start .. slots - 1`` go)."""
    if store.startswith("sqlite"):
        return {pid: {s for s in seqs if 0 <= s < N_TASKS} for pid, seqs in snap.artifact_slots.items()}
    out: dict[str, set[int]] = {}
    for line in snap.committed.splitlines():
        item = json.loads(line)
        tag, row = item[0], item[1] if len(item) > 1 else {}
        if tag == "artifact" and 0 <= int(row["seq"]) < N_TASKS:
            out.setdefault(row["pipeline_id"], set()).add(int(row["seq"]))
        elif tag == "reset":
            out.get(row["pipeline_id"], set()).difference_update(
                range(int(row.get("start", 0)), int(row["slots"]))
            )
    return out


def _place(occurrence: str | int) -> int:
    if isinstance(occurrence, int):
        return occurrence
    return {"first": 0, "middle": _MIDDLE, "last": 10**6}[occurrence]


def run_backward(sc: Scenario, workdir: Path, out: Outcome) -> None:
    """Crash right after the chosen commit of a move, resume, judge (``_judge``)."""
    op = sc.fault.removeprefix("backward_")
    at = _place(sc.occurrence)
    for attempt in range(3):
        paths = Paths(workdir / f"try{attempt}", sc.store, sc.backend)
        paths.root.mkdir(parents=True)
        note, res = paths.root / "crash.json", paths.root / "crashed.json"
        fault = ["--fault", "crash", "--kind", op, "--n", str(at), "--crash-note", str(note)]
        run = run_child(_child_argv(paths, sc, res, ["--via", "sdk", "--control", op, *fault]), res)
        if run.returncode == CRASH_EXIT and note.exists():
            out.crashes += 1
            crash = json.loads(note.read_text())
            out.verdicts.append(
                C.fault_fired(
                    "fault_fired",
                    True,
                    f"child exited {CRASH_EXIT} right after {op} commit #{at} (commit {crash['commit_no']}:"
                    f" {len(crash['artifacts'])} artifacts, pipeline states {crash['pipeline_states']})",
                )
            )
            _judge(sc, paths, out, op)
            return
        seen = ((run.result or {}).get("occurrences") or {}).get(op)
        out.notes.append(f"try {attempt}: {op} commit #{at} never happened (rc {run.returncode}, saw {seen})")
        if not isinstance(seen, int) or seen == 0:
            break
        at = seen - 1 if sc.occurrence != "middle" else seen // 2
    out.verdicts.append(
        C.fault_fired("fault_fired", False, f"the chosen {op} commit never occurred ({'; '.join(out.notes)})")
    )


def _judge(sc: Scenario, paths: Paths, out: Outcome, op: str) -> None:
    mark = len(read_visit_ledger(paths.ledger))
    before = snapshot(sc.store, paths.store_path)
    moves_before = _moves(sc.store, paths.store_path)
    res = paths.root / "resumed.json"
    resumed = run_child(_child_argv(paths, sc, res, ["--via", "sdk", "--control", op]), res)
    out.resumes += 1
    after = snapshot(sc.store, paths.store_path)
    moves_after = _moves(sc.store, paths.store_path)
    ledger = read_visit_ledger(paths.ledger)
    out.tasks_executed += len(ledger)
    out.pipelines_checked += len(after.pipelines)
    doomed = sum(1 for i in range(sc.pipelines) if i % 4 == 1)
    out.verdicts.append(
        C.equals(
            "resume_exit_code",
            resumed.returncode,
            1 if doomed else 0,
            f"resume exit status: {doomed} pipelines exceed the budget on purpose"
            f" (stderr tail {resumed.stderr.strip()[-150:]!r})",
        )
    )
    _history(sc, out, before, after)
    durable = {
        (pid, seq, visits_of(moves_before.get(pid, []), N_TASKS)[seq])
        for pid, seqs in _chain_slots(sc.store, paths.store_path, before).items()
        for seq in seqs
    }
    post = [(pid, seq, visit) for pid, seq, _a, visit in ledger[mark:]]
    replayed = [k for k in post if k in durable]
    out.replays += len(replayed)
    out.verdicts.append(_no_replay(durable, post, replayed, mark))
    started = {(pid, seq, visit) for pid, seq, _a, visit in ledger[:mark]}
    lost = Counter(pid for pid, _s, _v in set(post) & (started - durable))
    out.verdicts.append(C.at_most_one_lost("crash_costs_at_most_one_visit", dict(lost)))
    out.verdicts.append(_budget(moves_after, sc.pipelines, op))
    states = {pid: row["state"] for pid, row in after.pipelines.items()}
    out.verdicts.append(C.all_terminal("all_pipelines_terminal", states, sc.pipelines))
    wrong = sorted(pid for pid, s in states.items() if (s == "failed") != (int(pid[1:]) % 4 == 1))
    out.verdicts.append(
        C.breached("outcomes_as_designed", f"pipelines ending otherwise than designed: {wrong[:5]}")
        if wrong
        else C.passed(
            "outcomes_as_designed",
            f"{len(states)} pipelines: exactly the {doomed} that ask for a move over the budget failed",
        )
    )
    report = resumed.result or {}
    out.verdicts.append(
        C.no_lease_held("no_lease_held_after_resume", report.get("pool_active"), report.get("pool_leaked"))
    )


def _history(sc: Scenario, out: Outcome, before: Snapshot, after: Snapshot) -> None:
    """Committed history (attempts, events; the journal's bytes) is never rewritten."""
    if sc.store == "jsonl":
        out.verdicts.append(
            C.committed_prefix_preserved("history_unchanged", before.committed, after.journal)
        )
        return
    out.verdicts.append(C.rows_preserved("attempts_unchanged", before.attempts, after.attempts, "attempt"))
    out.verdicts.append(C.rows_preserved("events_unchanged", before.events, after.events, "event"))


def _no_replay(
    durable: set[tuple[str, int, int]],
    post: list[tuple[str, int, int]],
    replayed: list[tuple[str, int, int]],
    mark: int,
) -> C.Verdict:
    name = "no_replay_of_durable_visit"
    if not durable:
        return C.undetermined(name, "no task output was durable at crash time: nothing could be replayed")
    if replayed:
        return C.breached(
            name, f"{len(replayed)} task visits durable at crash time ran again: {sorted(set(replayed))[:5]}"
        )
    return C.passed(
        name,
        f"{len(durable)} (pipeline, seq, visit) outputs durable at crash time; none of the {len(post)}"
        f" executions after ledger line {mark} repeats one",
    )


def _budget(moves: dict[str, list[Move]], pipelines: int, op: str) -> C.Verdict:
    """Moves per pipeline since its last restart never exceed the budget; each ran once."""
    name = "budget_never_exceeded"
    if not moves:
        return C.undetermined(name, "no control ledger committed: no move to count")
    over, wrong = [], []
    for pid, rows in moves.items():
        since = rows[max((k + 1 for k, r in enumerate(rows) if r[0] == "restart"), default=0) :]
        used = sum(1 for r in since if r[0] != "restart" and r[2] is not None)
        if used > MAX_HANDOFFS:
            over.append((pid, used))
        i = int(pid[1:])
        want = MAX_HANDOFFS if i % 2 == 0 or i % 4 == 1 else 0  # (the third move of i % 4 == 1 fails)
        if [r[0] for r in since] != [op] * want:
            wrong.append((pid, [r[0] for r in rows]))
    if over or wrong:
        return C.breached(
            name, f"over the budget of {MAX_HANDOFFS}: {over[:5]}; moves not as designed: {wrong[:5]}"
        )
    return C.passed(
        name,
        f"{len(moves)} of {pipelines} pipelines moved back; each committed exactly its {MAX_HANDOFFS}"
        f" {op} moves across the crash and the resume, none over the budget",
    )
