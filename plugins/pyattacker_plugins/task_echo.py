"""The ``echo`` task plugin: returns its input unchanged (``use: pyattacker.tasks:echo``)."""

from __future__ import annotations

from typing import Any

from pyattacker import hookimpl, task


@task(name="echo")
def echo(value: Any) -> Any:
    """Identity: handy as a first step, in tests, and to check an installation."""
    return value


@hookimpl
def pyattacker_tasks(register: Any) -> None:
    register("echo", echo)
