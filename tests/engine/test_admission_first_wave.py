"""At high concurrency the first tasks start before the producer has filled the work queue: the
producer hands the loop to the workers after each looked-up chunk, so a run at concurrency
2,048 does not admit 4,096 pipelines (the queue's bound) before its first task begins."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pyattacker import Runner, pipeline, task
from pyattacker.engine.admission import LOOKUP_CHUNK
from pyattacker_plugins.store_memory import MemoryStore


def test_first_task_starts_after_one_chunk_not_a_full_queue() -> None:
    pulled = 0
    seen_at_first_task: list[int] = []

    def source(n: int) -> Iterator[int]:
        nonlocal pulled
        for i in range(n):
            pulled += 1
            yield i

    @task
    async def step(x: Any) -> Any:
        if not seen_at_first_task:
            seen_at_first_task.append(pulled)
        return x

    n = 5000
    with Runner(store=MemoryStore(), concurrency=2048) as runner:
        report = runner.run(pipeline("wave", step).map(source(n)))
    assert report.counters["pipelines_succeeded"] == n
    # one chunk looked up (and the next one read) before the loop goes to the workers
    assert seen_at_first_task[0] <= 2 * LOOKUP_CHUNK
