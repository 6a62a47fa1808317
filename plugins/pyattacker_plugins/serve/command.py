"""The ``serve`` click command, imported only when the command line lists, shows or runs it.

The server, the endpoints and the dashboard assets load when the command runs, so
``pyattacker --help`` stays fast.
"""

from __future__ import annotations

import sys

import rich_click as click

__all__ = ["serve_command"]


@click.command("serve")
@click.argument("store")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (keep it loopback).")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=8787, show_default=True, help="Port (0 = a free port)."
)
@click.option("--run-id", default=None, help="A run id, or `all` (default: follow the latest started run).")
@click.option("--token", default=None, help="Access token (default: a fresh random one per start).")
def serve_command(store: str, host: str, port: int, run_id: str | None, token: str | None) -> None:
    """Serve a read-only dashboard and JSON API of STORE (safe beside a live run).

    Prints a URL carrying `?token=...`; opening it swaps the token for an HttpOnly cookie.
    Scripts send `Authorization: Bearer <token>`. Every request opens its own read-only
    connection. Stop with Ctrl+C.
    """
    from .server import run_server

    run_server(store, host=host, port=port, run_id=run_id, token=token, out=sys.stdout)
