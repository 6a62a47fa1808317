"""The write path: write-through checkpoints, write-behind history, and --no-write-behind."""

from __future__ import annotations

import asyncio

from pyattacker.model import AttemptRecord, Batch, EventRecord
from pyattacker.store.recorder import Recorder
from pyattacker_plugins.store_memory import MemoryStore


def _attempt() -> AttemptRecord:
    return AttemptRecord(
        run_id="r", pipeline_id="p", task_run_id="p:0", task_name="t", seq=0, attempt=1,
        started_at=0.0, ended_at=1.0, duration_ms=1.0, outcome="failed",
    )  # fmt: skip


def test_history_is_written_behind_until_a_checkpoint_or_a_full_batch() -> None:
    store = MemoryStore()
    rec = Recorder(store, write_behind=True, batch_size=3, flush_interval=3600)

    async def main() -> None:
        rec.attempt(_attempt())
        rec.event(EventRecord(ts=0.0, kind="x", scope="run"))
        await asyncio.sleep(0)
        assert store.commits == 0  # buffered
        await rec.checkpoint()  # a checkpoint carries the buffered history with it
        assert store.commits == 1 and len(store.page("attempts")) == 1
        for _ in range(3):
            rec.event(EventRecord(ts=0.0, kind="y", scope="run"))
        await asyncio.sleep(0)
        assert len(store.page("events")) == 4  # the full batch was flushed by itself

    asyncio.run(main())


def test_no_write_behind_commits_each_fact_before_returning() -> None:
    store = MemoryStore()
    rec = Recorder(store, write_behind=False)
    rec.attempt(_attempt())
    assert store.commits == 1 and len(store.page("attempts")) == 1
    rec.event(EventRecord(ts=0.0, kind="x", scope="run"))
    assert store.commits == 2 and len(store.page("events")) == 1


def test_no_write_behind_commits_an_attempt_while_a_group_commit_is_scheduled() -> None:
    store = MemoryStore()
    rec = Recorder(store, write_behind=False)

    async def main() -> None:
        ticket = rec.commit_ticket()  # a group commit is scheduled, not yet run
        rec.attempt(_attempt())
        assert store.commits == 1 and len(store.page("attempts")) == 1  # not left to the commit
        await ticket

    asyncio.run(main())


def test_checkpoints_in_one_loop_turn_share_one_commit() -> None:
    store = MemoryStore()
    rec = Recorder(store)

    async def one(i: int) -> None:
        batch = Batch()
        batch.attempts.append(_attempt())
        await rec.checkpoint(batch)

    async def main() -> None:
        await asyncio.gather(*(one(i) for i in range(10)))

    asyncio.run(main())
    assert store.commits == 1 and len(store.page("attempts")) == 10
