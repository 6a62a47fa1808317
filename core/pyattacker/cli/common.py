"""What the commands share: output that survives a closed pipe, and the checks of the flags that
more than one command takes (``--store``, ``--artifact-backend``, the run flags).

Summaries go to stdout and warnings to stderr; a reader that went away (``| head``) is never a
traceback: the rest of stdout goes to /dev/null and the command keeps its own exit code.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import rich_click as click

__all__ = [
    "backend_problems",
    "check_backend_flag",
    "check_store_flag",
    "flag_overrides",
    "out",
    "print_rich",
    "silence_stdout",
    "warn",
]


def silence_stdout() -> None:
    """The reader of stdout went away (``| head``): send the rest to /dev/null, keep going."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except OSError:
        pass


def out(text: str) -> None:
    """Write to stdout and flush; a closed pipe is not an error (and never a traceback)."""
    try:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        silence_stdout()


def print_rich(renderable: Any) -> None:
    """Print a rich renderable (a table) on stdout, as ``out`` prints text."""
    from rich.console import Console  # start-up: only the commands that print a table load rich

    try:
        Console(file=sys.stdout, soft_wrap=False).print(renderable)
        sys.stdout.flush()
    except BrokenPipeError:
        silence_stdout()


def warn(text: str) -> None:
    """``Warning: text`` on stderr; a closed stderr is not an error."""
    try:
        click.echo(f"Warning: {text}", err=True)
    except BrokenPipeError:
        pass


def backend_problems(spec: str) -> list[str]:
    """What is wrong with an ``--artifact-backend`` spec (nothing: an empty list)."""
    # start-up: plugin discovery and the backends load only when the flag is given
    from pyattacker.plugins.manager import get_plugins
    from pyattacker.store.backends import validate_backend_spec

    return validate_backend_spec(spec, get_plugins().artifact_backends, "--artifact-backend")


def check_backend_flag(spec: str | None) -> None:
    """``--artifact-backend`` of ``run``/``resume``: a bad spec is a bad flag value (exit 2)."""
    if spec is None:
        return
    problems = backend_problems(spec)
    if problems:
        raise click.BadParameter("; ".join(problems), param_hint="'--artifact-backend'")


def check_store_flag(location: str | None) -> None:
    """``--store`` with a scheme no installed store plugin handles (or nothing after its scheme)
    is a bad flag value, refused before anything is read or created."""
    if location is None:
        return
    from pyattacker.config.build import store_problem  # start-up: the config layer is heavy

    problem = store_problem(location)
    if problem is not None:
        raise click.BadParameter(problem, param_hint="'--store'")


def flag_overrides(flags: dict[str, Any], resume: bool) -> dict[str, Any]:
    """The ``run``/``resume`` flags given on the command line, as RunConfig fields (absent flags
    leave the file's value); the same for one process and for every shard of ``--shards``."""
    overrides: dict[str, Any] = {
        "store": flags["store"],
        "concurrency": flags["concurrency"],
        "max_admitted": flags["max_admitted"],
        "journal": flags["journal"],
        "label": flags["label"],
        "stop_after_failures": flags["stop_after_failures"],
        "artifact_backend": flags["artifact_backend"],
    }
    if resume or flags["resume"]:
        overrides["resume"] = True
    for name in ("retry_succeeded", "fresh_restart", "strict_leases"):
        if flags[name]:
            overrides[name] = True
    if flags["no_signals"]:
        overrides["handle_signals"] = False
    if flags["no_write_behind"]:
        overrides["write_behind"] = False
    return {k: v for k, v in overrides.items() if v is not None}
