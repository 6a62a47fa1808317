"""CLI commands registered by reference: imported when the command line first needs them.

Plugin discovery runs in every process that builds a ``Runner``: SDK scripts, each shard of
``run --shards``, every ``pyattacker`` command. A plugin that builds its click command at import
time makes all of them import click and rich-click, a slow import, even the ones that never
show a command line. ``register(LazyCommand("serve", "pkg.module:serve_command"))`` keeps the
import for the moment the CLI lists, shows or runs the command. The core commands are held the
same way (``pyattacker.cli.main.CORE_COMMANDS``).
"""

from __future__ import annotations

import importlib
from typing import Any

from pyattacker.errors import PluginError
from pyattacker.plugins.registry import RegistrationError

__all__ = ["LazyCommand"]


class LazyCommand:
    """A command's name and ``"module:attribute"``; ``load()`` imports the click command."""

    __slots__ = ("_command", "name", "target")

    def __init__(self, name: str, target: str) -> None:
        module, sep, attr = target.partition(":")
        if not name or not sep or not module or not attr:
            raise RegistrationError(
                f"LazyCommand({name!r}, {target!r}): expected a name and a 'module:attribute' target"
            )
        self.name = name
        self.target = target
        self._command: Any = None

    def load(self) -> Any:
        """The click command (imported once). A target that fails to import, or is not a command of
        that name, raises ``PluginError`` naming both (the CLI prints it and exits 2)."""
        if self._command is None:
            module, _, attr = self.target.partition(":")
            try:
                obj: Any = importlib.import_module(module)
                for part in attr.split("."):
                    obj = getattr(obj, part)
            except Exception as exc:
                raise PluginError(
                    f"command {self.name!r}: cannot load {self.target}: {type(exc).__name__}: {exc}"
                ) from exc
            if getattr(obj, "name", None) != self.name or not callable(getattr(obj, "main", None)):
                raise PluginError(
                    f"command {self.name!r}: {self.target} is not a click command named {self.name!r}"
                )
            self._command = obj
        return self._command

    def main(self, *args: Any, **kwargs: Any) -> Any:
        """Run the command (what registration checks a command for)."""
        return self.load().main(*args, **kwargs)

    def __repr__(self) -> str:
        return f"LazyCommand({self.name!r}, {self.target!r})"
