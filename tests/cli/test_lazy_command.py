"""Plugin CLI commands registered by reference (``LazyCommand``): discovery never imports click
for them, the command line loads them when it lists, shows or runs them, and a broken target is
a clear error with exit code 2, not a traceback."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from pyattacker import hookimpl
from pyattacker.cli.main import main
from pyattacker.errors import PluginError
from pyattacker.plugins.lazy_command import LazyCommand
from pyattacker.plugins.manager import Plugins, reset_plugins
from pyattacker.plugins.registry import RegistrationError


def test_discovery_imports_no_command_line_library() -> None:
    """A process that only builds runners (an SDK script, a shard) discovers every built-in
    plugin without importing click or rich-click (the serve command is registered lazily)."""
    code = (
        "import sys\n"
        "from pyattacker.plugins.manager import get_plugins\n"
        "plugins = get_plugins()\n"
        "assert 'serve' in plugins.commands.objects(), plugins.commands.objects()\n"
        "print(sorted(m for m in ('click', 'rich_click', 'email.parser') if m in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_serve_is_listed_and_shown_through_the_lazy_registration(capsys: pytest.CaptureFixture[str]) -> None:
    main(["--help"])
    assert "serve" in capsys.readouterr().out
    main(["serve", "--help"])
    assert "--token" in capsys.readouterr().out


def _plugins_with(command: Any) -> Plugins:
    class Plugin:
        @hookimpl
        def pyattacker_commands(self, register: Any) -> None:
            register(command)

    plugins = Plugins()
    row = plugins.add_plugin(Plugin(), "lazy-test")
    assert row.status != "failed", row.error
    return plugins


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("no_such_module_xyz:cmd", "cannot load no_such_module_xyz:cmd: ModuleNotFoundError"),
        ("pyattacker.errors:PluginError", "is not a click command named 'broken'"),
    ],
)
def test_a_broken_target_is_a_clear_error_with_exit_code_2(
    target: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    lazy = LazyCommand("broken", target)
    with pytest.raises(PluginError, match=message):
        lazy.load()
    reset_plugins(_plugins_with(lazy))
    try:
        with pytest.raises(SystemExit) as exit_info:
            main(["broken"])
    finally:
        reset_plugins(None)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "plugin 'lazy-test': command 'broken'" in err and message.split(":")[0] in err


def test_a_lazy_command_runs_the_command_it_names(capsys: pytest.CaptureFixture[str]) -> None:
    """The target is imported once, on first use, and then runs like any click command."""
    module = "pyattacker_lazy_command_fixture"
    import types

    import rich_click as click

    @click.command("hello")
    @click.option("--who", default="world")
    def hello(who: str) -> None:
        click.echo(f"hello {who}")

    fake = types.ModuleType(module)
    fake.hello = hello  # type: ignore[attr-defined]
    sys.modules[module] = fake
    lazy = LazyCommand("hello", f"{module}:hello")
    reset_plugins(_plugins_with(lazy))
    try:
        main(["hello", "--who", "lazy"])
    finally:
        reset_plugins(None)
        del sys.modules[module]
    assert capsys.readouterr().out.strip() == "hello lazy"
    assert lazy.load() is hello


@pytest.mark.parametrize("target", ["no-colon", ":attr", "module:", ""])
def test_a_malformed_target_fails_at_registration(target: str) -> None:
    with pytest.raises(RegistrationError, match="module:attribute"):
        LazyCommand("x", target)
