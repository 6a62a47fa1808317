"""``RunRepair``: what a run that died left marked ``running`` is marked ``interrupted``.

A writer holds the lock, so every other run recorded as running is dead. Its pipelines, tasks
and run row are marked interrupted before the new run starts, in one transaction.
"""

from __future__ import annotations

import sqlite3

from pyattacker.errors import StoreUnavailable

from . import schema
from .connection import StoreConnection

__all__ = ["RunRepair"]

#: Rows a dead run left ``running``, found through ``pipelines_by_run_state`` one run at a time:
#: the run ids come from a skip scan of that index (one seek per distinct run), so the cost
#: follows the number of runs and stale rows, not the size of the store (a plain
#: ``WHERE state = 'running' AND run_id != ?`` scans every pipeline at every run start).
_INTERRUPT_PIPELINES = (
    "UPDATE pipelines INDEXED BY pipelines_by_run_state SET state = 'interrupted'"
    " WHERE state = 'running' AND run_id IN ("
    " WITH RECURSIVE run_ids(id) AS ("
    "  SELECT (SELECT min(run_id) FROM pipelines)"
    "  UNION ALL"
    "  SELECT (SELECT min(run_id) FROM pipelines WHERE run_id > run_ids.id) FROM run_ids"
    "  WHERE run_ids.id IS NOT NULL)"
    " SELECT id FROM run_ids WHERE id IS NOT NULL AND id != ?)"
)  # (the statement starts with UPDATE so that ``rowcount`` counts its changes; INDEXED BY:
#    once ``PRAGMA optimize`` has analysed a store whose pipelines all sit in one run and one
#    state, the statistics call the index useless and the planner would scan the table)
#: task rows are looked at only in a file marked as possibly holding running ones (see schema)
_TASKS_MARKED = f"SELECT 1 FROM store_meta WHERE key = '{schema.TASKS_RUNNING_KEY}'"
_INTERRUPT_TASKS = "UPDATE tasks SET state = 'interrupted' WHERE state = 'running' AND run_id != ?"
_STILL_RUNNING = "SELECT 1 FROM tasks WHERE state = 'running' LIMIT 1"
_UNMARK_TASKS = f"DELETE FROM store_meta WHERE key = '{schema.TASKS_RUNNING_KEY}'"


class RunRepair(StoreConnection):
    """``interrupt_running``: the rows of dead runs still marked running, marked interrupted."""

    def interrupt_running(self, run_id: str, now: float) -> int:
        """Mark rows left ``running`` by other (dead: we hold the lock) runs interrupted."""
        with self._mutex:
            conn = self._writer()
            try:
                conn.execute("BEGIN IMMEDIATE")
                changed = conn.execute(_INTERRUPT_PIPELINES, (run_id,)).rowcount
                if conn.execute(_TASKS_MARKED).fetchone() is not None:
                    conn.execute(_INTERRUPT_TASKS, (run_id,))
                    if conn.execute(_STILL_RUNNING).fetchone() is None:  # (only ``run_id``'s may remain)
                        conn.execute(_UNMARK_TASKS)
                conn.execute(
                    "UPDATE runs SET status = 'interrupted',"
                    " ended_at = CASE WHEN ended_at IS NULL OR ended_at = 0 THEN ? ELSE ended_at END"
                    " WHERE status = 'running' AND run_id != ?",
                    (now, run_id),
                )
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback(conn)
                raise StoreUnavailable(f"store {self.path}: interrupt_running failed: {exc}") from exc
            return int(changed)
