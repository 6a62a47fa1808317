"""Visit numbers on exported rows (pipelines with backward moves re-enter tasks).

Derived from each pipeline's control ledger (``pyattacker.flow.visits``), read a page of
pipelines at a time beside the rows: a pipeline without a ledger is at visit 0 everywhere and
costs no computation.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import msgspec

from pyattacker.flow.visits import slot_visits, visit_numbers
from pyattacker.model import HandoffRecord

__all__ = ["Visits", "ledger_rows", "with_artifact_visits", "with_task_visits"]


def ledger_rows(ledger: list[HandoffRecord], n: int) -> list[dict[str, Any]]:
    """The ledger as export rows, each with ``from_visit`` and ``to_visit``."""
    out = []
    for h, (src, dest) in zip(ledger, visit_numbers(ledger, n), strict=True):
        row = msgspec.structs.asdict(h)
        row["from_visit"], row["to_visit"] = src, dest
        out.append(row)
    return out


class Visits:
    """Visits of the pipelines whose ledgers were read (``ledgers``: ``{pipeline_id: rows}``)."""

    def __init__(self, ledgers: dict[str, list[HandoffRecord]], sizes: dict[str, int]) -> None:
        self._slots: dict[str, tuple[list[int], dict[int, int]]] = {}
        for pid, ledger in ledgers.items():
            if any(h.operation in ("rewind", "retry_all") for h in ledger):
                self._slots[pid] = slot_visits(
                    ledger, max(sizes.get(pid, 0), 1 + max(h.from_seq for h in ledger))
                )

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
        yield row


def with_artifact_visits(store: Any, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Artifact rows (a page), each given ``visit`` (None: the seed or a handed-over entry)."""
    visits = _visits_for(store, {r["pipeline_id"] for r in rows})
    for row in rows:
        row["visit"] = visits.artifact(row["pipeline_id"], row["seq"])
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
