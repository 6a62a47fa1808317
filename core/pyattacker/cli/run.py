"""``pyattacker run`` and ``pyattacker resume``: run the pipelines of a config file.

Both go through ``pyattacker.config.build`` (they validate exactly like ``validate`` before a
store is created), print the summary on stdout (a rich table, or one JSON object with
``--summary-format json``) and progress/warnings on stderr, and exit with an ``ExitCode``:
OK all succeeded, FAILED some failed, USAGE_ERROR/INTERNAL_ERROR config or framework error,
INTERRUPTED (resumable). The runner's own SIGINT handling is what stops a run: the first
Ctrl-C finishes running attempts (up to ``grace_s``), the second stops at once. ``--shards N``
hands the run to ``pyattacker.cli.shard``; ``--shard I/N`` runs one shard here.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import rich_click as click

from pyattacker.cli.common import check_backend_flag, check_store_flag, flag_overrides, warn
from pyattacker.cli.execute import execute, finish
from pyattacker.cli.shard import run_sharded
from pyattacker.cli.suites import is_suite_file, run_suite, suite_flags
from pyattacker.engine.settings import MAX_CONCURRENCY
from pyattacker.errors import ConfigError
from pyattacker.shard.executor import PARENT_PID_ENV
from pyattacker.shard.plan import (
    SHARD_ENV,
    check_resume_layout,
    is_memory_store,
    parse_capacity_share,
    parse_shard,
    shard_keeper,
    shard_store_path,
)

__all__ = ["resume_command", "run_command"]

#: the flags of one run (``run`` and ``resume`` alike), in the order ``--help`` lists them
_RUN_FLAGS = (
    click.option(
        "-c",
        "--config",
        "config_path",
        required=True,
        metavar="PATH",
        help="Config file: .toml, .json, .yaml/.yml (YAML through PyYAML, installed with pyattacker).",
    ),
    click.option("--limit", type=click.IntRange(min=1), help="Only run the first N pipelines (smoke test)."),
    click.option("--store", help="Store location; overrides `run.store` (relative to the current folder)."),
    click.option(
        "--concurrency",
        type=click.IntRange(min=1, max=MAX_CONCURRENCY),
        help="Attempts running at once (`run.concurrency`).",
    ),
    click.option(
        "--max-admitted",
        type=click.IntRange(min=1),
        help="Queued + running + parked pipelines at most (default 4 x concurrency).",
    ),
    click.option(
        "--journal",
        type=click.Choice(["full", "summary"]),
        help="`full` keeps artifacts (task-level resume); `summary` keeps digests only.",
    ),
    click.option("--label", help="A label to tell this run apart later."),
    click.option(
        "--resume",
        is_flag=True,
        default=False,
        help="Skip finished pipelines; continue the others from their checkpoint.",
    ),
    click.option(
        "--retry-succeeded",
        is_flag=True,
        default=False,
        help="With --resume: re-run succeeded pipelines too.",
    ),
    click.option(
        "--fresh-restart",
        is_flag=True,
        default=False,
        help="Restart admitted pipelines from the seed (drop checkpoints).",
    ),
    click.option(
        "--strict-leases",
        is_flag=True,
        default=False,
        help="A leaked lease fails the task (LeaseLeakError).",
    ),
    click.option(
        "--stop-after-failures",
        type=click.IntRange(min=1),
        help="Stop admitting after N failed pipelines (best effort).",
    ),
    click.option(
        "--no-signals",
        is_flag=True,
        default=False,
        help="Do not install SIGINT/SIGTERM handlers (Ctrl-C then aborts at once).",
    ),
    click.option(
        "--artifact-backend", metavar="SPEC", help="inline (default), null, file:///path or a JSON spec."
    ),
    click.option("--progress", is_flag=True, default=False, help="Live progress bar on stderr."),
    click.option(
        "--summary-format",
        type=click.Choice(["text", "json"]),
        default="text",
        show_default=True,
        help="`json`: exactly one JSON object on stdout.",
    ),
    click.option(
        "--no-write-behind",
        is_flag=True,
        default=False,
        help="Commit every attempt and event at once instead of in batches.",
    ),
    click.option(
        "--strict-env",
        is_flag=True,
        default=False,
        help="An unset ${VAR} in the config is an error (exit 2), not a warning.",
    ),
)
#: the sharding flags: one shard here (``--shard``), or all of them (``--shards``)
_SHARD_FLAGS = (
    click.option(
        "--shard",
        metavar="I/N",
        help="Run only shard I of N (0-based) into its own store; you orchestrate the others.",
    ),
    click.option(
        "--shards",
        type=click.IntRange(min=2),
        help="Run all N shards (local child processes, or --executor), then print the merged report.",
    ),
    click.option(
        "--jobs",
        type=click.IntRange(min=1),
        help="With --shards: shards running at once (default min(N, CPU count)).",
    ),
    click.option(
        "--executor",
        metavar="NAME",
        help=(
            "With --shards: the shard executor plugin that starts shards (default `local`, which"
            " forks them when safe; PYATTACKER_SHARD_START=spawn starts fresh interpreters)."
        ),
    ),
    click.option(
        "--executor-option",
        "executor_options",
        metavar="KEY=VALUE",
        multiple=True,
        help="With --shards: an option of the shard executor (repeatable), e.g. address=HOST:PORT for ray.",
    ),
    click.option(
        "--full-capacity-per-shard",
        is_flag=True,
        default=False,
        help="With --shards: every shard gets each resource's full capacity (per-shard endpoints).",
    ),
    click.option(
        "--capacity-share",
        metavar="S/J",
        hidden=True,
        help="Use slot S of J's slice of every resource's capacity (set by --shards).",
    ),
)


def _run_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The flags shared by ``run`` and ``resume`` (sharding included)."""
    for option in reversed((*_RUN_FLAGS, *_SHARD_FLAGS)):
        fn = option(fn)
    return suite_flags("--experiment", "--output-root")(fn)


def _run(flags: dict[str, Any], *, resume: bool) -> None:
    """One run in this process (the whole config, or one shard of it), or every shard with
    ``--shards``; exits with the run's code."""
    # start-up: the config layer is heavy, and `--help` imports this module
    from pyattacker.config.build import build, check_config, load_config

    if is_suite_file(flags["config_path"]):
        run_suite(flags, resume=resume)
        return
    for name in ("experiment", "output_root"):
        if flags[name]:
            raise ConfigError(
                f"--{name.replace('_', '-')}: only with a suite config (suite: and experiments: sections)"
            )
    _check_shard_flags(flags)
    check_store_flag(flags["store"])
    if flags["shards"] is not None:
        run_sharded(flags, resume=resume)
        return
    check_backend_flag(flags["artifact_backend"])
    if flags["shard"] is not None:
        # this shard's own I/N is what ``${PYATACKER_SHARD}`` in the config expands to
        index, count = parse_shard(flags["shard"])
        os.environ[SHARD_ENV] = f"{index}/{count}"
    loaded = load_config(flags["config_path"], strict_env=flags["strict_env"])
    for warning in loaded.warnings:
        warn(warning)
    checked = check_config(loaded)
    for note in checked.notes:
        warn(note)
    overrides = flag_overrides(flags, resume)
    share = None
    if flags["capacity_share"] is not None:
        share = parse_capacity_share(flags["capacity_share"])
    shard = _apply_shard(flags, checked, overrides, share)
    if resume or flags["resume"]:
        _check_resume_layout(flags, checked, shard)
    built = build(checked, overrides, limit=flags["limit"], capacity_share=share)
    if resume:
        _warn_nothing_to_resume(str(built.config.store))
    specs: Iterable[Any]
    total = built.total
    if shard is not None and shard[1] > 1:
        specs = built.specs(keep=shard_keeper(*shard))  # other shards' seeds are not bound here
        total = None  # the share of a shard is only known by walking the keys
    else:
        specs = built.specs()
    report, health = execute(
        built.config, built.pools, specs, total=total, progress=flags["progress"], template=built.template
    )
    finish(report, health, built.pools, str(built.config.store), flags["summary_format"], shard)


def _check_shard_flags(flags: dict[str, Any]) -> None:
    """The sharding flags that only make sense together, checked before anything is read."""
    if flags["shard"] is not None and flags["shards"] is not None:
        raise ConfigError("--shard and --shards are mutually exclusive (one shard, or all of them)")
    if flags["shards"] is None:
        for name in ("jobs", "executor"):
            if flags[name] is not None:
                raise ConfigError(f"--{name}: only with --shards N")
        if flags["full_capacity_per_shard"]:
            raise ConfigError("--full-capacity-per-shard: only with --shards N")
        if flags["executor_options"]:
            raise ConfigError("--executor-option: only with --shards N")
    elif flags["capacity_share"] is not None:
        raise ConfigError("--capacity-share: set per shard by --shards; not with --shards itself")


def _apply_shard(
    flags: dict[str, Any], checked: Any, overrides: dict[str, Any], share: tuple[int, int] | None
) -> tuple[int, int] | None:
    """``--shard I/N``: pick the shard's store, record it in ``meta``, export PYATACKER_SHARD."""
    from pyattacker.config.build import resolve_store  # start-up: the config layer is heavy

    if flags["shard"] is None:
        if share is not None:
            overrides["meta"] = {**checked.run.get("meta", {}), "capacity_share": f"{share[0]}/{share[1]}"}
        return None
    index, count = parse_shard(flags["shard"])
    explicit = flags["store"]
    if explicit is None and not checked.run.get("store"):
        raise ConfigError(
            "--shard: no store is set, and each shard writes a store of its own; give one with"
            " --store PATH (used as is) or run.store in the config (the shard's suffix is added)"
        )
    base = resolve_store(checked, explicit)
    if is_memory_store(base):
        raise ConfigError(
            f"--shard: store {base!r} is in memory; a shard needs a store that outlives the process"
            " (set --store or run.store to a file)"
        )
    overrides["store"] = base if explicit is not None else shard_store_path(base, index, count)
    meta = {**checked.run.get("meta", {}), "shard": f"{index}/{count}"}
    if share is not None:
        meta["capacity_share"] = f"{share[0]}/{share[1]}"
    overrides["meta"] = meta
    os.environ[SHARD_ENV] = f"{index}/{count}"
    _stop_with_parent()
    return index, count


def _check_resume_layout(flags: dict[str, Any], checked: Any, shard: tuple[int, int] | None) -> None:
    """A resume without ``--shards``: refuse it when its store is missing but the stores of a
    sharded run (or of another ``--shard I/N`` count) are there (``check_resume_layout``):
    it would run every pipeline again. ``--shard I/N --store PATH`` names its file itself
    (an orchestrator's, or a ``--shards`` parent's), so there is no layout to compare."""
    from pyattacker.config.build import resolve_store  # start-up: the config layer is heavy

    if shard is not None and flags["store"] is not None:
        return
    base = resolve_store(checked, flags["store"])
    count = 1 if shard is None else shard[1]
    check_resume_layout(base, count, "" if shard is None else f"--shard {shard[0]}/{shard[1]}")


def _stop_with_parent() -> None:
    """A shard started by a process-based executor stops itself (SIGTERM: graceful, resumable)
    when that parent is gone, so no shard outlives the parent however the parent ended."""
    raw = os.environ.pop(PARENT_PID_ENV, None)
    try:
        parent = int(raw) if raw else 0
    except ValueError:
        return
    if parent <= 0:
        return

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        warn(f"the shard's parent process {parent} is gone; stopping (resumable)")
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, daemon=True, name="pyattacker-parent-watch").start()


def _warn_nothing_to_resume(store: str) -> None:
    """``resume`` of a store that does not exist starts from nothing: most likely a typo."""
    from pyattacker.store.location import local_file  # start-up: the store layer loads on use

    path = local_file(store)
    if path and not os.path.exists(path):
        warn(f"resume: store {path} does not exist; nothing to resume, starting a fresh run")


@click.command("run")
@_run_options
def run_command(**flags: Any) -> None:
    """Run the pipelines of a declarative config file.

    The config is validated first (exactly like `validate`); nothing starts if it is invalid.
    With no store (no `--store`, no `run.store`) results go to the embedded default SQLite
    file under the user data folder (`PYATTACKER_HOME` overrides); the summary says where.
    Exit codes: 0 all succeeded, 1 some failed, 2 config/framework error, 130 interrupted.
    """
    _run(flags, resume=False)


@click.command("resume")
@_run_options
def resume_command(**flags: Any) -> None:
    """Run again with `--resume`: finished pipelines are skipped, the rest continue.

    Same flags as `run`. A task whose artifact is already stored is never executed again.
    """
    _run(flags, resume=True)
