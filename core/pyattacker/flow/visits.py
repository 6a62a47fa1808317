"""Visits and the handoff budget of one pipeline, derived from its control ledger.

The ledger is the one durable record of a pipeline's moves, written in the same commit as each
move, so everything here is a pure replay of it: a resume after a kill rebuilds exactly the
numbers the killed run had, and a view (export, viewer) shows the same ones.

* A task's **visit** is how many times it has been re-entered: a ``rewind`` or ``retry_all``
  from seq ``f`` to seq ``t`` opens a new visit of every task ``t..f`` (the ones it spans); a
  ``restart`` row (a fresh restart, say) one of every task. A task a forward edge skipped keeps
  its number, so visits may skip numbers but never repeat one.
* The **budget**: every nonterminal move (forward to a task, rewind, retry-all) consumes one
  unit; END consumes none. A restart row resets it, except after a checkpoint that could not be
  used (``checkpoint_unusable``: the same traversal goes on).
"""

from __future__ import annotations

from collections.abc import Iterable

from pyattacker.model import ArtifactRecord, HandoffRecord

__all__ = [
    "BACKWARD_OPS",
    "Traversal",
    "attempt_visit",
    "handoffs_label",
    "history_seq",
    "slot_visits",
    "visit_id",
    "visit_numbers",
]

#: ledger operations that re-enter earlier tasks
BACKWARD_OPS = frozenset(("rewind", "retry_all"))
#: a restart reason under which the traversal (and its budget) goes on
_SAME_TRAVERSAL = "checkpoint_unusable"


def history_seq(ledger_index: int, n: int, seq: int) -> int:
    """Where the output task ``seq`` had before the backward move at ``ledger_index`` is kept:
    below the seed (``-1``), one slot per (move, task), never reused."""
    return -2 - (ledger_index * n + seq)


class Traversal:
    """Per-task visit numbers and the budget used, for one pipeline with control."""

    __slots__ = ("limit", "outputs", "track_visits", "used", "visits")

    def __init__(self, n: int, limit: int | None, track_visits: bool) -> None:
        self.visits = [0] * n
        #: the artifact rows this process staged for the current visits, by seq: what a backward
        #: move keeps as history without reading them back (a resumed run reads the older ones)
        self.outputs: dict[int, ArtifactRecord] = {}
        self.used = 0
        #: the effective budget (None: unbounded, a forward-only pipeline without max_handoffs)
        self.limit = limit
        self.track_visits = track_visits

    @classmethod
    def replay(
        cls, ledger: Iterable[HandoffRecord], n: int, limit: int | None, track_visits: bool
    ) -> Traversal:
        out = cls(n, limit, track_visits)
        for row in ledger:
            out.apply(row.operation, row.from_seq, row.to_seq, row.reason)
        return out

    def apply(self, op: str, from_seq: int, to_seq: int | None, reason: str = "") -> None:
        """Count one ledger row."""
        if op == "restart":
            if self.track_visits:
                self.visits = [v + 1 for v in self.visits]
            if reason != _SAME_TRAVERSAL:
                self.used = 0
            return
        if to_seq is None:  # END
            return
        self.used += 1
        if op in BACKWARD_OPS and self.track_visits:
            visits = self.visits
            for seq in range(to_seq, min(from_seq, len(visits) - 1) + 1):
                visits[seq] += 1

    def exhausted(self) -> bool:
        return self.limit is not None and self.used >= self.limit


def visit_numbers(ledger: Iterable[HandoffRecord], n: int) -> list[tuple[int, int | None]]:
    """``(from_visit, to_visit)`` of each ledger row: the source's visit when it moved, and the
    visit the destination is entered with (None for END)."""
    trav = Traversal(n, None, True)
    out: list[tuple[int, int | None]] = []
    for row in ledger:
        src = trav.visits[row.from_seq] if 0 <= row.from_seq < n else 0
        trav.apply(row.operation, row.from_seq, row.to_seq, row.reason)
        dest = row.to_seq
        out.append((src, trav.visits[dest] if dest is not None and 0 <= dest < n else None))
    return out


def slot_visits(ledger: Iterable[HandoffRecord], n: int) -> tuple[list[int], dict[int, int]]:
    """The visit each task slot is at now, and ``{history seq: visit}`` of the outputs the
    backward moves kept (``history_seq``): what a view shows next to those rows."""
    trav = Traversal(n, None, True)
    kept: dict[int, int] = {}
    for index, row in enumerate(ledger):
        if row.operation in BACKWARD_OPS and row.to_seq is not None:
            for seq in range(row.to_seq, min(row.from_seq, n)):
                kept[history_seq(index, n, seq)] = trav.visits[seq]
        trav.apply(row.operation, row.from_seq, row.to_seq, row.reason)
    return trav.visits, kept


def attempt_visit(task_run_id: str) -> int:
    """The visit an attempt row belongs to (revisits' ids end in ``#visit``)."""
    _, sep, tail = task_run_id.rpartition("#")
    return int(tail) if sep and tail.isdigit() else 0


def handoffs_label(total: int, by_operation: dict[str, int] | None = None) -> str:
    """`` handoffs=N`` for a summary line, with the split by operation once a backward move is
    among them (`` handoffs=5 (forward=1 rewind=3 retry_all=1)``); "" for none."""
    if not total:
        return ""
    ops = by_operation or {}
    if any(op != "forward" for op in ops):
        return f" handoffs={total} (" + " ".join(f"{op}={n}" for op, n in sorted(ops.items())) + ")"
    return f" handoffs={total}"


def visit_id(task_run_id: str, visit: int) -> str:
    """The id of a revisit's attempt rows: ``pipeline:seq#visit`` (the first visit keeps the slot id)."""
    return f"{task_run_id}#{visit}" if visit else task_run_id
