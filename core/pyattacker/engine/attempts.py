"""Attempt numbers, reserved before task code runs: gaps possible, reuse impossible.

An attempt's number seeds its ``ctx.rng``/``ctx.seed``, so an attempt killed with its process
must not come back under the same number (it would draw the same "random" request again). A
commit per attempt would reserve each number but cost every task a commit; the commits a
pipeline makes anyway carry the reservations instead:

* attempt 1 of a slot (or of a visit) starts after the commit that moved the pipeline there (a
  checkpoint, a handoff, a backward move);
* attempt ``k + 1`` (a retry) starts after the commit carrying attempt ``k``'s row (the retry
  waits for it: failures only, never a successful task);
* the first attempt of a resumed slot starts after a commit carrying its number (the slot's task
  row, ``running``, with ``attempts_used`` = that number) and the pipeline row (``running``).

So a number that may have started is at most one above what is durable. A resume numbers the
slot after the highest recorded attempt, plus one more when the run before did not end the
pipeline itself (no ``finished_at``: it was killed, and may have been running that number).
"""

from __future__ import annotations

from pyattacker.engine.checkpoint import snapshot
from pyattacker.engine.state import PipelineState, RunState
from pyattacker.flow.visits import visit_id
from pyattacker.model import TaskRecord

__all__ = ["CLEAN", "KILLED", "reserve"]

#: ``PipelineState.reserve``: the run before ended the pipeline itself (every attempt recorded)
CLEAN = 1
#: ... or it was killed, and may have been running an attempt no row records
KILLED = 2


def reserve(run: RunState, state: PipelineState) -> None:
    """Number the next attempt of a resumed pipeline's slot and stage its reservation: the
    caller runs the pipeline once the commit carrying it is durable."""
    key = state.spec.key
    seq = state.seq
    slot = f"{key}:{seq}"
    traversal = state.traversal
    attempt_id = slot if traversal is None else visit_id(slot, traversal.visits[seq])
    recorded, used = run.store.attempt_numbers(key, attempt_id, slot)
    high = max(recorded + (1 if state.reserve == KILLED else 0), used)
    state.attempt = state.attempt_base = high
    state.reserve = 0
    now = run.wall()
    assert run.recorder is not None
    batch = run.recorder.pending
    batch.tasks.append(
        TaskRecord(
            task_run_id=slot,
            pipeline_id=key,
            run_id=run.run_id,
            name=state.tasks[seq].name,
            seq=seq,
            state="running",
            attempts_used=high + 1,
            started_at=now,
            resource=state.tasks[seq].resource,
        )
    )
    batch.pipelines.append(snapshot(state.record))
    state.row_written = True
