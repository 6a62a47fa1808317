"""A worker does not wait through a group commit: the pipeline whose checkpoint is being made
durable waits off the worker, which runs another pipeline's task meanwhile. What must hold is
per pipeline: its next task starts only once the previous task's checkpoint is committed."""

from __future__ import annotations

import asyncio
import random
import sqlite3
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from pyattacker import FatalError, Runner, pipeline, task
from pyattacker.engine.outcomes import Outcomes
from pyattacker.errors import StoreUnavailable
from pyattacker.model import Batch
from pyattacker_plugins.store_memory import MemoryStore
from tests.support.runner import events, rows, seeds, vrunner


class _Log(MemoryStore):
    """A memory store that logs each commit's task rows, in the order of everything else."""

    def __init__(self, log: list[tuple[str, ...]], fail_with_task: int | None = None) -> None:
        super().__init__()
        self.log = log
        #: the commit that carries this many task rows in all (counting it) fails
        self.fail_with_task = fail_with_task
        self.tasks = 0

    def commit(self, batch: Batch) -> None:
        before, self.tasks = self.tasks, self.tasks + len(batch.tasks)
        if self.fail_with_task is not None and before < self.fail_with_task <= self.tasks:
            raise OSError("disk gone")
        super().commit(batch)
        for t in batch.tasks:
            self.log.append(("durable", t.pipeline_id, str(t.seq)))


def _logging_step(log: list[tuple[str, ...]]) -> Any:
    """A task that logs its pipeline and seq when it starts, and passes its input on."""

    @task
    async def step(x: Any, ctx: Any) -> Any:
        log.append(("start", ctx.pipeline_id, str(ctx.seq)))
        return x

    return step


def test_one_worker_runs_another_pipeline_while_a_checkpoint_commits() -> None:
    """Concurrency 1, two pipelines of two tasks: the worker starts the second pipeline's first
    task while the first one's checkpoint waits for its commit, and each pipeline's second task
    starts only after its first task is durable."""
    log: list[tuple[str, ...]] = []
    step = _logging_step(log)

    store = _Log(log)
    with vrunner(store, concurrency=1) as r:
        assert r.run(pipeline("p", step, step.with_overrides(name="again")).map(seeds(2))).succeeded == 2
    starts = [(pid, seq) for what, pid, seq in log if what == "start"]
    first, second = starts[0][0], starts[1][0]
    assert first != second  # the worker moved on after the first checkpoint
    assert starts == [(first, "0"), (second, "0"), (first, "1"), (second, "1")]
    for what, pid, seq in log:
        if what == "start" and seq == "1":
            assert log.index(("durable", pid, "0")) < log.index((what, pid, seq))


def test_every_task_starts_after_its_predecessor_is_in_the_file(tmp_path: Path) -> None:
    """A real SQLite file and a reader of its own: whenever a task after the first starts, the
    row of the task before it is already committed, with many pipelines interleaving."""
    path = tmp_path / "s.db"
    seen: list[tuple[str, int, bool]] = []
    reader: list[sqlite3.Connection] = []
    rng = random.Random(7)

    @task
    async def step(x: Any, ctx: Any) -> Any:
        if ctx.seq:
            if not reader:
                reader.append(sqlite3.connect(f"file:{path}?mode=ro", uri=True))
            row = (
                reader[0]
                .execute(
                    "SELECT state FROM tasks_full WHERE pipeline_id = ? AND seq = ?",
                    (ctx.pipeline_id, ctx.seq - 1),
                )
                .fetchone()
            )
            seen.append((ctx.pipeline_id, ctx.seq, row == ("succeeded",)))
        await asyncio.sleep(rng.choice((0.0, 0.0005, 0.001)))
        return x

    tasks = [step.with_overrides(name=f"t{k}") for k in range(3)]
    try:
        with Runner(store=str(path), concurrency=8, handle_signals=False) as r:
            assert r.run(pipeline("p", *tasks).map(seeds(60))).succeeded == 60
    finally:
        for conn in reader:
            conn.close()
    assert len(seen) == 120 and all(durable for _, _, durable in seen)


@pytest.mark.parametrize("concurrency, n", [(1, 1), (2, 6)])
def test_a_commit_that_fails_while_pipelines_wait_for_it_stops_the_run(concurrency: int, n: int) -> None:
    """The pipelines waiting for a failed commit are not left waiting (with one worker and one
    pipeline nobody else would notice: the worker is idle), and no task of theirs runs after it:
    the run stops as for any store failure."""
    log: list[tuple[str, ...]] = []
    step = _logging_step(log)

    store = _Log(log, fail_with_task=1)
    chain = pipeline("p", step, step.with_overrides(name="b"), step.with_overrides(name="c"))
    with vrunner(store, concurrency=concurrency) as r, pytest.raises(StoreUnavailable):
        r.run(chain.map(seeds(n)))
    assert [entry for entry in log if entry[0] == "durable"] == []
    assert {seq for what, _, seq in log if what == "start"} == {"0"}  # no second task ran


class _HeldSync(MemoryStore):
    """A memory store whose group commits are applied at once but made durable only when the
    test says (``commit_behind``, as the SQLite store with ``synchronous=full`` does)."""

    def __init__(self) -> None:
        super().__init__()
        self.held: list[Future[None]] = []
        self.waiting = threading.Event()

    def commit_behind(self, batch: Batch) -> Future[None] | None:
        super().commit(batch)
        fut: Future[None] = Future()
        self.held.append(fut)
        if batch.tasks:
            self.waiting.set()
        return fut

    def release(self) -> None:
        for fut in self.held:
            if not fut.done():
                fut.set_result(None)


def test_a_stop_that_cancels_a_worker_waiting_for_a_commit_is_not_a_store_failure() -> None:
    """Two pipelines checkpoint in the same group commit, which stays unsynced: the failed
    one-task pipeline's worker awaits it (a failure is recorded before its worker moves on), the
    two-task one waits off its worker. A stop whose grace runs out cancels that worker, and with
    it the shared commit future: the run ends stopped, both pipelines resumable (interrupted),
    not as a store failure."""
    store = _HeldSync()

    @task
    async def one(x: Any, ctx: Any) -> Any:
        return x

    @task
    async def fails(x: Any, ctx: Any) -> Any:
        raise FatalError("recorded before the worker moves on")

    specs = [
        pipeline("long", one, one.with_overrides(name="two")).bind({"i": 0}),
        pipeline("short", fails).bind({"i": 1}),
    ]
    runner = Runner(store=store, concurrency=2, handle_signals=False, grace_s=0.1)

    async def main() -> Any:
        run = asyncio.ensure_future(runner.run_async(specs))
        while not store.waiting.is_set():
            await asyncio.sleep(0.001)
        runner.stop("user")
        try:
            return await run
        finally:
            store.release()

    report = asyncio.run(main())
    assert report.stop_reason == "user"
    assert report.counters["pipelines_interrupted"] == 2, report.counters


def test_a_last_task_frees_its_worker_and_its_pipeline_succeeds_once_durable() -> None:
    """Concurrency 1, two one-task pipelines, group commits held unsynced: the worker starts
    the second pipeline's task while the first one's last checkpoint is not durable, and
    neither pipeline is reported finished until the test makes its commit durable."""
    store = _HeldSync()
    started: list[str] = []
    finished: list[str] = []

    @task
    async def one(x: Any, ctx: Any) -> Any:
        started.append(ctx.pipeline_id)
        return x

    runner = Runner(
        store=store,
        concurrency=1,
        handle_signals=False,
        on_pipeline_finished=lambda _r, record, _art: finished.append(record.pipeline_id),
    )

    async def main() -> Any:
        run = asyncio.ensure_future(runner.run_async(pipeline("p", one).map(seeds(2))))
        for _ in range(5000):  # a deadline for the old behaviour (the worker held by the commit)
            if (len(started) == 2 and store.held) or run.done():
                break
            await asyncio.sleep(0.001)
        for _ in range(10):  # turns of the loop in which nothing may finish while nothing is durable
            await asyncio.sleep(0)
        seen = (list(started), list(finished), [f.done() for f in store.held])
        while not run.done():
            store.release()
            await asyncio.sleep(0.001)
        return seen, await run

    (started_then, finished_then, synced_then), report = asyncio.run(main())
    assert len(started_then) == 2 and finished_then == [], (started_then, finished_then)
    assert synced_then and not any(synced_then)  # the first pipeline's commit was still held
    assert report.succeeded == 2 and sorted(finished) == sorted(started)


@pytest.mark.timeout(60)
def test_an_error_while_a_pipeline_succeeds_is_recorded_and_the_run_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pipeline succeeds in its group commit's callback, outside any worker: an internal error
    there is recorded (``runner.internal_error``, the pipeline failed) as a worker would record
    it, and the run ends instead of waiting for a pipeline that never finishes."""
    log: list[tuple[str, ...]] = []
    step = _logging_step(log)
    real = Outcomes.succeeded
    broken: list[str] = []

    def succeeded(self: Outcomes, state: Any, art: Any, **data: Any) -> None:
        if not broken:
            broken.append(state.spec.key)
            raise RuntimeError("a bug while succeeding")
        real(self, state, art, **data)

    monkeypatch.setattr(Outcomes, "succeeded", succeeded)
    store = _Log(log)
    with vrunner(store, concurrency=2) as r:
        report = r.run(pipeline("p", step).map(seeds(4)))
    assert (report.succeeded, report.failed) == (3, 1)
    (failed,) = [p for p in rows(store, "pipelines") if p.state == "failed"]
    assert failed.pipeline_id == broken[0] and failed.error_type == "RuntimeError"
    assert [e.pipeline_id for e in events(store, "runner.internal_error")] == broken
