"""Ctrl-C at any moment of a command, from its first import on: one line, exit 130, no traceback.

The command is started the two ways a user starts it: the console script of ``[project.scripts]``
(the wrapper pip generates: import the entry point, ``sys.exit(main())``) and
``python -m pyattacker``. A real SIGINT is sent by PID at several delays after the child began
importing ``pyattacker.cli.main`` (the slow part, where a Ctrl-C used to print a traceback). The
moment is known from a meta-path finder that the test's own wrapper installs: it writes one byte
to a pipe when the import of ``pyattacker.cli.main`` starts. Nothing in the product is there for
the test. The interpreter's own start-up, before any pyattacker code runs, is not tested: no
code of ours can handle a signal there.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from tests.support import REPO

REPO = REPO

#: the test's wrapper: one byte on fd ``argv[1]`` when ``pyattacker.cli.main`` starts being imported
_MARK = """\
import importlib.abc, os, sys
_fd = int(sys.argv.pop(1))

class _Mark(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "pyattacker.cli.main":
            sys.meta_path.remove(self)
            os.write(_fd, b".")
            os.close(_fd)
        return None

sys.meta_path.insert(0, _Mark())
"""
#: after the first Ctrl-C handler exists, each of these is a clean end
_DELAYS = (0.0, 0.002, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16)


def _console_script() -> str:
    """What pip's generated ``pyattacker`` script runs, for the entry point pyproject declares."""
    target = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]["pyattacker"]
    module, _, attr = target.partition(":")
    return f"import re\nimport sys\nfrom {module} import {attr}\nsys.exit({attr}())\n"


_STARTS = {
    "console_script": _console_script(),
    "python_m": "import runpy\nrunpy.run_module('pyattacker', run_name='__main__', alter_sys=True)\n",
}


def _interrupted_at(start: str, args: list[str], delay: float, cwd: Path) -> tuple[int, str]:
    """Start the command, send SIGINT ``delay`` s after it began importing the CLI; (rc, stderr)."""
    read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-c", _MARK + _STARTS[start], str(write_fd), *args],
            pass_fds=(write_fd,),
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    finally:
        os.close(write_fd)
    try:
        ready, _, _ = select.select([read_fd], [], [], 60)  # hang guard
        assert ready and os.read(read_fd, 1) == b".", "the child never started importing the CLI"
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
    finally:
        os.close(read_fd)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, err


@pytest.mark.timeout(600)
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and pipes")
@pytest.mark.parametrize("start", sorted(_STARTS))
def test_ctrl_c_while_a_command_loads_is_one_line_and_exit_130(tmp_path: Path, start: str) -> None:
    cfg = tmp_path / "c.json"
    cfg.write_text('{"pipeline": {"tasks": [{"use": "echo"}]}, "source": {"kind": "range", "n": 1}}')
    outcomes = []
    for args in (["--version"], ["validate", "-c", str(cfg)], ["plugins"]):
        for delay in _DELAYS:
            rc, err = _interrupted_at(start, args, delay, tmp_path)
            where = f"{start} {args} SIGINT {delay * 1000:g} ms into the import: rc={rc}\n{err[-3000:]}"
            assert "Traceback" not in err and "KeyboardInterrupt" not in err, where
            # 0: the command was done (the signal came during the interpreter's shutdown,
            # which then ends with the command's own code); -SIGINT: it came in the last
            # moments of that shutdown, after Python has put back the default handlers (no
            # code runs there; like the start-up, out of anyone's reach), a silent end
            assert rc in (0, 130, -signal.SIGINT), where
            if rc == 130:  # "Aborted." is click's word for a Ctrl-C inside a command
                assert err.strip().splitlines()[-1] in ("Interrupted.", "Aborted."), where
            outcomes.append(rc)
    assert 130 in outcomes  # some signal did land while the command loaded or ran


#: test wrappers that raise a Ctrl-C, while ``pyattacker.cli.main`` is imported, where Python does
#: not let it propagate as it is. Both ended without "Interrupted." and 130 before.
_INTERRUPTS = {
    # in a finalizer: Python can only report it ("Exception ignored in ...", as one landing in
    # the import system's module-lock callbacks is), then ran the command to its end, exit 0
    "ignored": "class _Raising:\n    def __del__(self):\n        raise KeyboardInterrupt\n",
    # in a class's ``__set_name__`` (rich-click defines dataclasses while it is imported):
    # Python 3.11 wraps it in RuntimeError("Error calling __set_name__ ..."), a traceback, exit 1
    "wrapped": "class _Raising:\n    def __set_name__(self, owner, name):\n        raise KeyboardInterrupt\n",
    # a real SIGINT whose KeyboardInterrupt Python replaces, with nothing chained: what CPython
    # 3.11's `from m import name` does when one lands while it builds its ImportError message
    # (`ssl` imports an optional name that way; seen as a traceback, exit 1, in CI)
    "lost": (
        "import os, signal, time\n"
        "def _lose():\n"
        "    try:\n"
        "        os.kill(os.getpid(), signal.SIGINT)\n"
        "        time.sleep(5)\n"
        "        lost = False\n"
        "    except KeyboardInterrupt:\n"
        "        lost = True\n"
        "    if lost:\n"
        "        raise TypeError('expected a message argument')\n"
    ),
}
_TRIGGER = {
    "ignored": "_Raising()",
    "wrapped": 'type("Defined", (), {"field": _Raising()})',
    "lost": "_lose()",
}
_AT_CLI_IMPORT = """\
import importlib.abc, sys
{cls}
class _Mark(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "pyattacker.cli.main":
            sys.meta_path.remove(self)
            {trigger}
        return None

sys.meta_path.insert(0, _Mark())
"""


@pytest.mark.parametrize("how", sorted(_INTERRUPTS))
@pytest.mark.parametrize("start", sorted(_STARTS))
def test_a_ctrl_c_python_would_not_propagate_still_interrupts(tmp_path: Path, start: str, how: str) -> None:
    wrapper = _AT_CLI_IMPORT.format(cls=_INTERRUPTS[how], trigger=_TRIGGER[how])
    proc = subprocess.run(
        [sys.executable, "-c", wrapper + _STARTS[start], "plugins"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 130, proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "Interrupted."
    assert proc.stdout == ""  # interrupted before the command ran


def test_an_ignored_sigint_stays_ignored_while_the_command_line_loads(tmp_path: Path) -> None:
    """A background job started with SIGINT ignored: a SIGINT during the loading changes
    nothing, and the command runs to its end (only Python's own handler is replaced there)."""
    wrapper = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n" + _AT_CLI_IMPORT.format(
        cls="import os\n", trigger="os.kill(os.getpid(), signal.SIGINT)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", wrapper + _STARTS["console_script"], "--version"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Interrupted." not in proc.stderr and proc.stdout.strip()


def test_the_command_runs_under_pythons_own_sigint_handler(monkeypatch: pytest.MonkeyPatch) -> None:
    """The handler that notes a Ctrl-C while the command line loads is gone once it has loaded:
    ``asyncio`` installs its own Ctrl-C handling only over Python's default one."""
    import pyattacker.cli.main
    from pyattacker import __main__ as entry

    seen: list[object] = []
    monkeypatch.setattr(
        pyattacker.cli.main, "main", lambda argv=None: seen.append(signal.getsignal(signal.SIGINT))
    )
    before = signal.getsignal(signal.SIGINT)
    assert before is signal.default_int_handler
    try:
        entry.main([])
    finally:
        signal.signal(signal.SIGINT, before)
    assert seen == [signal.default_int_handler]


def test_exit_codes_are_the_documented_numbers() -> None:
    """``ExitCode`` holds the codes of docs/cli.md; the entry point, which imports nothing before
    its Ctrl-C handler is in place, spells out the two it needs and they are the same."""
    import pyattacker.__main__ as entry
    from pyattacker import ExitCode

    assert [(code.name, int(code)) for code in ExitCode] == [
        ("OK", 0),
        ("FAILED", 1),
        ("USAGE_ERROR", 2),
        ("INTERRUPTED", 130),
    ]
    assert ExitCode.INTERNAL_ERROR is ExitCode.USAGE_ERROR
    assert (entry._OK, entry._INTERRUPTED) == (ExitCode.OK, ExitCode.INTERRUPTED)
