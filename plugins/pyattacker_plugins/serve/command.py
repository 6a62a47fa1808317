"""The ``serve`` click command, imported only when the command line lists, shows or runs it.

The server, the endpoints and the dashboard assets load when the command runs, so
``pyattacker --help`` stays fast.
"""

from __future__ import annotations

import os
import sys

import rich_click as click

from pyattacker.cli.suites import suite_flags
from pyattacker.errors import ConfigError

__all__ = ["TOKEN_ENV", "serve_command"]

#: the token when ``--token`` is not given: a command line is visible to every local user
#: (``ps``, ``/proc/PID/cmdline``), a process's environment only to its owner
TOKEN_ENV = "PYATTACKER_SERVE_TOKEN"


def resolve_token(option: str | None) -> str | None:
    """``--token`` if given, else ``$PYATTACKER_SERVE_TOKEN``, else None (a random token).

    An empty (or blank) ``--token`` or variable is a usage error rather than a silent random
    token: it usually means a script exported a secret that was not there, and its clients
    would then fail with 401s and no hint why.
    """
    if option is not None:
        if not option.strip():  # `--token "$UNSET_VAR"`: the same mistake as an empty variable
            raise click.UsageError("--token is empty; give a token, or leave the option out for a random one")
        return option
    value = os.environ.get(TOKEN_ENV)
    if value is None:
        return None
    if not value.strip():
        raise click.UsageError(
            f"environment variable {TOKEN_ENV} is set but empty; give it a token,"
            " or unset it for a random one"
        )
    return value


@click.command("serve")
@click.argument("store")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (keep it loopback).")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8787, show_default=True, help="Port (0 = a free port)."
)
@click.option("--run-id", default=None, help="A run id, or `all` (default: follow the latest started run).")
@click.option(
    "--token",
    default=None,
    help=f"Access token (default: ${TOKEN_ENV}, else a fresh random one per start)."
    f" Visible to other local users in `ps`: prefer {TOKEN_ENV}.",
)
@suite_flags("--experiment")
def serve_command(
    store: str, host: str, port: int, run_id: str | None, token: str | None, experiment: tuple[str, ...]
) -> None:
    """Serve a read-only dashboard and JSON API of STORE (safe beside a live run).

    Prints a URL carrying `?token=...`; opening it swaps the token for an HttpOnly cookie.
    Scripts send `Authorization: Bearer <token>`. The token is `--token`, else the environment
    variable PYATTACKER_SERVE_TOKEN (kept out of `ps`; empty is an error), else a random one.
    Every request opens its own read-only connection. Stop with Ctrl+C.
    """
    from pyattacker.store.suite_dir import is_suite_dir

    from .server import run_server  # start-up: the server loads only when `serve` runs

    if experiment and not is_suite_dir(store):
        raise ConfigError("--experiment: only with a suite directory (the output root of a suite run)")
    token = resolve_token(token)
    run_server(
        store, host=host, port=port, run_id=run_id, token=token, out=sys.stdout, experiments=experiment
    )
