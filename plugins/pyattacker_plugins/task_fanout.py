"""The ``fanout`` task factory: several tasks on the same input, at once, as one task.

``use: fanout`` with ``kwargs: {tasks: [echo, {use: simulate_llm, name: judge, kwargs: {...}}],
on_error: raise}``. Each child is written as a ``pipeline.tasks`` entry (or just its ``use:``
target) and resolved the same way; the group is ``pyattacker.fanout`` (the Python function of
the same name, which this plugin builds on): the result is ``{child name: value}``, a retry
repeats the whole group, ``on_error: collect`` puts ``{"error": ...}`` in a failed child's slot
instead of failing the group.
"""

from __future__ import annotations

from typing import Any

from pyattacker import ConfigError, TaskSpec, hookimpl
from pyattacker.flow.taskspec import factory_task
from pyattacker.plugins.hookspecs import Register

__all__ = ["fanout"]


@factory_task
def fanout(tasks: list[Any], on_error: str = "raise") -> TaskSpec:
    """Build the group; each child is checked like a task entry of a config (``validate``)."""
    # start-up: the config layer and the chain load only when a config uses a fanout
    from pyattacker.config.tasks import resolve_task_entry
    from pyattacker.flow.chain import fanout as group
    from pyattacker.plugins.manager import get_plugins

    if not isinstance(tasks, list) or not tasks:
        raise ConfigError(f"fanout: tasks must be a non-empty list of task entries, got {tasks!r}")
    plugins = get_plugins()
    errors: list[str] = []
    children = []
    for i, entry in enumerate(tasks):
        item = {"use": entry} if isinstance(entry, str) else entry
        spec, _ = resolve_task_entry(
            item, f"tasks[{i}]", plugins.tasks, errors, algorithms=plugins.algorithms
        )
        children.append(spec)
    if errors:
        raise ConfigError("fanout: " + "; ".join(errors))
    return group(*(c for c in children if c is not None), name="fanout", on_error=on_error)


@hookimpl
def pyattacker_tasks(register: Register) -> None:
    register("fanout", fanout)
