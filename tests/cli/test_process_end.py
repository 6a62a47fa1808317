"""A command that ran no task code ends its process without the interpreter's teardown
(``pyattacker.cli.process_end``): exit handlers run and output is flushed, finalizers do not run,
the command's exit code stays; everything else ends as Python ends it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import cli, cli_env

SCRIPT = """
import atexit, sys
class Finalized:
    def __del__(self, write=sys.stdout.write):
        write("finalized\\n")
keep = Finalized()
atexit.register(lambda: sys.stdout.write("atexit\\n"))
from pyattacker.cli.process_end import end_if_requested, forget_request, request_fast_end
sys.stdout.write("printed")  # still in the buffer: stdout is a pipe
{mode}
end_if_requested(3)
sys.stdout.write(" returned\\n")
raise SystemExit(4)
"""


def _buffered(env: dict[str, str]) -> dict[str, str]:
    """``env`` with Python's output buffered, as it is by default (the flush is what is tested)."""
    return {k: v for k, v in env.items() if k != "PYTHONUNBUFFERED"}


def _script(mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT.format(mode=mode)],
        capture_output=True,
        text=True,
        timeout=60,
        env=_buffered(dict(os.environ)),
    )


def test_a_requested_end_flushes_runs_exit_handlers_and_skips_finalizers() -> None:
    fast = _script("request_fast_end()")
    assert (fast.returncode, fast.stdout, fast.stderr) == (3, "printedatexit\n", "")
    normal = _script("")
    assert normal.returncode == 4 and normal.stdout == "printed returned\natexit\nfinalized\n"
    forgotten = _script("request_fast_end(); forget_request()")
    assert forgotten.returncode == 4 and "returned" in forgotten.stdout
    # another thread still runs: a normal end would wait for it, so this one does too
    threaded = _script(
        "request_fast_end(); import threading, time; threading.Thread(target=time.sleep, args=(0.2,)).start()"
    )
    assert threaded.returncode == 4 and threaded.stdout.endswith("finalized\n")


def test_the_entry_point_ends_fast_only_for_a_command_that_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process: ``__main__.main`` honours a request made by the command it runs, with that
    command's code, and drops one left by code that ran before it."""
    import pyattacker.cli.main
    from pyattacker import __main__ as entry
    from pyattacker.cli import process_end

    ended: list[int] = []

    class Ended(Exception):
        pass

    def fake_exit(code: int) -> None:
        ended.append(code)
        raise Ended

    monkeypatch.setattr(process_end.os, "_exit", fake_exit)

    def asks(argv: Any = None) -> None:
        process_end.request_fast_end()
        raise SystemExit(5)

    def plain(argv: Any = None) -> None:
        raise SystemExit(0)

    before = signal.getsignal(signal.SIGINT)
    try:  # main() hands SIGINT to its late-exit handler on the way out: put Python's back
        monkeypatch.setattr(pyattacker.cli.main, "main", asks)
        with pytest.raises(Ended):
            entry.main([])
        assert ended == [5]
        monkeypatch.setattr(pyattacker.cli.main, "main", plain)
        process_end.request_fast_end()  # left by an in-process call of the command line
        with pytest.raises(SystemExit):
            entry.main([])
        assert ended == [5]
    finally:
        signal.signal(signal.SIGINT, before)


MARKS = """
import atexit, os
class _Mark:
    def __del__(self, write=os.write, pid=os.getpid):
        write(2, b"teardown %d\\n" % pid())
_mark = _Mark()
atexit.register(lambda write=os.write, pid=os.getpid: write(2, b"atexit %d\\n" % pid()))
"""

CONFIG = """
run: {store: runs/s.db, concurrency: 4}
pipeline:
  name: ends
  tasks:
    - {use: echo}
source: {kind: range, n: 40}
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forked shards are Linux-only")
def test_the_sharded_parent_skips_its_teardown_and_a_plain_run_does_not(
    tmp_path: Path, _isolated_home: Path
) -> None:
    """Every process marks its exit handlers and its teardown on stderr (``sitecustomize``).
    ``run --shards 2`` prints its whole JSON document and exits 0, its exit handlers ran, and no
    process tore down (the forked shards never did); ``run`` in one process still does."""
    marks = tmp_path / "marks"
    marks.mkdir()
    (marks / "sitecustomize.py").write_text(textwrap.dedent(MARKS))
    (tmp_path / "c.yaml").write_text(CONFIG)
    env = _buffered(cli_env(_isolated_home, marks))
    env.pop("PYATACKER_SHARD", None)
    sharded = cli(["run", "-c", "c.yaml", "--shards", "2", "--summary-format", "json"], env, cwd=tmp_path)
    assert sharded.returncode == 0, sharded.stderr
    doc = json.loads(sharded.stdout)
    assert doc["merged"]["pipelines"]["by_state"] == {"succeeded": 40} and doc["exit_code"] == 0
    lines = sharded.stderr.splitlines()
    assert [line for line in lines if line.startswith("atexit ")], sharded.stderr
    assert not [line for line in lines if line.startswith("teardown ")], sharded.stderr
    single = cli(["run", "-c", "c.yaml", "--store", "one.db"], env, cwd=tmp_path)
    assert single.returncode == 0, single.stderr
    assert "teardown " in single.stderr and "atexit " in single.stderr
    assert os.path.exists(tmp_path / "one.db")
