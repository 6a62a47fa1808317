"""``pyattacker plugins``: what is installed, what each plugin provides, and what failed."""

from __future__ import annotations

import msgspec
import rich_click as click

from pyattacker.plugins.manager import get_plugins

_STATUS = {"active": "[green]active[/]", "failed": "[red]failed[/]", "blocked": "[yellow]blocked[/]"}


@click.command("plugins")
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help='Print {"plugins": [one object per plugin], "errors": {plugin: message}} for scripts.',
)
def plugins_command(as_json: bool) -> None:
    """List installed plugins, their status and what they provide.

    A plugin that failed to load is listed with the reason; every other plugin keeps working,
    and this command still exits 0 (the listing is the diagnosis).
    """
    plugins = get_plugins(rescan=True)  # what is installed now, never a kept scan
    rows = plugins.listing()
    if as_json:
        # the reference's shape: the rows, and each failed plugin's message by name
        errors = {row.name: row.error or "failed" for row in rows if row.status == "failed"}
        document = {"plugins": rows, "errors": errors}
        click.echo(msgspec.json.format(msgspec.json.encode(document), indent=2).decode())
        return
    # start-up: `--json` prints without rich
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    cells = []
    for row in rows:
        provides = "; ".join(f"{kind}: {', '.join(names)}" for kind, names in row.provides.items())
        dist = f"{row.dist or '-'} {row.version or ''}".strip() + (" (built-in)" if row.builtin else "")
        cells.append((row.name, row.status, dist, provides or "-"))
    console = Console()
    head = ("name", "status", "dist", "provides")
    # the widest cell of each column, plus rich's borders and padding (3 per column, 1 more)
    needed = sum(max(len(c[i]) for c in [head, *cells]) for i in range(4)) + 3 * 4 + 1
    if needed > console.width:
        # too narrow for the table: one block per plugin, so no name is cut or folded
        for name, status, dist, provides in cells:
            console.print(f"{escape(name)}  {_STATUS[status]}", highlight=False, soft_wrap=True)
            console.print(f"  dist: {escape(dist)}", highlight=False, soft_wrap=True)
            console.print(f"  provides: {escape(provides)}", highlight=False, soft_wrap=True)
    else:
        table = Table(title="pyattacker plugins", show_lines=False)
        for col in head:
            table.add_column(col, overflow="fold")
        for name, status, dist, provides in cells:
            table.add_row(escape(name), _STATUS[status], escape(dist), escape(provides))
        console.print(table)
    failed = plugins.failures()
    if failed:
        err = Console(stderr=True)
        for row in failed:
            err.print(f"[red]plugin {row.name!r} failed:[/] {row.error}", markup=True, highlight=False)
