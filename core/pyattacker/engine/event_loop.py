"""Which event loop a run builds: asyncio's, or uvloop's when it is installed.

Much of the runner's own work per task is event-loop scheduling (a task step, a future, a handle
and a timer per wake-up). uvloop does that part in C (docs/performance.md has what it saves). It
is an optional extra, never a requirement: ``auto`` uses it when it can be imported and asyncio's
loop otherwise.
"""

from __future__ import annotations

import asyncio
import importlib
import sys
from collections.abc import Callable
from typing import Any

from pyattacker.errors import ConfigError

__all__ = ["EVENT_LOOPS", "check_event_loop", "loop_factory", "resolve_event_loop"]

#: accepted values of ``run.event_loop``
EVENT_LOOPS = ("auto", "asyncio", "uvloop")

_INSTALL_HINT = "install it with `pip install uvloop` (or the checkout's `fast` extra)"


def check_event_loop(name: str) -> None:
    """``ConfigError`` naming ``run.event_loop`` unless ``name`` is one of ``EVENT_LOOPS``."""
    if name not in EVENT_LOOPS:
        raise ConfigError(f"run.event_loop: must be one of {', '.join(EVENT_LOOPS)}, got {name!r}")


def resolve_event_loop(name: str) -> str:
    """The loop ``name`` stands for here: ``asyncio`` or ``uvloop``.

    ``uvloop`` when it is not importable is a ``ConfigError`` naming the setting; ``auto`` falls
    back to ``asyncio`` silently (and on Windows, where uvloop does not exist).
    """
    check_event_loop(name)
    if name == "asyncio":
        return "asyncio"
    if _uvloop_module() is not None:
        return "uvloop"
    if name == "uvloop":
        raise ConfigError(f"run.event_loop: 'uvloop' is not installed; {_INSTALL_HINT}, or use 'auto'")
    return "asyncio"


def loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """A factory for ``asyncio.Runner(loop_factory=...)`` building the loop ``name`` resolves to."""
    if resolve_event_loop(name) == "uvloop":
        factory: Callable[[], asyncio.AbstractEventLoop] = _uvloop_module().new_event_loop
        return factory
    return asyncio.new_event_loop


def _uvloop_module() -> Any:
    if sys.platform == "win32":
        return None
    try:
        return importlib.import_module("uvloop")
    except ImportError:
        return None
