"""Experiment suites on the command line: the suite flags, and ``run``/``resume``/``validate``
of a suite config.

A suite config (``suite:``/``experiments:`` sections) runs every selected member in this one
process, into one output root (``pyattacker.config.suite_build``). The flags of one store or
of sharding (``--store``, ``--shard``, ``--shards``, ...) are refused with a suite, saying why;
``--experiment`` and ``--output-root`` are refused without one.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import rich_click as click

from pyattacker.cli.common import check_backend_flag, flag_overrides, out, warn
from pyattacker.errors import ConfigError, ExitCode

__all__ = ["is_suite_file", "run_suite", "suite_flags", "validate_suite"]

#: flag -> (takes a value, help)
_FLAGS: dict[str, tuple[bool, str]] = {
    "--experiment": (True, "With a suite: only this experiment (repeatable; default: every one)."),
    "--output-root": (
        True,
        "With a suite config: its output folder (overrides output.root; relative to cwd).",
    ),
    "--by-experiment": (
        False,
        "With a suite directory: one file per experiment, OUTPUT/<ID>/<rows>.<format>.",
    ),
}
#: the sharding flags a suite refuses, as their ``flags`` keys
_SHARDING = ("shard", "shards", "jobs", "executor", "full_capacity_per_shard", "capacity_share")
_NOT_SHARDED = "a suite runs every experiment in one process under one admission budget, and is not sharded"


def suite_flags(*flags: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The options ``flags`` (``experiment`` is a tuple, ``output_root`` a string or None,
    ``by_experiment`` a bool)."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        for flag in reversed(flags):
            takes_value, help_text = _FLAGS[flag]
            if flag == "--experiment":
                fn = click.option(flag, "experiment", multiple=True, metavar="ID", help=help_text)(fn)
            elif takes_value:
                fn = click.option(flag, metavar="PATH", default=None, help=help_text)(fn)
            else:
                fn = click.option(flag, is_flag=True, default=False, help=help_text)(fn)
        return fn

    return decorate


def is_suite_file(path: str) -> bool:
    """Whether the config at ``path`` is a suite (an unreadable file is left to the normal path)."""
    from pathlib import Path

    # start-up: the config layer is heavy, and `--help` imports this module
    from pyattacker.config.load import read_document
    from pyattacker.config.suite import is_suite

    try:
        return is_suite(read_document(Path(path).expanduser().absolute()))
    except (ConfigError, RecursionError, OSError):
        return False


def _refuse_flags(flags: dict[str, Any]) -> None:
    if flags.get("store") is not None:
        from pyattacker.config.suite import STORE_REFUSED

        raise ConfigError(f"--store: not allowed with a suite: {STORE_REFUSED}")
    for name in _SHARDING:
        if flags.get(name):
            raise ConfigError(f"--{name.replace('_', '-')}: not allowed with a suite: {_NOT_SHARDED}")


def _checked(path: str, strict_env: bool) -> Any:
    from pyattacker.config.build import load_config
    from pyattacker.config.suite import check_suite

    loaded = load_config(path, strict_env=strict_env)
    for warning in loaded.warnings:
        warn(warning)
    checked = check_suite(loaded, strict_env=strict_env)
    for member in checked.members:
        for warning in member.checked.loaded.warnings:
            warn(f"experiments.{member.id}: {warning}")
        for note in member.checked.notes:
            warn(f"experiments.{member.id}: {note}")
        if member.ignored_run_fields:
            warn(
                f"experiments.{member.id}: run fields ignored in a suite (the suite's run block"
                f" governs): {', '.join(member.ignored_run_fields)}"
            )
    return checked


def run_suite(flags: dict[str, Any], *, resume: bool) -> None:
    """``run``/``resume`` of a suite config; exits with the run's code (1 when a member's
    source failed although every pipeline that ran succeeded)."""
    from pyattacker.cli.execute import execute, finish
    from pyattacker.config.suite_build import build_suite

    _refuse_flags(flags)
    check_backend_flag(flags["artifact_backend"])
    checked = _checked(flags["config_path"], flags["strict_env"])
    built = build_suite(
        checked,
        flag_overrides(flags, resume),
        selected=tuple(flags["experiment"]),
        output_root=flags["output_root"],
        limit=flags["limit"],
    )
    warn(f"suite {checked.id}: experiments {', '.join(m.id for m in built.members)} -> {built.root}")
    report, health = execute(
        built.config,
        built.pools,
        built.specs(),
        total=built.total,
        progress=flags["progress"],
        store=built.open_store(),
    )
    built.record_outcome()
    for exp_id, problem in built.source_errors.items():
        warn(f"experiment {exp_id}: its source failed ({problem}); the other experiments ran on")
    try:
        finish(report, health, built.pools, str(built.root), flags["summary_format"])
    except SystemExit as done:
        if built.source_errors and done.code == ExitCode.OK:
            raise SystemExit(int(ExitCode.FAILED)) from None
        raise


def validate_suite(path: str, strict_env: bool, fmt: str, *, strict: bool = False) -> None:
    """``validate`` of a suite: every member checked; the suite as it would run is printed. A
    member's missing source file is a warning (with ``strict``, an error naming the member)."""
    from pyattacker.config.build import effective_config, source_problem
    from pyattacker.config.suite_build import definition_digest, suite_root

    checked = _checked(path, strict_env)
    for m in checked.members:
        missing = source_problem(m.checked)
        if missing is not None and strict:
            raise ConfigError(
                f"{checked.loaded.path}: invalid suite config\n"
                f"  experiments.{m.id}.config: {missing} (--strict)"
            )
        if missing is not None:
            warn(f"experiments.{m.id}.config: {missing} (run refuses to start without it)")
    doc = {
        "suite": checked.id,
        "config": str(checked.loaded.path),
        "output": {"root": str(suite_root(checked, None)), "layout": checked.layout},
        "run": checked.run,
        "pools": list(checked.pools),
        "experiments": {
            m.id: {
                "config": str(m.checked.loaded.path),
                "label": m.label,
                "limit": m.limit,
                "pool_bindings": m.pool_bindings,
                "ignored_run_fields": m.ignored_run_fields,
                "definition_digest": definition_digest(m),
                "pipeline": effective_config(m.checked)["pipeline"],
            }
            for m in checked.members
        },
    }
    if fmt == "json":
        out(json.dumps(doc, default=str, indent=2))
        return
    out(f"suite: {checked.id}  (output {doc['output']['root']}, layout {checked.layout})")
    for m in checked.members:
        bound = ", ".join(f"{k}->{v}" for k, v in m.pool_bindings.items()) or "none"
        limit = f"  limit {m.limit}" if m.limit else ""
        out(f"  experiment {m.id}: {m.checked.loaded.path}  bindings {bound}{limit}")
    out("suite config is valid")
