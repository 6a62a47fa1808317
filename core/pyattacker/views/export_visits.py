"""Visit numbers on exported rows (pipelines with backward moves re-enter tasks).

Derived from each pipeline's control ledger (``pyattacker.flow.visits``), read a page of
pipelines at a time beside the rows: a pipeline without a ledger is at visit 0 everywhere and
costs no computation.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import msgspec

from pyattacker.flow.visits import BACKWARD_OPS, Traversal, slot_visits, visit_id, visit_numbers
from pyattacker.model import HandoffRecord, PipelineRecord, TaskRecord

__all__ = [
    "Visits",
    "control_record",
    "ledger_rows",
    "stale_entries",
    "with_artifact_visits",
    "with_task_visits",
]

#: ledger operations after which a destination is entered again (its earlier entries are spent)
_AGAIN = frozenset(("rewind", "retry_all", "restart"))


def ledger_rows(ledger: list[HandoffRecord], n: int) -> list[dict[str, Any]]:
    """The ledger as export rows, each with ``from_visit`` and ``to_visit``."""
    out = []
    for h, (src, dest) in zip(ledger, visit_numbers(ledger, n), strict=True):
        row = msgspec.structs.asdict(h)
        row["from_visit"], row["to_visit"] = src, dest
        out.append(row)
    return out


def stale_entries(ledger: list[HandoffRecord]) -> set[int]:
    """Seqs of the values handed over (entries) that a later move back or restart re-entered
    their destination past: no longer part of the current traversal."""
    out: set[int] = set()
    for k, h in enumerate(ledger):
        if h.entry_reused or h.to_seq is None:
            continue
        for later in ledger[k + 1 :]:
            if later.operation in _AGAIN and later.to_seq is not None and later.to_seq <= h.to_seq:
                out.add(h.entry_seq)
                break
    return out


class Visits:
    """Visits of the pipelines whose ledgers were read (``ledgers``: ``{pipeline_id: rows}``)."""

    def __init__(self, ledgers: dict[str, list[HandoffRecord]], sizes: dict[str, int]) -> None:
        self._slots: dict[str, tuple[list[int], dict[int, int]]] = {}
        self._stale: dict[str, set[int]] = {}
        for pid, ledger in ledgers.items():
            if any(h.operation in ("rewind", "retry_all") for h in ledger):
                self._slots[pid] = slot_visits(
                    ledger, max(sizes.get(pid, 0), 1 + max(h.from_seq for h in ledger))
                )
            if any(h.operation in _AGAIN for h in ledger):
                self._stale[pid] = stale_entries(ledger)

    def active(self, pid: str, seq: int) -> bool:
        """Whether an artifact is part of the pipeline's current traversal: not an output a move
        back kept as history (``seq < -1``), nor a value handed over to a task entered since."""
        if seq < -1:
            return False
        stale = self._stale.get(pid)
        return stale is None or seq not in stale

    def task(self, pid: str, seq: int) -> int:
        got = self._slots.get(pid)
        return got[0][seq] if got is not None and 0 <= seq < len(got[0]) else 0

    def artifact(self, pid: str, seq: int) -> int | None:
        """The visit that produced an artifact: a slot's current one, a kept output's own, None
        for the seed and handed-over entries."""
        got = self._slots.get(pid)
        if seq < -1:
            return None if got is None else got[1].get(seq)
        if seq == -1:
            return None
        if got is None:
            return 0
        return got[0][seq] if seq < len(got[0]) else None


def with_task_visits(store: Any, rows: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Task rows (a page), each given ``visit``."""
    page = list(rows)
    visits = _visits_for(store, {r["pipeline_id"] for r in page})
    for row in page:
        row["visit"] = visits.task(row["pipeline_id"], row["seq"])
        row["active"] = True  # a slot's row is its current occurrence (a move back resets it)
        yield row


def with_artifact_visits(store: Any, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Artifact rows (a page), each given ``visit`` (None: the seed or a handed-over entry)."""
    visits = _visits_for(store, {r["pipeline_id"] for r in rows})
    for row in rows:
        row["visit"] = visits.artifact(row["pipeline_id"], row["seq"])
        row["active"] = visits.active(row["pipeline_id"], row["seq"])
    return rows


def _visits_for(store: Any, ids: set[str]) -> Visits:
    if not ids or not store.has_ledger:
        return Visits({}, {})
    ledgers = store.rows_by_pipeline("handoffs", sorted(ids))
    sizes = (
        {pid: row.n_tasks_total for pid, row in store.lookup_pipelines(list(ledgers)).items()}
        if ledgers
        else {}
    )
    return Visits(ledgers, sizes)


def control_record(
    p: PipelineRecord, ledger: list[HandoffRecord], tasks: list[TaskRecord]
) -> dict[str, Any] | None:
    """Where a pipeline with backward moves stands, derived from its ledger, row and task rows
    (the reference's traversal record, with the same keys); None without a move back.

    ``counters``: each task's highest visit; ``active``: each task's current occurrence (its
    attempt rows' id, visit and output); ``pending``: the task the pipeline goes on with, its
    visit and input (None once it ended); ``handoffs``: the budget used (the limit is the
    configuration's ``max_handoffs``, not stored)."""
    if not any(h.operation in BACKWARD_OPS for h in ledger):
        return None
    pid, n = p.pipeline_id, p.n_tasks_total
    visits, _ = slot_visits(ledger, n)
    used = Traversal.replay(ledger, n, None, True).used
    active = {
        str(t.seq): {
            "task_run_id": visit_id(t.task_run_id, visits[t.seq]),
            "visit": visits[t.seq],
            "output": t.output_artifact_id,
        }
        for t in tasks
        if 0 <= t.seq < n and t.state in ("succeeded", "handed_off")
    }
    pending = None
    last = ledger[-1]
    if p.state != "succeeded" and 0 <= p.cursor < n:
        seq = p.cursor
        entry = last.entry_artifact_id if last.to_seq == seq else f"{pid}:{seq - 1}"
        pending = {
            "seq": seq,
            "visit": visits[seq],
            "task_run_id": visit_id(f"{pid}:{seq}", visits[seq]),
            "input": entry,
        }
    terminal = None
    if p.state == "succeeded":
        terminal = last.entry_artifact_id if last.to_seq is None else active.get(str(n - 1), {}).get("output")
    return {
        "version": 1,
        "counters": {str(seq): v for seq, v in enumerate(visits)},
        "active": active,
        "pending": pending,
        "input": f"{pid}:-1",
        "cursor": p.cursor,
        "terminal": terminal,
        "handoffs": used,
    }
