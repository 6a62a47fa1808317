"""The ``serve`` command plugin: a token-protected, read-only HTTP viewer of a store.

Registered by reference (``LazyCommand``): discovery runs in every process that builds a runner,
and the click command (with rich-click) is imported only when the command line needs it.
"""

from __future__ import annotations

from typing import Any

from pyattacker import hookimpl
from pyattacker.plugins.lazy_command import LazyCommand

__all__ = ["SERVE"]

#: ``pyattacker serve``: the command lives in ``serve/command.py``
SERVE = LazyCommand("serve", "pyattacker_plugins.serve.command:serve_command")


@hookimpl
def pyattacker_commands(register: Any) -> None:
    register(SERVE)
