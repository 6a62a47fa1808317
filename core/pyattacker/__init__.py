"""pyattacker: run tens of thousands of resumable pipelines, observably and politely.

This module is the public face: what a pipeline author or a plugin author writes daily, imported
from here (``from pyattacker import task, pipeline, Runner``). The names resolve lazily on first
use (PEP 562), so ``import pyattacker`` alone loads neither asyncio, sqlite3, rich nor the engine,
and the modules behind the names may move without breaking anyone.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: face name -> the module that defines it
_FACE: dict[str, str] = {
    # what a user declares
    "task": "pyattacker.flow.taskspec",
    "TaskSpec": "pyattacker.flow.taskspec",
    "factory_task": "pyattacker.flow.taskspec",
    "pipeline": "pyattacker.flow.chain",
    "fanout": "pyattacker.flow.chain",
    "Handoff": "pyattacker.flow.handoff",
    "Retrying": "pyattacker.flow.retry",
    # running it
    "Runner": "pyattacker.engine.runner",
    "RunConfig": "pyattacker.engine.settings",
    "RunReport": "pyattacker.engine.report",
    "TaskContext": "pyattacker.engine.context",
    "VirtualClock": "pyattacker.clock",
    # endpoints
    "Pool": "pyattacker.resources.pool",
    "Resource": "pyattacker.resources.resource",
    "Lease": "pyattacker.resources.lease",
    # failures a task raises or a caller catches
    "PyAttackerError": "pyattacker.errors",
    "RetryableError": "pyattacker.errors",
    "FatalError": "pyattacker.errors",
    "ConfigError": "pyattacker.errors",
    "AcquireTimeout": "pyattacker.errors",
    "ResourceUnavailable": "pyattacker.errors",
    # what a command exits with
    "ExitCode": "pyattacker.errors",
    # writing plugins
    "hookimpl": "pyattacker.plugins.hookspecs",
}

__all__ = [
    "__version__",
    "task",
    "TaskSpec",
    "factory_task",
    "pipeline",
    "fanout",
    "Handoff",
    "Retrying",
    "Runner",
    "RunConfig",
    "RunReport",
    "TaskContext",
    "VirtualClock",
    "Pool",
    "Resource",
    "Lease",
    "PyAttackerError",
    "RetryableError",
    "FatalError",
    "ConfigError",
    "AcquireTimeout",
    "ResourceUnavailable",
    "ExitCode",
    "hookimpl",
]

if TYPE_CHECKING:
    from pyattacker.clock import VirtualClock
    from pyattacker.engine.context import TaskContext
    from pyattacker.engine.report import RunReport
    from pyattacker.engine.runner import Runner
    from pyattacker.engine.settings import RunConfig
    from pyattacker.errors import (
        AcquireTimeout,
        ConfigError,
        ExitCode,
        FatalError,
        PyAttackerError,
        ResourceUnavailable,
        RetryableError,
    )
    from pyattacker.flow.chain import fanout, pipeline
    from pyattacker.flow.handoff import Handoff
    from pyattacker.flow.retry import Retrying
    from pyattacker.flow.taskspec import TaskSpec, factory_task, task
    from pyattacker.plugins.hookspecs import hookimpl
    from pyattacker.resources.lease import Lease
    from pyattacker.resources.pool import Pool
    from pyattacker.resources.resource import Resource


def __getattr__(name: str) -> Any:
    module = _FACE.get(name)
    if module is None:
        raise AttributeError(f"module 'pyattacker' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # resolved once: later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_FACE})
