"""The sync helper process (``synchronous=full``, the JSONL store): it syncs the very file the
writer writes, a commit is acknowledged only once it answered, a helper that fails or dies
fails every commit it did not answer (and the run stops before any later task), it ends with
its store and with its writer's process, and a Ctrl-C at the terminal does not reach it.
Real SQLite files, real processes held and killed with real signals."""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
import resource
import signal
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import Future, TimeoutError
from pathlib import Path
from typing import Any

import pytest

from pyattacker import Runner, task
from pyattacker import pipeline as chain
from pyattacker.errors import StoreUnavailable
from pyattacker_plugins import sync_behind
from pyattacker_plugins.store_jsonl import JsonlStoreOpener
from pyattacker_plugins.store_sqlite import SqliteStore
from pyattacker_plugins.sync_behind import SyncBehind
from tests.support import REPO
from tests.support.runner import seeds
from tests.support.store_contract import batch_of, commit, pipeline

pytestmark = pytest.mark.skipif(os.name != "posix", reason="the helper runs on POSIX systems")

REPO = REPO


def _full(path: Path) -> SqliteStore:
    return SqliteStore.open_writer(str(path), "full")


def _gone(pid: int) -> bool:
    """The process has ended (a zombie that nobody reaps yet counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return "\nState:\tZ" in state


def _wait_gone(pid: int, deadline_s: float = 60.0) -> bool:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if _gone(pid):
            return True
        time.sleep(0.05)
    return False


def _helper_files(pid: int) -> set[str]:
    """The files the helper has open (its inherited descriptors), by path."""
    files = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            files.add(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue
    return files


def test_full_syncs_the_log_in_a_helper_process_that_ends_with_the_store(tmp_path: Path) -> None:
    store = _full(tmp_path / "f.db")
    try:
        commit(store, pipelines=[pipeline("p0")])  # synced by SQLite itself; the helper from now on
        assert store.sync_behind is not None and store.sync_behind.helper_pid is None
        pending = store.commit_behind(batch_of(pipelines=[pipeline("p1")]))
        assert isinstance(pending, Future)
        pid = store.sync_behind.helper_pid
        assert pid is not None and pid != os.getpid()
        # the very log the writer writes, inherited (not a path opened again)
        assert str(tmp_path / "f.db-wal") in _helper_files(pid)
        assert os.getsid(pid) != os.getsid(0)  # a session of its own: a Ctrl-C does not reach it
        pending.result(timeout=60)  # (outside a loop, waiting reads the helper's answers)
        commit(store, pipelines=[pipeline("p2")])  # the synchronous commit waits for its own
        assert (store.sync_behind.syncs, store.sync_behind.covered) == (2, 2)
        assert not any(t.name == "pyattacker-sync" for t in threading.enumerate())
    finally:
        store.close()
    assert _gone(pid)  # ended and reaped by close
    assert not os.path.exists(f"{tmp_path / 'f.db'}-wal")  # closed and cleaned up as before
    reopened = SqliteStore.open_reader(str(tmp_path / "f.db"))
    try:
        assert {p.pipeline_id for p in reopened.page("pipelines")} == {"p0", "p1", "p2"}
    finally:
        reopened.close()


def test_a_commit_is_acknowledged_only_once_the_helper_has_synced_it(tmp_path: Path) -> None:
    """A stopped helper syncs nothing: no commit written meanwhile is acknowledged; once it
    runs again, one sync covers them all, in the order they were written."""
    store = _full(tmp_path / "f.db")
    try:
        commit(store, pipelines=[pipeline("p0")])
        commit(store, pipelines=[pipeline("p1")])  # starts the helper
        syncer = store.sync_behind
        assert syncer is not None and syncer.helper_pid is not None
        os.kill(syncer.helper_pid, signal.SIGSTOP)
        try:
            held = [store.commit_behind(batch_of(pipelines=[pipeline(f"q{i}")])) for i in range(4)]
            with pytest.raises(TimeoutError):
                held[0].result(timeout=0.5)  # type: ignore[union-attr]
            assert not any(f is None or f.done() for f in held)
        finally:
            os.kill(syncer.helper_pid, signal.SIGCONT)
        settled: list[int] = []
        for i, fut in enumerate(held):
            assert fut is not None
            fut.add_done_callback(lambda _, i=i: settled.append(i))
        # waiting through ``exception`` reads the answers too (nobody else reads them here)
        assert held[0].exception(timeout=60) is None  # type: ignore[union-attr]
        held[-1].result(timeout=60)  # type: ignore[union-attr]
        assert all(f is not None and f.done() and f.exception() is None for f in held)
        assert settled == [0, 1, 2, 3]
        assert syncer.covered == 5 and syncer.syncs <= 3  # (the four held ones: one or two syncs)
    finally:
        store.close()


def test_a_helper_that_dies_fails_every_commit_it_did_not_answer(tmp_path: Path) -> None:
    store = _full(tmp_path / "f.db")
    try:
        commit(store, pipelines=[pipeline("p0")])
        commit(store, pipelines=[pipeline("p1")])
        syncer = store.sync_behind
        assert syncer is not None and syncer.helper_pid is not None
        pid = syncer.helper_pid
        os.kill(pid, signal.SIGSTOP)
        pending = store.commit_behind(batch_of(pipelines=[pipeline("p2")]))
        os.kill(pid, signal.SIGKILL)
        assert pending is not None
        with pytest.raises(OSError, match=rf"the sync helper \(pid {pid}\) ended before syncing"):
            pending.result(timeout=60)
        assert syncer.failed is not None
        with pytest.raises(StoreUnavailable, match=r"commit written but not made durable .*sync helper"):
            commit(store, pipelines=[pipeline("p3")])
    finally:
        store.close()


def test_a_failed_sync_is_reported_with_its_error_and_never_tried_again(tmp_path: Path) -> None:
    """A file that cannot be synced (a FIFO: ``fdatasync`` says EINVAL), through the real
    helper: its error comes back whole, every request after it fails without a sync."""
    fifo = tmp_path / "not-syncable"
    os.mkfifo(fifo)
    syncer = SyncBehind(str(fifo))
    syncer.open()
    try:
        first = syncer.request(1)
        assert syncer.helper_pid is not None
        with pytest.raises(OSError) as err:
            first.result(timeout=60)
        assert err.value.errno == 22 and "Invalid argument" in str(err.value)
        assert syncer.failed is err.value and syncer.syncs == 0 and syncer.synced_mark == 0
        later = syncer.request(2)
        assert later.done() and later.exception() is err.value
    finally:
        syncer.stop()


def test_the_jsonl_journal_is_synced_by_the_helper_up_to_its_end(tmp_path: Path) -> None:
    store = JsonlStoreOpener().open(str(tmp_path / "s"))
    try:
        commit(store, pipelines=[pipeline("p0")])
        syncer = store.sync_behind  # type: ignore[attr-defined]
        assert syncer is not None and syncer.helper_pid is not None
        pending = store.commit_behind(batch_of(pipelines=[pipeline("p1")]))  # type: ignore[attr-defined]
        assert pending is not None
        pending.result(timeout=60)
        # the mark a marker vouches with: everything up to the journal's end is synced
        assert syncer.synced_mark == store._end > 0  # type: ignore[attr-defined]
    finally:
        store.close()


def test_a_run_reads_the_helpers_answers_on_its_event_loop(tmp_path: Path) -> None:
    """A run on ``synchronous=full``: its group commits are acknowledged by the helper's
    answers, read by the run's own loop (no thread of this process syncs)."""
    seen: list[Any] = []
    store = _full(tmp_path / "f.db")

    @task
    async def step(x: Any, ctx: Any) -> Any:
        syncer = store.sync_behind
        if syncer is not None and syncer.helper_pid is not None:
            seen.append((syncer._watcher is asyncio.get_running_loop(), syncer.helper_pid))
        seen.append({t.name for t in threading.enumerate()})
        return x

    with Runner(store=store, concurrency=8, handle_signals=False) as r:
        result = r.run(chain("p", step, step.with_overrides(name="b")).map(seeds(60)))
    assert result.succeeded == 60
    watched = [s for s in seen if isinstance(s, tuple)]
    assert watched and all(on_loop for on_loop, _ in watched)
    assert not any("pyattacker-sync" in s for s in seen if isinstance(s, set))
    assert _gone(watched[0][1])


def test_a_helper_killed_during_a_run_stops_it_before_any_later_task(tmp_path: Path) -> None:
    started: list[tuple[str, int]] = []
    killed: list[str] = []
    store = _full(tmp_path / "f.db")

    @task
    async def step(x: Any, ctx: Any) -> Any:
        started.append((ctx.pipeline_id, ctx.seq))
        syncer = store.sync_behind
        if ctx.seq == 0 and not killed and syncer is not None and syncer.helper_pid is not None:
            os.kill(syncer.helper_pid, signal.SIGKILL)
            killed.append(ctx.pipeline_id)
            await asyncio.sleep(0.2)
        return x

    with (
        Runner(store=store, concurrency=1, handle_signals=False) as r,
        pytest.raises(StoreUnavailable, match=r"sync helper .* ended before syncing"),
    ):
        r.run(chain("p", step, step.with_overrides(name="b")).map(seeds(5)))
    # the task whose checkpoint the dead helper never synced had no successor, nor did any other
    assert len(killed) == 1
    assert started[-1] == (killed[0], 0) and (killed[0], 1) not in started


def test_the_helper_ends_when_its_writer_is_killed(tmp_path: Path) -> None:
    """SIGKILL of the writer's process closes the helper's request pipe: it ends on its own."""
    script = textwrap.dedent(
        f"""
        import sys, time
        sys.path[:0] = [{str(REPO / "tests")!r}]
        from pyattacker_plugins.store_sqlite import SqliteStore
        from tests.support.store_contract import commit, pipeline
        store = SqliteStore.open_writer({str(tmp_path / "k.db")!r}, "full")
        commit(store, pipelines=[pipeline("p0")])
        commit(store, pipelines=[pipeline("p1")])
        print(store.sync_behind.helper_pid, flush=True)
        time.sleep(600)
        """
    )
    writer = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None
        pid = int(writer.stdout.readline())
        assert not _gone(pid)
        writer.send_signal(signal.SIGKILL)
        writer.wait(60)
        assert _wait_gone(pid), f"helper {pid} outlived its writer"
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait(60)


def test_without_a_helper_the_thread_syncs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Where the helper cannot start, a thread syncs (as before the helper), and says why."""

    def refuse(*_args: Any, **_kwargs: Any) -> None:
        raise OSError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(sync_behind, "SyncHelper", refuse)
    store = _full(tmp_path / "f.db")
    try:
        with caplog.at_level(logging.WARNING, logger="pyattacker"):
            commit(store, pipelines=[pipeline("p0")])
            commit(store, pipelines=[pipeline("p1")])
        assert store.sync_behind is not None and store.sync_behind.helper_pid is None
        assert store.sync_behind.syncs == 1
        assert any(t.name == "pyattacker-sync" for t in threading.enumerate())
        assert "syncing on a thread (the sync helper did not start: [Errno 11]" in caplog.text
    finally:
        store.close()


def test_a_loop_that_cannot_watch_a_pipe_gets_the_thread() -> None:
    class ProactorEventLoop:  # (the name is what Windows' loop is known by)
        def add_reader(self, *_args: Any) -> None:
            raise NotImplementedError

    assert sync_behind._can_watch(None) and sync_behind._can_watch(asyncio.new_event_loop())
    assert not sync_behind._can_watch(ProactorEventLoop())
    assert not sync_behind._can_watch(object())


def test_answers_settle_only_the_oldest_requests_they_cover(tmp_path: Path) -> None:
    """The bookkeeping on the writer's side, fed through a real pipe: an answer settles as many
    of the oldest requests as it counts (not every request made so far), and an error line
    that arrives in pieces is read whole."""
    from pyattacker_plugins.sync_helper import SyncHelper

    answers_r, answers_w = os.pipe()
    requests_r, requests_w = os.pipe()
    os.set_blocking(answers_r, False)
    helper = SyncHelper.__new__(SyncHelper)
    helper.path, helper.answers, helper._requests, helper._partial = "x", answers_r, requests_w, b""
    helper._proc = subprocess.Popen([sys.executable, "-c", "pass"])  # type: ignore[assignment]
    syncer = SyncBehind(str(tmp_path / "x"))
    syncer._helper = helper
    try:
        first, second, third = (syncer.request(mark) for mark in (10, 20, 30))
        assert os.read(requests_r, 16) == b"rrr"  # one request byte each
        os.write(answers_w, b"k.")
        syncer._take_answers()
        assert first.done() and not second.done() and not third.done()
        assert (syncer.synced_mark, syncer.covered, syncer.syncs) == (10, 1, 1)
        os.write(answers_w, b"kk.")
        syncer._take_answers()
        assert second.done() and third.done() and (syncer.synced_mark, syncer.syncs) == (30, 2)
        fourth = syncer.request(40)
        os.write(answers_w, b"E5 Input/out")
        syncer._take_answers()
        assert not fourth.done() and syncer.failed is None  # half a line: nothing decided yet
        os.write(answers_w, b"put error\n")
        syncer._take_answers()
        error = fourth.exception(timeout=0)
        assert isinstance(error, OSError) and (error.errno, error.strerror) == (5, "Input/output error")
        assert syncer.failed is error and syncer.synced_mark == 30
    finally:
        os.close(answers_w)
        syncer.stop()
        os.close(requests_r)


@pytest.mark.parametrize("program", ["ends", "hangs"])
def test_an_executable_that_does_not_run_the_helper_leaves_the_syncs_to_the_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, program: str
) -> None:
    """``sys.executable`` of an application that embeds Python is not Python: the helper never
    says it runs (the program ends, or waits for something else). The store finds out before
    its first sync, stops that program and syncs on the thread; no commit waits for it."""
    from pyattacker_plugins import sync_helper

    pid_file = tmp_path / "pid"
    fake = tmp_path / "not-python"
    body = "exit 0" if program == "ends" else "exec sleep 600"
    fake.write_text(f"#!/bin/sh\necho $$ > {pid_file}\n{body}\n")
    fake.chmod(0o755)
    monkeypatch.setattr(sys, "executable", str(fake))
    monkeypatch.setattr(sync_helper, "GREETING_S", 0.5)
    store = _full(tmp_path / "f.db")
    try:
        with caplog.at_level(logging.WARNING, logger="pyattacker"):
            commit(store, pipelines=[pipeline("p0")])
            commit(store, pipelines=[pipeline("p1")])  # synced, by the thread
        assert store.sync_behind is not None and store.sync_behind.helper_pid is None
        assert store.sync_behind.syncs == 1
        why = "it ended" if program == "ends" else "no answer"
        assert f"syncing on a thread (the sync helper did not start: {fake} -I -S did not run" in caplog.text
        assert f"({why})" in caplog.text
        assert _wait_gone(int(pid_file.read_text()))  # not left behind
    finally:
        store.close()


def test_waiting_for_answers_works_on_a_pipe_numbered_above_1023(tmp_path: Path) -> None:
    """A run with many files open may give the answers' pipe a number ``select`` refuses: the
    wait must still block until the helper answers (``poll``), not return at once and spin."""
    from pyattacker_plugins.sync_helper import SyncHelper

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1100:
        pytest.skip(f"at most {hard} open files here")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1100), hard))
    r, w = os.pipe()
    high_r, high_w = (fcntl.fcntl(fd, fcntl.F_DUPFD, 1050) for fd in (r, w))  # (free numbers >= 1050)
    os.close(r)
    os.close(w)
    assert min(high_r, high_w) > 1023
    helper = SyncHelper.__new__(SyncHelper)
    helper.answers = high_r
    waiter = threading.Thread(target=SyncBehind._wait_readable, args=(helper, None))
    try:
        waiter.start()
        waiter.join(0.3)
        assert waiter.is_alive()  # still waiting: nothing was answered
        os.write(high_w, b"k.")
        waiter.join(30)
        assert not waiter.is_alive()
    finally:
        os.close(high_w)
        waiter.join(30)
        os.close(high_r)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_frozen_application_syncs_on_the_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A frozen application's ``sys.executable`` is the application itself: never started as
    the helper."""
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    store = _full(tmp_path / "f.db")
    try:
        commit(store, pipelines=[pipeline("p0")])
        commit(store, pipelines=[pipeline("p1")])
        assert store.sync_behind is not None and store.sync_behind.helper_pid is None
        assert store.sync_behind.syncs == 1
        assert any(t.name == "pyattacker-sync" for t in threading.enumerate())
    finally:
        store.close()
