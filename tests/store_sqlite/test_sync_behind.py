"""``synchronous=full`` syncs the log behind the writer: a commit is acknowledged only after a sync
that began after it was written, commits written during a sync share the next one, a failed
sync fails every commit from then on, and the runner starts no task before its predecessor's
sync (and goes on with other pipelines meanwhile). Real SQLite files; the sync is the real
``fdatasync`` wrapped to log or to block."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from pyattacker import Runner, task
from pyattacker import pipeline as chain
from pyattacker.errors import StoreUnavailable
from pyattacker.model import Batch, EventRecord
from pyattacker.store.recorder import Recorder
from pyattacker_plugins import sync_behind
from pyattacker_plugins.store_memory import MemoryStore
from pyattacker_plugins.store_sqlite import SqliteStore
from pyattacker_plugins.sync_behind import SyncBehind
from tests.support.runner import seeds
from tests.support.store_contract import batch_of, commit, pipeline

_real_sync = sync_behind._sync_data


class _Gate:
    """Stands in for ``fdatasync``: logs, optionally holds each sync until released, then syncs
    for real (or raises)."""

    def __init__(
        self,
        log: list[tuple[Any, ...]],
        *,
        hold: bool = False,
        error: OSError | None = None,
        once_started: bool = False,
    ) -> None:
        self.log = log
        self.calls = 0
        self.entered = threading.Event()
        self.release = threading.Event()
        if not hold:
            self.release.set()
        self.error = error
        #: hold or fail only the syncs that begin once a task has started (not the run's own
        #: synchronous commits before its first task)
        self.once_started = once_started

    def __call__(self, fd: int) -> None:
        self.calls += 1
        self.log.append(("sync-start", self.calls))
        if not self.once_started or any(e[0] == "start" for e in self.log):
            self.entered.set()
            self.release.wait()
            if self.error is not None:
                raise self.error
        _real_sync(fd)
        self.log.append(("sync-end", self.calls))


def _gate(monkeypatch: pytest.MonkeyPatch, log: list[tuple[Any, ...]], **kwargs: Any) -> _Gate:
    """Syncs on the thread (whose ``fdatasync`` this wraps), not in the helper process: these
    tests are about what the store and the runner do around a sync, which both keep alike
    (the helper's own tests are in ``test_sync_helper.py``)."""
    gate = _Gate(log, **kwargs)
    monkeypatch.setattr(sync_behind, "USE_HELPER", False)
    monkeypatch.setattr(sync_behind, "_sync_data", gate)
    return gate


def _full(path: Path) -> SqliteStore:
    return SqliteStore.open_writer(str(path), "full")


def _level(store: SqliteStore) -> int:
    return int(store._db().execute("PRAGMA synchronous").fetchone()[0])


def test_normal_has_no_sync_thread_and_full_takes_over_after_its_first_commit(tmp_path: Path) -> None:
    normal = SqliteStore.open_writer(str(tmp_path / "n.db"), "normal")
    try:
        assert normal.sync_behind is None
        assert normal.commit_behind(batch_of(pipelines=[pipeline("p1")])) is None
    finally:
        normal.close()
    store = _full(tmp_path / "f.db")
    try:
        assert store.sync_behind is not None and _level(store) == 2  # FULL: SQLite syncs
        assert store.commit_behind(batch_of(pipelines=[pipeline("p1")])) is None  # synced by SQLite
        assert store.sync_behind.opened and _level(store) == 1  # from now on: the thread syncs
        pending = store.commit_behind(batch_of(pipelines=[pipeline("p2")]))
        assert isinstance(pending, Future)
        pending.result(timeout=30)
        assert store.sync_behind.syncs == 1
    finally:
        store.close()


def test_commits_written_during_a_sync_share_the_next_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log: list[tuple[Any, ...]] = []
    gate = _gate(monkeypatch, log, hold=True)
    store = _full(tmp_path / "f.db")
    try:
        commit(store, pipelines=[pipeline("p0")])
        first = store.commit_behind(batch_of(pipelines=[pipeline("p1")]))
        assert first is not None and gate.entered.wait(30)
        later = [store.commit_behind(batch_of(pipelines=[pipeline(f"q{i}")])) for i in range(5)]
        assert not first.done() and not any(f is None or f.done() for f in later)
        gate.release.set()
        for fut in [first, *later]:
            assert fut is not None
            fut.result(timeout=30)
        assert (store.sync_behind.syncs, store.sync_behind.covered) == (2, 6)  # type: ignore[union-attr]
        assert log == [("sync-start", 1), ("sync-end", 1), ("sync-start", 2), ("sync-end", 2)]
    finally:
        store.close()


def test_commit_returns_only_after_its_sync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The synchronous ``commit`` (end of run, heartbeat) waits for the thread's sync."""
    log: list[tuple[Any, ...]] = []
    gate = _gate(monkeypatch, log, hold=True)
    store = _full(tmp_path / "f.db")
    try:
        commit(store, pipelines=[pipeline("p0")])

        def write() -> None:
            commit(store, pipelines=[pipeline("p1")])
            log.append(("returned",))

        writer = threading.Thread(target=write)
        writer.start()
        assert gate.entered.wait(30)
        writer.join(0.3)  # (it must still be waiting; if it were not, it would log before the sync)
        gate.release.set()
        writer.join(30)
        assert log == [("sync-start", 1), ("sync-end", 1), ("returned",)]
    finally:
        store.close()


def test_a_failed_sync_fails_that_commit_and_every_later_one_without_syncing_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log: list[tuple[Any, ...]] = []
    gate = _gate(monkeypatch, log, error=OSError(5, "Input/output error"))
    store = _full(tmp_path / "f.db")
    try:
        commit(store, pipelines=[pipeline("p0")])
        written_not_synced = r"f\.db: commit written but not made durable.*Input/output"
        with pytest.raises(StoreUnavailable, match=written_not_synced):
            commit(store, pipelines=[pipeline("p1")])
        for i in range(3):
            with pytest.raises(StoreUnavailable, match="not made durable"):
                commit(store, pipelines=[pipeline(f"q{i}")])
        assert gate.calls == 1  # never retried: after a failed fsync, a later success proves nothing
    finally:
        store.close()


def test_a_log_that_cannot_be_opened_leaves_the_syncs_to_sqlite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(self: SyncBehind) -> None:
        raise PermissionError(13, "Permission denied", self.path)

    monkeypatch.setattr(SyncBehind, "open", refuse)
    store = _full(tmp_path / "f.db")
    try:
        assert store.commit_behind(batch_of(pipelines=[pipeline("p1")])) is None
        assert store.sync_behind is None and _level(store) == 2  # SQLite's FULL, as before
        assert store.commit_behind(batch_of(pipelines=[pipeline("p2")])) is None
    finally:
        store.close()


def test_the_thread_ends_with_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sync_behind, "USE_HELPER", False)  # (the helper's end: test_sync_helper.py)
    store = _full(tmp_path / "f.db")
    commit(store, pipelines=[pipeline("p0")])
    commit(store, pipelines=[pipeline("p1")])
    assert any(t.name == "pyattacker-sync" for t in threading.enumerate())
    store.close()
    assert not any(t.name == "pyattacker-sync" for t in threading.enumerate())
    assert not os.path.exists(f"{tmp_path / 'f.db'}-wal")  # closed and cleaned up as before


class _Logging(SqliteStore):
    """A SQLite store whose group commits log the task rows they wrote."""

    log: list[tuple[Any, ...]]

    def commit_behind(self, batch: Batch) -> Future[None] | None:
        pending = super().commit_behind(batch)
        for t in batch.tasks:
            self.log.append(("written", t.pipeline_id, t.seq))
        return pending


def _logging_store(path: Path, log: list[tuple[Any, ...]]) -> SqliteStore:
    store = _Logging.open_writer(str(path), "full")
    store.log = log
    return store


class _Forwarding:
    """A wrapper that forwards every attribute to a store and counts the commits it sees."""

    def __init__(self, inner: SqliteStore) -> None:
        self._inner = inner
        self.commits = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def commit(self, batch: Batch) -> None:
        self.commits += 1
        self._inner.commit(batch)


def test_a_forwarding_wrapper_sees_every_commit(tmp_path: Path) -> None:
    """The recorder looks ``commit_behind`` up on the class: a wrapper that forwards attributes
    (like the fault harness's store) is not bypassed by the store's own ``commit_behind``."""
    inner = _full(tmp_path / "f.db")
    wrapper = _Forwarding(inner)
    step = _starts([])
    with Runner(store=wrapper, concurrency=4, handle_signals=False) as r:
        assert r.run(chain("p", step, step.with_overrides(name="b")).map(seeds(10))).succeeded == 10
    assert wrapper.commits >= 20 // 4  # the group commits went through the wrapper
    assert inner.sync_behind is not None and inner.sync_behind.syncs >= 1  # ...and were synced behind


def _starts(log: list[tuple[Any, ...]]) -> Any:
    @task
    async def step(x: Any, ctx: Any) -> Any:
        log.append(("start", ctx.pipeline_id, ctx.seq))
        return x

    return step


@pytest.mark.parametrize("concurrency, n", [(1, 3), (8, 40)])
def test_no_task_starts_before_a_sync_that_began_after_its_predecessor_was_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, concurrency: int, n: int
) -> None:
    log: list[tuple[Any, ...]] = []
    _gate(monkeypatch, log)
    step = _starts(log)
    store = _logging_store(tmp_path / "f.db", log)
    with Runner(store=store, concurrency=concurrency, handle_signals=False) as r:
        flow = chain("p", step, step.with_overrides(name="b"), step.with_overrides(name="c"))
        assert r.run(flow.map(seeds(n))).succeeded == n
    checked = 0
    for i, entry in enumerate(log):
        if entry[0] != "start" or entry[2] == 0:
            continue
        written = log.index(("written", entry[1], entry[2] - 1))
        syncs_before = {e[1] for e in log[written:i] if e[0] == "sync-start"}
        ended_before = {e[1] for e in log[written:i] if e[0] == "sync-end"}
        assert syncs_before & ended_before, f"{entry} started before its predecessor was synced"
        checked += 1
    assert checked == 2 * n


def test_the_worker_runs_another_pipeline_while_a_sync_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One worker, the thread's first sync held: both pipelines' first tasks run (the worker
    does not wait for the disk), no second task runs until the sync is let go."""
    log: list[tuple[Any, ...]] = []
    gate = _gate(monkeypatch, log, hold=True, once_started=True)
    step = _starts(log)
    store = _logging_store(tmp_path / "f.db", log)
    result: list[int] = []

    def run() -> None:
        with Runner(store=store, concurrency=1, handle_signals=False) as r:
            result.append(r.run(chain("p", step, step.with_overrides(name="b")).map(seeds(2))).succeeded)

    runner = threading.Thread(target=run)
    runner.start()
    assert gate.entered.wait(30)
    deadline = time.monotonic() + 30  # (a deadline, not a timing assertion)
    while sum(e[0] == "start" for e in log) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    runner.join(0.3)  # room for a second task that must not start
    held = [e for e in log if e[0] == "start"]
    gate.release.set()
    runner.join(60)
    assert result == [2]
    assert [e[2] for e in held] == [0, 0] and held[0][1] != held[1][1]


def test_a_failed_sync_stops_the_run_before_any_later_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log: list[tuple[Any, ...]] = []
    _gate(monkeypatch, log, error=OSError(28, "No space left on device"), once_started=True)
    step = _starts(log)
    store = _logging_store(tmp_path / "f.db", log)
    with (
        Runner(store=store, concurrency=1, handle_signals=False) as r,
        pytest.raises(StoreUnavailable, match="No space left"),
    ):
        r.run(chain("p", step, step.with_overrides(name="b")).map(seeds(1)))
    assert {e[2] for e in log if e[0] == "start"} == {0}


class _Later(MemoryStore):
    """A memory store whose group commits are applied at once and made durable when the test
    resolves their futures (in any order); a synchronous ``commit`` returns durable."""

    def __init__(self) -> None:
        super().__init__()
        self.later: list[Future[None]] = []

    def commit_behind(self, batch: Batch) -> Future[None] | None:
        super().commit(batch)
        fut: Future[None] = Future()
        self.later.append(fut)
        return fut


class _Sink:
    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.closed = False

    def handle(self, events: list[EventRecord]) -> None:
        assert not self.closed, "events after close"
        self.batches.append([e.kind for e in events])

    def close(self) -> None:
        self.closed = True


def _event(kind: str) -> EventRecord:
    return EventRecord(ts=0.0, kind=kind, scope="run")


async def _group_commit(rec: Recorder, kind: str) -> asyncio.Future[None]:
    """One event of ``kind`` and a ticket, and the loop turn whose group commit takes them."""
    rec.event(_event(kind))
    ticket = rec.commit_ticket()
    await asyncio.sleep(0)
    return ticket


def test_commits_made_durable_out_of_order_are_settled_in_commit_order() -> None:
    """Waiters of a later commit are not woken, and its events not handed out, before every
    earlier commit is durable too."""
    store = _Later()
    sink = _Sink()
    rec = Recorder(store, sinks=[sink])

    async def main() -> None:
        tickets = []
        for k in ("a", "b", "c"):
            rec.event(_event(k))
            tickets.append(rec.commit_ticket())
            await asyncio.sleep(0)  # one group commit each
        assert len(store.later) == 3 and not any(t.done() for t in tickets)
        store.later[2].set_result(None)
        store.later[1].set_result(None)
        for _ in range(5):
            await asyncio.sleep(0)
        assert not any(t.done() for t in tickets) and sink.batches == []
        store.later[0].set_result(None)
        for _ in range(5):
            await asyncio.sleep(0)
        assert all(t.done() for t in tickets) and sink.batches == [["a"], ["b"], ["c"]]

    asyncio.run(main())


def test_a_ticket_with_nothing_new_waits_for_the_commit_still_syncing() -> None:
    store = _Later()
    rec = Recorder(store)

    async def main() -> None:
        first = await _group_commit(rec, "a")  # committed, not yet durable
        second = rec.commit_ticket()  # nothing pending: it still means "all so far is durable"
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert len(store.later) == 1 and not first.done() and not second.done()
        store.later[0].set_result(None)
        await asyncio.wait_for(asyncio.gather(first, second), 30)

    asyncio.run(main())


def test_the_last_synchronous_flush_settles_every_commit_before_it() -> None:
    """A run's last flush is a synchronous commit: the events of group commits made durable
    before it reach the sinks before it returns (and so before the sinks are closed), even if
    the loop never ran their callbacks."""
    store = _Later()
    sink = _Sink()
    rec = Recorder(store, sinks=[sink])

    async def main() -> None:
        await _group_commit(rec, "grouped")
        assert len(store.later) == 1
        store.later[0].set_result(None)  # durable; its callback is queued on the loop, not run
        rec.event(_event("last"))
        rec.flush()
        rec.close_sinks()
        assert sink.batches == [["grouped"], ["last"]]
        await asyncio.sleep(0)  # the queued callback finds nothing left to do

    asyncio.run(main())


def test_a_cancelled_sync_fails_its_waiters_and_the_later_commits() -> None:
    store = _Later()
    rec = Recorder(store)

    async def main() -> None:
        ticket = await _group_commit(rec, "a")
        store.later[0].cancel()
        with pytest.raises(StoreUnavailable, match="cancelled a sync"):
            await asyncio.wait_for(ticket, 30)
        with pytest.raises(StoreUnavailable):
            rec.commit_ticket()

    asyncio.run(main())


def test_a_sync_that_ends_after_the_loop_closed_is_dropped_quietly(caplog: pytest.LogCaptureFixture) -> None:
    """A commit still syncing when its loop closed (nothing waits on it any more) does not make
    the sync thread's callback raise (``concurrent.futures`` would log that as an error)."""
    store = _Later()
    rec = Recorder(store)

    async def main() -> None:
        await _group_commit(rec, "a")

    asyncio.run(main())
    with caplog.at_level(logging.DEBUG):
        store.later[0].set_result(None)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_a_commit_made_durable_on_the_loops_own_thread_does_not_wake_the_loop() -> None:
    """The sync helper's answers are read on the loop's thread: the recorder then schedules its
    settling with ``call_soon`` (no wake-up of the loop through its self-pipe); a commit made
    durable on another thread (the sync thread) still goes through ``call_soon_threadsafe``."""
    store = _Later()
    rec = Recorder(store)
    woken: list[str] = []

    async def main() -> None:
        loop = asyncio.get_running_loop()
        real = loop.call_soon_threadsafe

        def counting(*args: Any, **kwargs: Any) -> Any:
            woken.append("threadsafe")
            return real(*args, **kwargs)

        loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
        first = await _group_commit(rec, "a")
        store.later[0].set_result(None)  # on the loop's thread
        await asyncio.wait_for(first, 30)
        assert woken == []
        second = await _group_commit(rec, "b")
        resolver = threading.Thread(target=store.later[1].set_result, args=(None,))
        resolver.start()
        resolver.join(30)
        await asyncio.wait_for(second, 30)
        assert woken == ["threadsafe"]

    asyncio.run(main())
