"""The ``bench`` command plugin: compare acquisition algorithms in a simulated provider world.

Registered by reference (``LazyCommand``) like ``serve``: plugin discovery runs in every process
that builds a runner, and neither click nor the simulator is imported until the command line
lists, shows or runs ``bench``. The Python API is ``pyattacker_plugins.bench.api``.
"""

from __future__ import annotations

from typing import Any

from pyattacker import hookimpl
from pyattacker.plugins.lazy_command import LazyCommand

__all__ = ["BENCH"]

#: ``pyattacker bench``: the command lives in ``bench/command.py``
BENCH = LazyCommand("bench", "pyattacker_plugins.bench.command:bench_command")


@hookimpl
def pyattacker_commands(register: Any) -> None:
    register(BENCH)
