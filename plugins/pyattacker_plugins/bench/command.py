"""The ``bench`` click command, imported only when the command line lists, shows or runs it.

Every flag is checked (and every name resolved) before the first line of progress; a bad one
is exit code 2 with a message naming it. The table goes to stdout and progress to stderr, so
``pyattacker bench --json - --quiet | jq .`` gets exactly one JSON document.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import click as plain_click
import rich_click as click
from click.core import ParameterSource

from pyattacker import ConfigError
from pyattacker.paths import make_parent, unwritable

__all__ = ["bench_command"]


def _output_path(flag: str, value: str | None) -> Path | None:
    """The file an output goes to (None: stdout or not asked for), checked before any run."""
    if value is None or value == "-":
        return None
    if not value.strip():
        raise ConfigError(f"{flag} needs a file path, or - for stdout")
    path = Path(value)
    if path.is_dir():
        raise ConfigError(f"{flag}: {value} is a folder; give a file path")
    if not path.parent.is_dir():
        # a missing folder is created, as the reference does, but only once there is a report
        # to write into it; a folder that cannot be made is refused now, before the run
        problem = unwritable(path, directory=False)
        if problem is not None:
            raise ConfigError(f"{flag}: {problem}")
        return path
    # opened (and removed again if it was new) now, not found unwritable after a long run
    existed = path.exists()
    try:
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise ConfigError(f"{flag}: cannot write {value}: {exc.strerror or exc}") from None
    if not existed:
        path.unlink(missing_ok=True)
    return path


def _same_file(a: Path, b: Path) -> bool:
    """Whether two output paths are one file (a link, ``./x`` and ``x``, or the same name)."""
    try:
        if a.exists() and b.exists():
            return a.samefile(b)
    except OSError:
        pass
    return a.resolve() == b.resolve()


def _write(flag: str, path: Path, text: str) -> None:
    make_parent(path, flag)
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{flag}: cannot write {path}: {exc.strerror or exc}") from None


@click.command("bench")
@click.option("--scenario", default=None, help="The simulated world (default: bursty_provider; see --list).")
@click.option("--list", "list_", is_flag=True, help="List scenarios, algorithms and metrics, then exit.")
@click.option(
    "--algorithms",
    default=None,
    help="Comma-separated subset (default: every installed algorithm the scenario suits).",
)
@click.option("--seeds", type=int, default=3, show_default=True, help="Seeds to average (at least 1).")
@click.option("--jobs", type=int, default=None, help="Override the scenario's job count (at least 1).")
@click.option("--concurrency", type=int, default=None, help="Override the number of workers (at least 1).")
@click.option(
    "--horizon", type=float, default=None, help="Override the simulated seconds during which jobs start."
)
@click.option(
    "--wall-budget",
    type=float,
    default=600.0,
    show_default=True,
    help="Real seconds one run may take; past it the benchmark fails (no partial table).",
)
@click.option(
    "--clock",
    type=click.Choice(["virtual", "real"]),
    default="virtual",
    show_default=True,
    help="virtual: simulated time at no cost; real: compressed real time (to check the simulator).",
)
@click.option("--speedup", type=float, default=10.0, show_default=True, help="Compression of --clock real.")
@click.option(
    "--json", "json_path", default=None, metavar="PATH", help="Write the full report as JSON (- = stdout)."
)
@click.option(
    "--markdown",
    "markdown_path",
    default=None,
    metavar="PATH",
    help="Write a markdown report with per-endpoint admission (- = stdout).",
)
@click.option("--quiet", is_flag=True, help="No progress on stderr.")
def bench_command(
    scenario: str | None,
    list_: bool,
    algorithms: str | None,
    seeds: int,
    jobs: int | None,
    concurrency: int | None,
    horizon: float | None,
    wall_budget: float,
    clock: str,
    speedup: float,
    json_path: str | None,
    markdown_path: str | None,
    quiet: bool,
) -> None:
    """Compare acquisition algorithms in a simulated provider world (no network).

    Closed-loop workers drive the real pool, the real algorithms and the real retry policy
    against simulated endpoints, in simulated time. Per metric it prints each algorithm's
    mean ± stdev (min/max) over the seeds and marks the winners with `*` (no composite
    score). Exit 0 when every run finished; 2 for a bad flag, an unknown scenario or
    algorithm, or a run that could not finish (nothing is printed then).
    Assumptions and how to read the table: docs/benchmark.md.
    """
    # start-up: discovery imports this module; the bench itself loads only when it runs
    from .api import BenchOptions, algorithm_registry, make_plan, run_bench
    from .report import listing, to_json, to_markdown, to_table
    from .scenario import DEFAULT_SCENARIO

    if list_:
        ctx = plain_click.get_current_context()
        given = [
            param.opts[0]
            for param in ctx.command.params
            if param.name not in (None, "list_")
            and ctx.get_parameter_source(param.name) is ParameterSource.COMMANDLINE
        ]
        if given:
            # --list runs nothing: a run flag beside it (`--list --scenario nope`) is a mistake
            raise ConfigError(f"--list runs nothing and takes no other flag; drop {', '.join(given)}")
        click.echo(listing(algorithm_registry(None).names()), nl=False)
        return
    if json_path == "-" and markdown_path == "-":
        raise ConfigError("--json - and --markdown - both want stdout; write one of them to a file")
    json_file = _output_path("--json", json_path)
    markdown_file = _output_path("--markdown", markdown_path)
    if json_file is not None and markdown_file is not None and _same_file(json_file, markdown_file):
        raise ConfigError(
            f"--json and --markdown both name {markdown_path}: the markdown would overwrite the"
            " JSON; give them different paths"
        )
    plan = make_plan(
        BenchOptions(
            scenario=DEFAULT_SCENARIO if scenario is None else scenario,
            algorithms=None if algorithms is None else algorithms.split(","),
            seeds=seeds,
            jobs=jobs,
            concurrency=concurrency,
            horizon_s=horizon,
            wall_budget_s=wall_budget,
            clock=clock,
            speedup=speedup,
        )
    )

    def progress(line: str) -> None:
        click.echo(line, err=True)

    report = run_bench(plan, progress=None if quiet else progress)
    if json_path is not None:
        text = json.dumps(to_json(report), indent=2, allow_nan=False) + "\n"
        if json_file is None:
            click.echo(text, nl=False)
        else:
            _write("--json", json_file, text)
            if not quiet:
                progress(f"wrote {json_file}")
    if markdown_path is not None:
        text = to_markdown(report)
        if markdown_file is None:
            click.echo(text, nl=False)
        else:
            _write("--markdown", markdown_file, text)
            if not quiet:
                progress(f"wrote {markdown_file}")
    if json_path != "-" and markdown_path != "-":
        # the terminal's width (COLUMNS, else 80 in a pipe): a wider table is stacked
        click.echo(to_table(report, shutil.get_terminal_size().columns), nl=False)
