"""``ForkedCall``: a function computed in a forked child, its errors, and its clean-up."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from pyattacker.shard.forking import (
    ForkedCall,
    ForkedCallError,
    fork_safe,
    parent_signals_held,
    single_threaded,
)

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")


def _pid_and(value: Any) -> tuple[int, Any]:
    return os.getpid(), value


def _raise(message: str) -> None:
    raise ValueError(message)


def _unpicklable() -> Any:
    return threading.Lock()


def _wait_for(path: str, then: str) -> str:
    """Mark that the child runs, then wait until the test lets it finish."""
    Path(path + ".running").write_text("1")
    deadline = time.monotonic() + 60
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.01)
    return then


def _gone(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return False


def test_the_value_is_computed_in_another_process_and_comes_back_whole() -> None:
    value = {"counts": {"succeeded": 3}, "durations": [1.5, 2.25], "big": "x" * 300_000}
    call = ForkedCall(_pid_and, value)
    pid, back = call.result()
    assert pid == call.pid and pid != os.getpid()
    assert back == value
    assert _gone(call.pid)  # reaped by result()


def test_an_exception_in_the_child_names_its_type_and_message() -> None:
    call = ForkedCall(_raise, "row 7 is corrupt")
    with pytest.raises(ForkedCallError, match=r"^ValueError: row 7 is corrupt$"):
        call.result()
    with pytest.raises(ForkedCallError, match=r"cannot be pickled"):
        ForkedCall(_unpicklable).result()


def test_a_child_killed_before_it_wrote_is_an_error(tmp_path: Path) -> None:
    gate = str(tmp_path / "gate")
    call = ForkedCall(_wait_for, gate, "never")
    while not os.path.exists(gate + ".running"):
        time.sleep(0.01)
    os.kill(call.pid, signal.SIGKILL)
    with pytest.raises(ForkedCallError, match=r"killed by signal 9 before it wrote its result"):
        call.result()


def test_the_child_ignores_ctrl_c_and_cancel_kills_and_reaps_it(tmp_path: Path) -> None:
    gate = str(tmp_path / "gate")
    call = ForkedCall(_wait_for, gate, "finished")
    while not os.path.exists(gate + ".running"):
        time.sleep(0.01)
    os.kill(call.pid, signal.SIGINT)  # the parent decides what a Ctrl-C stops
    Path(gate).write_text("go")
    assert call.result() == "finished"

    stuck = ForkedCall(_wait_for, str(tmp_path / "never"), "never")
    stuck.cancel()
    assert _gone(stuck.pid)
    stuck.cancel()  # idempotent


def test_fork_safe_only_with_a_single_thread() -> None:
    release = threading.Event()
    thread = threading.Thread(target=release.wait)
    thread.start()
    try:
        assert not single_threaded() and not fork_safe()
    finally:
        release.set()
        thread.join()


def _blocked_signals() -> set[int]:
    return {int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])}


def test_signals_are_held_around_the_fork_and_released_in_the_child() -> None:
    """A signal that arrives while the parent forks waits until the fork is done (so the child
    never runs the parent's handler), and the child accepts signals once its own are set."""
    got: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
    try:
        with parent_signals_held():
            # to this thread: a process-directed signal may be taken by another thread of the
            # process (a pytest-xdist worker has an I/O thread), whose Python handler then runs here
            signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
            assert got == []  # held back
            assert {signal.SIGINT, signal.SIGTERM} <= _blocked_signals()
        assert got == [signal.SIGTERM]  # delivered once the block ends
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert not {signal.SIGINT, signal.SIGTERM} & _blocked_signals()
    child_blocked = ForkedCall(_blocked_signals).result()
    assert not {signal.SIGINT, signal.SIGTERM} & child_blocked
