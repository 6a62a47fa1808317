"""Ending a command's process without the interpreter's teardown, when nothing needs it.

After a command has printed everything, Python's own finalization still collects and frees
every object and clears every module, which the user waits for between the merged report of
``run --shards`` and the shell prompt, on every sharded run. A command whose process ran no
task code asks for a fast end (``request_fast_end``); ``pyattacker.__main__`` then flushes
stdout and stderr, runs the exit handlers (``atexit``) and leaves through ``os._exit`` with the
command's own exit code (``end_if_requested``).

Only for such a process: one that ran tasks may hold a user's file objects whose buffered
bytes only their finalizer writes, so ``run`` without ``--shards`` never asks. A request is
honoured by ``pyattacker.__main__.main`` alone (the console script), for the command it ran:
code that calls the command line in-process (tests, ``CliRunner``) ends normally.
"""

from __future__ import annotations

import atexit
import os
import sys

__all__ = ["end_if_requested", "flush_std_streams", "forget_request", "request_fast_end"]

_requested = [False]


def request_fast_end() -> None:
    """Say that this process's teardown may be skipped once the command has decided its code."""
    _requested[0] = True


def forget_request() -> None:
    """Drop a request left by an earlier command run in the same process."""
    _requested[0] = False


def end_if_requested(code: int) -> None:
    """End the process now with ``code`` if the command asked for it and no other thread runs
    (one that is not a daemon would be waited for by a normal end); else return."""
    if not _requested[0]:
        return
    _requested[0] = False
    threading = sys.modules.get("threading")
    if threading is not None and threading.active_count() > 1:
        return
    atexit._run_exitfuncs()  # what a normal end runs first (and prints the errors of)
    flush_std_streams()
    os._exit(code)


def flush_std_streams() -> None:
    """Flush stdout and stderr before an ``os._exit``; a stream that is closed, whose reader went
    away, or that is in the middle of a write is left as it is: the exit code matters more."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except Exception:
            pass
