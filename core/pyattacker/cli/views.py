"""``report``, ``export`` and ``watch``: the read-only views of the CLI.

They open stores read-only (safe beside a live run) and exit 0 whatever the pipelines did:
a report is a view, not a verdict. A missing or foreign store is a ``ConfigError`` (exit 2).
Stored text is echoed literally (``click.echo``), never interpreted as rich markup.
"""

from __future__ import annotations

import sys

import rich_click as click

from pyattacker.cli.common import backend_problems
from pyattacker.cli.report_text import report_text
from pyattacker.cli.suites import suite_flags
from pyattacker.errors import ConfigError
from pyattacker.views.common import ALL_RUNS, encode_json, expand_locations
from pyattacker.views.failures import with_tracebacks
from pyattacker.views.merge import report_stores
from pyattacker.views.shard_report import find_shard_stores

__all__ = ["export_command", "report_command", "watch_command"]


def _check_backend_option(spec: str | None) -> None:
    """``--artifact-backend`` of a view: checked as ``run`` checks it (exit 2 naming the flag)."""
    if spec is None:
        return
    problems = backend_problems(spec)
    if problems:
        raise ConfigError("; ".join(problems))


@click.command("report")
@click.argument("stores", nargs=-1, required=True, metavar="STORE [STORE ...]")
@click.option(
    "--run-id", default=None, help="A run id, or `all` (default: the latest started run of each store)."
)
@click.option("--errors", "errors", type=click.IntRange(min=0), default=0, help="List the first N failures.")
@click.option(
    "--traceback",
    "tracebacks",
    is_flag=True,
    help="With each failure listed, its whole traceback (implies --errors 20 when not given).",
)
@click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON document on stdout.")
@click.option(
    "--artifact-backend",
    "artifact_backend",
    default=None,
    metavar="SPEC",
    help="Accepted as `export` takes it (checked; a bad spec is exit 2). A report reads no"
    " payloads, so it changes nothing.",
)
@suite_flags("--experiment")
def report_command(
    stores: tuple[str, ...],
    run_id: str | None,
    errors: int,
    tracebacks: bool,
    as_json: bool,
    artifact_backend: str | None,
    experiment: tuple[str, ...],
) -> None:
    """Counts, failures and errors of one or more stores (shards are merged).

    Each failure listed by --errors N shows where it was raised (the traceback's last frame);
    --traceback shows the whole traceback, and --json carries it in every error.

    Rows of the same pipeline in several stores are folded (the best state wins) and every
    count is recomputed from the surviving rows, so naming a store twice changes nothing.
    STORE may be a glob pattern (quote it). Exit 0 unless a store is missing or foreign (2).
    """
    _check_backend_option(artifact_backend)
    if _suite_report(stores, run_id, as_json, experiment):
        return
    locations = find_shard_stores(expand_locations(stores))
    rep = report_stores(locations, run_id)
    # the counts of one run are its share; the dataset's standing is every run's rows
    dataset = None if run_id == ALL_RUNS else report_stores(locations, ALL_RUNS).stats()["pipelines"]
    if as_json:
        doc = rep.to_dict(errors if errors else 20)
        doc["errors"] = with_tracebacks(doc["errors"])
        doc["dataset"] = None if dataset is None else {k: dataset[k] for k in ("total", "by_state")}
        sys.stdout.write(encode_json(doc).decode() + "\n")
        return
    if tracebacks and not errors:
        errors = 20
    for line in report_text(rep, errors, tracebacks=tracebacks, dataset=dataset):
        click.echo(line)


def _suite_dir(args: tuple[str, ...], experiment: tuple[str, ...], by_experiment: bool = False) -> str | None:
    """The suite directory a view was given (one argument), or None; the suite flags without
    one are refused naming the flag."""
    from pyattacker.store.suite_dir import is_suite_dir

    if len(args) == 1 and is_suite_dir(args[0]):
        return args[0]
    if experiment or by_experiment:
        flag = "--experiment" if experiment else "--by-experiment"
        raise ConfigError(f"{flag}: only with a suite directory (the output root of a suite run)")
    return None


def _suite_report(
    stores: tuple[str, ...], run_id: str | None, as_json: bool, experiment: tuple[str, ...]
) -> bool:
    """``report DIR`` of a suite directory: one line per experiment, side by side."""
    root = _suite_dir(stores, experiment)
    if root is None:
        return False
    from pyattacker.views.suite import compare_experiments, comparison_lines

    manifest, rows = compare_experiments(root, run_id=run_id, experiments=experiment)
    if as_json:
        doc = {"suite_id": manifest.suite_id, "layout": manifest.layout, "experiments": rows}
        sys.stdout.write(encode_json(doc).decode() + "\n")
        return True
    for line in comparison_lines(manifest, rows):
        click.echo(line)
    return True


@click.command("export")
@click.argument("paths", nargs=-1, required=True, metavar="STORE [STORE ...] OUTPUT")
@click.option(
    "--rows",
    type=click.Choice(
        ["pipelines", "tasks", "attempts", "events", "artifacts", "results", "metrics", "points"]
    ),
    default="pipelines",
    show_default=True,
    help="What one output row is.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["jsonl", "json", "csv"]),
    default=None,
    help="Output format (default: from OUTPUT's suffix, else jsonl).",
)
@click.option(
    "--run-id", default=None, help="Only this run (default: every run in the store; `all` is the same)."
)
@click.option(
    "--artifact-backend",
    "artifact_backend",
    default=None,
    metavar="SPEC",
    help="Read payloads kept in blobs through this backend (as `run --artifact-backend` takes it;"
    " default: the one each run recorded), e.g. when the blob folder moved.",
)
@suite_flags("--experiment", "--by-experiment")
def export_command(
    paths: tuple[str, ...],
    rows: str,
    fmt: str | None,
    run_id: str | None,
    artifact_backend: str | None,
    experiment: tuple[str, ...],
    by_experiment: bool,
) -> None:
    """Write every row of a kind to OUTPUT (`-` = stdout), streamed in bounded batches.

    Several stores are concatenated in argument order; `--rows pipelines` and `results` are
    merged (one row per pipeline, best state wins). Files appear atomically (temp + rename).
    Payloads kept in blobs are read back through the backend the run recorded.
    """
    from pyattacker.views.export import export_stores  # start-up: `--help` imports this module

    if len(paths) < 2:
        raise ConfigError("export needs at least one STORE and an OUTPUT (use - for stdout)")
    _check_backend_option(artifact_backend)
    *stores, output = paths
    root = _suite_dir(tuple(stores), experiment, by_experiment)
    if root is not None:
        _export_suite(root, output, rows, fmt, run_id, artifact_backend, experiment, by_experiment)
        return
    n = export_stores(
        find_shard_stores(expand_locations(stores)),
        output,
        rows=rows,
        fmt=fmt,
        run_id=run_id,
        artifact_backend=artifact_backend,
    )
    if output != "-":
        click.echo(f"wrote {n} {rows} row(s) to {output}", err=True)


def _export_suite(
    root: str,
    output: str,
    rows: str,
    fmt: str | None,
    run_id: str | None,
    artifact_backend: str | None,
    experiment: tuple[str, ...],
    by_experiment: bool,
) -> None:
    """``export DIR OUTPUT`` of a suite directory: every experiment (or ``--experiment``'s) into
    OUTPUT, or with ``--by-experiment`` one file per experiment, ``OUTPUT/<ID>/<rows>.<format>``."""
    import os

    from pyattacker.views.export import export_stores
    from pyattacker.views.suite import experiment_filter, open_suite

    suite = open_suite(root)
    assert suite is not None
    manifest, catalog = suite
    if not by_experiment:
        n = export_stores(
            [catalog],
            output,
            rows=rows,
            fmt=fmt,
            run_id=run_id,
            artifact_backend=artifact_backend,
            only=experiment_filter(manifest, experiment),
        )
        if output != "-":
            click.echo(f"wrote {n} {rows} row(s) to {output}", err=True)
        return
    if output == "-":
        raise ConfigError("--by-experiment: OUTPUT is a folder (one file per experiment), not -")
    suffix = fmt or "jsonl"
    for exp_id in manifest.select(experiment):
        folder = os.path.join(output, exp_id)
        os.makedirs(folder, exist_ok=True)
        target = os.path.join(folder, f"{rows}.{suffix}")
        n = export_stores(
            [catalog],
            target,
            rows=rows,
            fmt=suffix,
            run_id=run_id,
            artifact_backend=artifact_backend,
            only=experiment_filter(manifest, (exp_id,)),
        )
        click.echo(f"wrote {n} {rows} row(s) to {target}", err=True)


def _watched_store(arg: str) -> str:
    """``watch`` shows one store. A glob pattern (the shard stores of a run, say) that matches
    one store watches it; one that matches several is refused, naming them and the command that
    merges them (``expand_locations`` reads only the path of a location with a scheme as a
    pattern, never its ``?options``)."""
    # a pattern matching nothing: "matches no file", exit 2; a sharded run's base name: its stores
    matches = find_shard_stores(expand_locations([arg]))
    if len(matches) == 1:
        return matches[0]
    raise ConfigError(
        f"watch shows one store, but {arg!r} matches {len(matches)}: {', '.join(matches)};"
        f" watch one of them (each shard store is a run of its own), or run"
        f" `pyattacker report '{arg}'` for the merged view"
    )


@click.command("watch")
@click.argument("store")
@click.option(
    "--run-id",
    default=None,
    help="A run id, or `all` for the aggregate (default: follow the latest started run).",
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0),
    default=1.0,
    show_default=True,
    help="Seconds between refreshes (0: the next one as soon as one is drawn).",
)
@click.option("--iterations", type=click.IntRange(min=1), default=None, help="Exit 0 after N refreshes.")
@click.option("--no-clear", is_flag=True, help="Print snapshots one after another instead of redrawing.")
@suite_flags("--experiment")
def watch_command(
    store: str,
    run_id: str | None,
    interval: float,
    iterations: int | None,
    no_clear: bool,
    experiment: tuple[str, ...],
) -> None:
    """Live panel of a running (or finished) store: states, latency, pools, errors, metrics.

    Opens the store read-only, so it runs safely beside the writer. It redraws in place only
    on a terminal; into a pipe it prints plain snapshots. Ctrl+C stops watching, not the run.
    """
    from pyattacker.views.watch import watch  # start-up: `--help` imports this module

    root = _suite_dir((store,), experiment)
    if root is not None:
        if experiment:
            raise ConfigError(
                "--experiment: watch shows the whole suite (its one store); compare the experiments"
                f" with `pyattacker report {root} --experiment ID`"
            )
        from pyattacker.views.suite import suite_catalog

        store = suite_catalog(root)
    store = _watched_store(store)
    try:
        watch(store, run_id=run_id, interval=interval, iterations=iterations, clear=not no_clear)
    except KeyboardInterrupt:
        return
