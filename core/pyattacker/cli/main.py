"""The ``pyattacker`` command line: a rich-click group whose commands load lazily.

Core commands live in small modules imported only when used, so ``pyattacker --help`` stays
fast; plugins add commands through the ``pyattacker_commands`` hook. Every error a user can
fix is printed as one line naming what is wrong, with the documented ``ExitCode``:
OK, FAILED (some pipelines failed), USAGE_ERROR / INTERNAL_ERROR (bad input, or a framework
error), INTERRUPTED (resumable).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import rich_click as click
from click import exceptions as click_exceptions

from pyattacker import __version__
from pyattacker.errors import (
    ConfigError,
    ExitCode,
    PluginError,
    PyAttackerError,
    StoreUnavailable,
    WorkerCrashed,
)
from pyattacker.plugins.lazy_command import LazyCommand

__all__ = ["cli", "main"]

click.rich_click.TEXT_MARKUP = "markdown"
click.rich_click.SHOW_ARGUMENTS = True

#: the core commands, imported on first use (plugins register theirs the same way)
CORE_COMMANDS: dict[str, LazyCommand] = {
    name: LazyCommand(name, target)
    for name, target in (
        ("run", "pyattacker.cli.run:run_command"),
        ("resume", "pyattacker.cli.run:resume_command"),
        ("demo", "pyattacker.cli.demo:demo_command"),
        ("validate", "pyattacker.cli.setup:validate_command"),
        ("init", "pyattacker.cli.setup:init_command"),
        ("report", "pyattacker.cli.views:report_command"),
        ("export", "pyattacker.cli.views:export_command"),
        ("watch", "pyattacker.cli.views:watch_command"),
        ("runs", "pyattacker.cli.runs:runs_command"),
        ("compare", "pyattacker.cli.runs:compare_command"),
        ("note", "pyattacker.cli.runs:note_command"),
        ("logs", "pyattacker.cli.logs:logs_command"),
        ("plugins", "pyattacker.cli.plugins:plugins_command"),
    )
}
#: ``ClickException`` exits 1 and ``UsageError`` 2: both are the user's input, USAGE_ERROR here
_CLICK_INPUT_CODES = (1, 2)
PANELS = {
    "Run pipelines": ["run", "resume", "demo"],
    "Look at results": ["report", "runs", "compare", "note", "watch", "logs", "export", "serve"],
    "Check the setup": ["validate", "init", "plugins", "bench"],
}


class LazyGroup(click.RichGroup):
    """Imports a core command only when it is invoked; adds plugin commands on demand."""

    def _plugin_commands(self) -> dict[str, Any]:
        try:
            # start-up: a core command never needs discovery (pluggy, every plugin's module)
            from pyattacker.plugins.manager import get_plugins

            return get_plugins().commands.objects()
        except Exception:  # the listing must work even when discovery itself breaks
            return {}

    @staticmethod
    def _load_plugin_command(command: LazyCommand) -> Any:
        """A plugin's lazy command; a failure to load it also names the plugin."""
        try:
            return command.load()
        except PluginError as exc:
            from pyattacker.plugins.manager import get_plugins  # start-up: as in _plugin_commands

            provided = get_plugins().commands.provider(command.name)
            if provided is None:
                raise
            raise PluginError(f"plugin {provided.plugin!r}: {exc}") from exc.__cause__

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            # the reader of stdout went away (``| head``): end quietly with OK, as main() does
            # (left to rich-click it would be exit 1, the code of a run with failed pipelines)
            _quiet_pipe()

    def list_commands(self, ctx: click.Context) -> list[str]:
        names = set(CORE_COMMANDS) | set(self._plugin_commands())
        return sorted(names)

    def get_command(self, ctx: click.Context, name: str) -> Any:
        core = CORE_COMMANDS.get(name)
        if core is not None:
            return core.load()
        command = self._plugin_commands().get(name)
        return self._load_plugin_command(command) if isinstance(command, LazyCommand) else command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.command_panel("Run pipelines", commands=PANELS["Run pipelines"])
@click.command_panel("Look at results", commands=PANELS["Look at results"])
@click.command_panel("Check the setup", commands=PANELS["Check the setup"])
@click.version_option(__version__, "--version", prog_name="pyattacker")
def cli() -> None:
    """**pyattacker** runs tens of thousands of resumable pipelines, observably and politely.

    Every task output is durable the moment it is produced; `resume` never re-sends a request
    whose answer is already on disk. Exit codes: 0 all succeeded, 1 some failed,
    2 bad config or framework error, 130 interrupted (run `resume` to continue).
    """


def _fail(message: str, code: ExitCode, prefix: str = "Error") -> None:
    click.echo(f"{prefix}: {message}", err=True)
    sys.exit(code)


def _closed_streams_to_devnull() -> None:
    """A stream closed before the start (``pyattacker run ... >&-``) is None in ``sys``, and
    printing the summary would raise AttributeError after the run. Writes to it go nowhere
    instead, as they would to a reader that went away."""
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w", encoding="utf-8"))  # noqa: SIM115 - lives as sys.stdout


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: maps errors to exit codes and handles closed pipes quietly."""
    _closed_streams_to_devnull()
    try:
        cli.main(args=argv, prog_name="pyattacker", standalone_mode=False)
    except click_exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(ExitCode.INTERRUPTED)
    except click_exceptions.ClickException as exc:
        exc.show()
        sys.exit(ExitCode.USAGE_ERROR if exc.exit_code in _CLICK_INPUT_CODES else exc.exit_code)
    except click_exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        _quiet_pipe()
    except WorkerCrashed as exc:
        # the CLI reference prints it as `WorkerCrashed: worker for pipeline ... died with ...`:
        # unlike a config error, the message alone does not say it was a framework failure
        _fail(f"WorkerCrashed: {exc}", ExitCode.INTERNAL_ERROR)
    except ConfigError as exc:
        # the reference's prefix, which scripts written for it look for (same exit code)
        _fail(str(exc), ExitCode.USAGE_ERROR, prefix="Config error")
    except StoreUnavailable as exc:
        _fail(str(exc), ExitCode.INTERNAL_ERROR)
    except PyAttackerError as exc:
        _fail(f"{type(exc).__name__}: {exc}", ExitCode.INTERNAL_ERROR)
    except KeyboardInterrupt:
        click.echo("Interrupted.", err=True)
        sys.exit(ExitCode.INTERRUPTED)
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _quiet_pipe()


def _quiet_pipe() -> None:
    """The reader went away (``| head``): stop writing, exit without a traceback."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    sys.exit(ExitCode.OK)
