"""``pyattacker run / resume / validate / demo / init``: the commands that start work.

All of them go through ``pyattacker.config.build`` (``run`` and ``resume`` validate exactly like
``validate`` before a store is created), print the summary on stdout (a rich table, or one
JSON object with ``--summary-format json``) and progress/warnings on stderr, and exit with
the documented code: 0 all succeeded, 1 some failed, 2 config or framework error, 130
interrupted (resumable). The runner's own SIGINT handling is what stops a run: the first
Ctrl-C finishes running attempts (up to ``grace_s``), the second stops at once.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import rich_click as click

from pyattacker.cli.suites import refuse_suite_flags
from pyattacker.engine.report import RunReport
from pyattacker.engine.settings import MAX_CONCURRENCY
from pyattacker.errors import ConfigError, PyAttackerError, StoreUnavailable
from pyattacker.flow.taskspec import task
from pyattacker.paths import make_parent

__all__ = ["demo_command", "init_command", "resume_command", "run_command", "validate_command"]


# -- output ----------------------------------------------------------------------------------
def _silence_stdout() -> None:
    """The reader of stdout went away (``| head``): send the rest to /dev/null, keep going."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except OSError:
        pass


def _out(text: str) -> None:
    """Write to stdout and flush; a closed pipe is not an error (and never a traceback)."""
    try:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()


def _print_rich(renderable: Any) -> None:
    from rich.console import Console

    try:
        Console(file=sys.stdout, soft_wrap=False).print(renderable)
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()


def _warn(text: str) -> None:
    try:
        click.echo(f"Warning: {text}", err=True)
    except BrokenPipeError:
        pass


# -- running ---------------------------------------------------------------------------------
class _HealthLog:
    """Counts each resource's degraded / dead / recovered transitions during the run."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, str], dict[str, int]] = {}

    def __call__(self, event: Any) -> None:
        if event.kind in ("resource.degraded", "resource.dead", "resource.recovered") and event.resource_id:
            row = self.counts.setdefault((event.pool, event.resource_id), {})
            name = event.kind.split(".", 1)[1]
            row[name] = row.get(name, 0) + 1


def _execute(
    config: Any,
    pools: list[Any],
    specs: Iterable[Any],
    *,
    total: int | None,
    progress: bool,
    template: Any = None,
) -> tuple[RunReport, _HealthLog]:
    """Open the store, run every spec (with an optional progress bar), return the report."""
    from pyattacker.engine.runner import Runner

    health = _HealthLog()
    for pool in pools:
        pool.listeners.append(health)
    try:
        runner = Runner(config=config, pools=pools)
    except PyAttackerError:
        raise
    except Exception as exc:
        raise StoreUnavailable(f"cannot open store {config.store}: {type(exc).__name__}: {exc}") from exc
    with runner:
        if template is not None:  # before the run row: nothing is written for a refused run
            runner.check_control(template)

        async def main() -> RunReport:
            if not progress:
                return await runner.run_async(specs, expected=total)
            from pyattacker.views.progress import RunProgress

            async with RunProgress(runner, total):
                return await runner.run_async(specs, expected=total)

        with asyncio.Runner(loop_factory=runner.loop_factory()) as loop_runner:
            report = loop_runner.run(main())
    return report, health


def _summary_table(report: RunReport, health: _HealthLog, pools: list[Any]) -> Any:
    from rich.table import Table

    c = report.counters
    table = Table(title=f"run {report.run_id}", show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value", overflow="fold")  # paths are copied from here: never cut them
    status = report.status + (f" ({report.stop_reason})" if report.stop_reason else "")
    table.add_row("status", status)
    table.add_row(
        "pipelines",
        f"succeeded {c.get('pipelines_succeeded', 0)}  failed {c.get('pipelines_failed', 0)}"
        f"  interrupted {c.get('pipelines_interrupted', 0)}  skipped {c.get('skipped', 0)}",
    )
    handoffs = f"  handoffs {c['handoffs']}" if c.get("handoffs") else ""
    table.add_row("attempts", f"total {c.get('attempts', 0)}  retries {c.get('retries', 0)}{handoffs}")
    seconds = report.duration_ms / 1000
    done = c.get("pipelines_succeeded", 0) + c.get("pipelines_failed", 0)
    rate = f"  ({done / seconds:.1f} pipelines/s)" if seconds > 0 and done else ""
    table.add_row("duration", f"{seconds:.2f}s{rate}")
    for pool in pools:
        for row in pool.snapshot():
            events = health.counts.get((pool.name, row["id"]), {})
            notes = "  ".join(f"{k} x{v}" for k, v in sorted(events.items()))
            table.add_row(
                f"{pool.name}/{row['id']}",
                f"{row['state']}  leases {row['leases']}  failed {row['failed']}"
                + (f"  ({notes})" if notes else ""),
            )
    if c.get("leases_leaked"):
        table.add_row("leases leaked", str(c["leases_leaked"]))
    if c.get("repair_failures"):
        table.add_row("repair failures", str(c["repair_failures"]))
    if report.producer_error:
        table.add_row("source error", report.producer_error)
    table.add_row("store", str(report.store))
    table.add_row("exit code", str(report.exit_code))
    return table


def _finish(
    report: RunReport,
    health: _HealthLog,
    pools: list[Any],
    store: str,
    summary_format: str,
    shard: tuple[int, int] | None = None,
) -> None:
    """Print the summary and exit with the report's code (0 / 1 / 2 / 130).

    The JSON summary is ``RunReport.to_dict()`` plus ``store``, ``shard`` (``"I/N"`` of
    ``--shard``, else null) and ``repair_failures`` (the count of ``counters.repair_failures``
    at the top level, where the CLI reference names it)."""
    if summary_format == "json":
        data = report.to_dict()
        data["store"] = store
        data["shard"] = f"{shard[0]}/{shard[1]}" if shard is not None else None
        data["repair_failures"] = report.repair_failures
        _out(json.dumps(data, default=str, sort_keys=True))
    else:
        _print_rich(_summary_table(report, health, pools))
        if report.exit_code == 130:
            _warn(
                "interrupted: every unfinished pipeline is resumable"
                " (run `pyattacker resume` with the same flags)"
            )
        if report.producer_error:
            _warn(f"the source failed: {report.producer_error}")
    sys.exit(report.exit_code)


# -- run / resume ------------------------------------------------------------------------------
def _run_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The flags shared by ``run`` and ``resume`` (sharding included)."""
    options = [
        click.option(
            "-c",
            "--config",
            "config_path",
            required=True,
            metavar="PATH",
            help="Config file: .toml, .json, .yaml/.yml (YAML needs PyYAML, the `yaml` extra).",
        ),
        click.option(
            "--limit", type=click.IntRange(min=1), help="Only run the first N pipelines (smoke test)."
        ),
        click.option(
            "--store", help="Store location; overrides `run.store` (relative to the current folder)."
        ),
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
        click.option(
            "--shard",
            metavar="I/N",
            help="Run only shard I of N (0-based) into its own store; you orchestrate the others.",
        ),
        click.option(
            "--shards",
            type=click.IntRange(min=2),
            help="Run all N shards as local child processes, then print the merged report.",
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
    ]
    for option in reversed(options):
        fn = option(fn)
    # the suite flags of the CLI reference: refused by name, one line (not supported here)
    fn = refuse_suite_flags("--experiment", "--output-root")(fn)
    return fn


def _flag_overrides(flags: dict[str, Any], resume: bool) -> dict[str, Any]:
    """Flags given on the command line, as RunConfig fields (absent flags leave the file's value)."""
    out: dict[str, Any] = {
        "store": flags["store"],
        "concurrency": flags["concurrency"],
        "max_admitted": flags["max_admitted"],
        "journal": flags["journal"],
        "label": flags["label"],
        "stop_after_failures": flags["stop_after_failures"],
        "artifact_backend": flags["artifact_backend"],
    }
    if resume or flags["resume"]:
        out["resume"] = True
    for name in ("retry_succeeded", "fresh_restart", "strict_leases"):
        if flags[name]:
            out[name] = True
    if flags["no_signals"]:
        out["handle_signals"] = False
    if flags["no_write_behind"]:
        out["write_behind"] = False
    return {k: v for k, v in out.items() if v is not None}


def _check_backend_flag(spec: str | None) -> None:
    if spec is None:
        return
    from pyattacker.plugins.manager import get_plugins
    from pyattacker.store.backends import validate_backend_spec

    problems = validate_backend_spec(spec, get_plugins().artifact_backends, "--artifact-backend")
    if problems:
        raise click.BadParameter("; ".join(problems), param_hint="'--artifact-backend'")


def _check_store_flag(location: str | None) -> None:
    """``--store`` with a scheme no installed store plugin handles (or nothing after its scheme)
    is a bad flag value, refused before anything is read or created: ``demo --store foo://x``
    used to write ``./foo:/x``, and ``run`` failed only once it had started."""
    if location is None:
        return
    from pyattacker.config.build import store_problem

    problem = store_problem(location)
    if problem is not None:
        raise click.BadParameter(problem, param_hint="'--store'")


def _run(flags: dict[str, Any], *, resume: bool) -> None:
    from pyattacker.config.build import build, check_config, load_config

    _check_shard_flags(flags)
    _check_store_flag(flags["store"])
    if flags["shards"] is not None:
        from pyattacker.cli.shard import run_sharded

        run_sharded(flags, resume=resume)
        return
    _check_backend_flag(flags["artifact_backend"])
    loaded = load_config(flags["config_path"], strict_env=flags["strict_env"])
    for warning in loaded.warnings:
        _warn(warning)
    checked = check_config(loaded)
    overrides = _flag_overrides(flags, resume)
    share = None
    if flags["capacity_share"] is not None:
        from pyattacker.shard.plan import parse_capacity_share

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
        from pyattacker.shard.plan import shard_keeper

        specs = built.specs(keep=shard_keeper(*shard))  # other shards' seeds are not bound here
        total = None  # the share of a shard is only known by walking the keys
    else:
        specs = built.specs()
    report, health = _execute(
        built.config, built.pools, specs, total=total, progress=flags["progress"], template=built.template
    )
    _finish(report, health, built.pools, str(built.config.store), flags["summary_format"], shard)


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
    elif flags["capacity_share"] is not None:
        raise ConfigError("--capacity-share: set per shard by --shards; not with --shards itself")


def _apply_shard(
    flags: dict[str, Any], checked: Any, overrides: dict[str, Any], share: tuple[int, int] | None
) -> tuple[int, int] | None:
    """``--shard I/N``: pick the shard's store, record it in ``meta``, export PYATACKER_SHARD."""
    from pyattacker.config.build import resolve_store
    from pyattacker.shard.plan import SHARD_ENV, is_memory_store, parse_shard, shard_store_path

    if flags["shard"] is None:
        if share is not None:
            overrides["meta"] = {**checked.run.get("meta", {}), "capacity_share": f"{share[0]}/{share[1]}"}
        return None
    index, count = parse_shard(flags["shard"])
    explicit = flags["store"]
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
    from pyattacker.config.build import resolve_store
    from pyattacker.shard.plan import check_resume_layout

    if shard is not None and flags["store"] is not None:
        return
    base = resolve_store(checked, flags["store"])
    count = 1 if shard is None else shard[1]
    check_resume_layout(base, count, "" if shard is None else f"--shard {shard[0]}/{shard[1]}")


def _stop_with_parent() -> None:
    """A shard started by a process-based executor stops itself (SIGTERM: graceful, resumable)
    when that parent is gone, so no shard outlives the parent however the parent ended."""
    import signal
    import threading

    from pyattacker.shard.executor import PARENT_PID_ENV

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
        _warn(f"the shard's parent process {parent} is gone; stopping (resumable)")
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, daemon=True, name="pyattacker-parent-watch").start()


def _warn_nothing_to_resume(store: str) -> None:
    """``resume`` of a store that does not exist starts from nothing: most likely a typo."""
    from pyattacker.store.location import local_file

    path = local_file(store)
    if path and not os.path.exists(path):
        _warn(f"resume: store {path} does not exist; nothing to resume, starting a fresh run")


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


# -- validate --------------------------------------------------------------------------------
def _readable(effective: dict[str, Any]) -> str:
    run = effective["run"]
    lines = [f"config: {effective['config']}  (relative paths from {effective['base_dir']})", "run:"]
    for key, value in run.items():
        note = "  # the embedded default" if key == "store" and effective.get("store_is_default") else ""
        lines.append(f"  {key}: {json.dumps(value, default=str)}{note}")
    lines.append("pools:" + ("" if effective["pools"] else " {}"))
    for name, pool in effective["pools"].items():
        lines.append(f"  {name}: kind={pool['kind']} algorithm={json.dumps(pool['algorithm'])}")
        for res in pool["resources"]:
            lines.append(f"    - {json.dumps(res, default=str)}")
    pipe = effective["pipeline"]
    lines.append(f"pipeline: {pipe['name']}  (spec {pipe['spec_digest']})")
    for t in pipe["tasks"]:
        extras = [
            f"resource={t['resource']}" if t["resource"] else "",
            f"algorithm={json.dumps(t['algorithm'])}" if t["algorithm"] else "",
            f"timeout_s={t['timeout_s']}" if t["timeout_s"] else "",
            f"max_attempts={t['retry']['max_attempts']}" if t["retry"]["max_attempts"] > 1 else "",
            f"kwargs={json.dumps(t['factory']['args'])}" if t["factory"] else "",
        ]
        lines.append(f"  [{t['seq']}] {t['name']} <- {t['target']}  " + " ".join(e for e in extras if e))
    if "control" in pipe:
        lines.append("  control: " + json.dumps(pipe["control"]))
    lines.append("source: " + json.dumps(effective["source"], default=str))
    return "\n".join(lines)


@click.command("validate")
@click.option(
    "-c", "--config", "config_path", required=True, metavar="PATH", help="The config file to check."
)
@click.option("--strict-env", is_flag=True, default=False, help="An unset ${VAR} is an error, not a warning.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="How to print the effective config.",
)
def validate_command(config_path: str, strict_env: bool, fmt: str) -> None:
    """Check a config file without running anything; print the effective config.

    Reports every problem (one per line, each with its field path) and exits 2, or prints the
    config as it would run and exits 0. Never opens the dataset, creates folders or calls tasks.
    """
    from pyattacker.config.build import check_config, effective_config, load_config

    loaded = load_config(config_path, strict_env=strict_env)
    for warning in loaded.warnings:
        _warn(warning)
    effective = effective_config(check_config(loaded))
    if fmt == "json":
        _out(json.dumps(effective, default=str, indent=2))
    else:
        _out(_readable(effective))
        _out("config is valid")


# -- demo ------------------------------------------------------------------------------------
@task(name="prepare")
def demo_prepare(seed: dict[str, Any]) -> dict[str, Any]:
    """Turn a seed into a prompt (the 'prepare' step of a typical evaluation)."""
    return {"id": seed["i"], "prompt": f"Question #{seed['i']}: what is {seed['i']} + {seed['i']}?"}


@task(name="judge")
def demo_judge(answer: dict[str, Any]) -> dict[str, Any]:
    """Score an answer deterministically (the 'judge' step)."""
    return {
        "id": answer["input"]["id"],
        "answer": answer["answer"],
        "score": int(answer["answer"][-1], 16) % 2,
    }


def _demo_pools(fail_rate: float) -> list[Any]:
    """Three simulated endpoints with different personalities; sim-3 is the flaky one."""
    from pyattacker.resources.pool import Pool

    flaky = min(1.0, fail_rate * 2 + 0.1) if fail_rate > 0 else 0.0
    resources = [
        {"id": "sim-1", "capacity": 6, "cooldown_s": 0.5, "dead_after": 1000, "options": {"latency_ms": 3}},
        {"id": "sim-2", "capacity": 6, "cooldown_s": 0.5, "dead_after": 1000, "options": {"latency_ms": 6}},
        {
            "id": "sim-3",
            "capacity": 4,
            "cooldown_s": 0.8,
            "dead_after": 1000,
            "options": {"latency_ms": 10, "fail_rate": flaky},
        },
    ]
    return [Pool("sim", resources, kind="llm")]


def _demo_template(fail_rate: float) -> Any:
    from pyattacker.flow.chain import pipeline
    from pyattacker.flow.retry import Retrying
    from pyattacker.plugins.manager import get_plugins

    factory = get_plugins().tasks.get("simulate_llm")
    if factory is None:
        raise ConfigError(
            "the built-in task simulate_llm is missing: reinstall pyattacker (pip install -e .)"
        )
    ask = factory(latency_ms=5, fail_rate=fail_rate, tokens=64).with_overrides(
        name="ask", resource="sim", retry=Retrying(max_attempts=4, base=0.05, cap=0.4)
    )
    return pipeline("demo", demo_prepare, ask, demo_judge)


def _export_results(store_location: str, run_id: str, path: str) -> int:
    """Write one JSON line per pipeline of the run: state, error and the final result."""
    from pyattacker.store.base import iter_rows
    from pyattacker.store.codecs import CodecRegistry
    from pyattacker.store.location import open_store

    make_parent(path, "--export")
    try:
        fh = open(path, "w", encoding="utf-8")  # noqa: SIM115 - closed below, after the store
    except OSError as exc:
        raise ConfigError(f"--export: cannot write {path}: {exc.strerror or exc}") from None
    store = open_store(store_location, read_only=True)
    codecs = CodecRegistry.from_plugins()
    count = 0
    try:
        with fh:
            for row in iter_rows(store, "pipelines", run_id=run_id):
                result = None
                if row.state == "succeeded" and row.n_tasks_total:
                    art = store.get_artifact(row.pipeline_id, row.n_tasks_total - 1)
                    if art is not None and art.payload is not None:
                        result = codecs.decode(art.codec, art.type_name, art.payload)
                fh.write(
                    json.dumps(
                        {
                            "pipeline_id": row.pipeline_id,
                            "state": row.state,
                            "attempts": row.attempts_total,
                            "failed_task": row.failed_task,
                            "error_class": row.error_class,
                            "error": row.error_message,
                            "result": result,
                        },
                        default=str,
                    )
                    + "\n"
                )
                count += 1
    finally:
        store.close()
    return count


def _demo_location(store: str | None) -> str:
    """Where the demo writes: ``--store`` (checked like ``run``'s; a path relative to the cwd, its
    folder created) or a new ``demo-*.db`` beside the default store."""
    from pyattacker.config.build import store_location
    from pyattacker.store.location import local_file

    if not store:
        return _demo_store()
    _check_store_flag(store)
    location = store_location(store)
    local = local_file(location)
    if local is not None:
        make_parent(local, "--store")
    return location


def _demo_store() -> str:
    from pyattacker.store.location import default_store_path

    folder = default_store_path().parent
    folder.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return str(folder / f"demo-{stamp}-{uuid.uuid4().hex[:6]}.db")


@click.command("demo")
@click.option("--store", help="Where to write (default: a new demo-*.db under the default store folder).")
@click.option(
    "--pipelines", type=click.IntRange(min=1), default=50, show_default=True, help="How many pipelines."
)
@click.option(
    "--concurrency",
    type=click.IntRange(min=1, max=MAX_CONCURRENCY),
    default=16,
    show_default=True,
    help="Attempts at once.",
)
@click.option(
    "--fail-rate",
    type=click.FloatRange(0.0, 1.0),
    default=0.0,
    show_default=True,
    help="Simulated failure rate (e.g. 0.3) to watch retries and a degraded endpoint.",
)
@click.option("--export", "export_path", metavar="PATH", help="Also write the results as JSONL.")
@click.option("--progress", is_flag=True, default=False, help="Live progress bar on stderr.")
@click.option("--summary-format", type=click.Choice(["text", "json"]), default="text", show_default=True)
def demo_command(
    store: str | None,
    pipelines: int,
    concurrency: int,
    fail_rate: float,
    export_path: str | None,
    progress: bool,
    summary_format: str,
) -> None:
    """Run simulated pipelines (prepare -> ask -> judge) on three simulated endpoints.

    No network, no config: checks that an installation works. `--fail-rate 0.3` makes calls
    fail on purpose so the summary shows retries and the flaky endpoint `sim-3` degrading.
    """
    from pyattacker.engine.settings import RunConfig

    location = _demo_location(store)
    if export_path:
        make_parent(export_path, "--export")  # before the run, not after it
    pools = _demo_pools(fail_rate)
    template = _demo_template(fail_rate)
    config = RunConfig(store=location, concurrency=concurrency, label="demo")
    specs: Iterator[Any] = template.map({"i": i} for i in range(pipelines))
    report, health = _execute(config, pools, specs, total=pipelines, progress=progress)
    if export_path:
        n = _export_results(location, report.run_id, export_path)
        click.echo(f"exported {n} results to {export_path}", err=True)
    _finish(report, health, pools, location, summary_format)


# -- init ------------------------------------------------------------------------------------
def starter_document() -> Any:
    """The commented starter config, built with tomlkit so the comments survive."""
    import tomlkit

    doc = tomlkit.document()
    doc.add(
        tomlkit.comment("pyattacker starter config: check it with `pyattacker validate -c pyattacker.toml`.")
    )
    doc.add(tomlkit.comment("Relative paths (store, source.path) are resolved from this file's folder."))
    doc.add(tomlkit.nl())
    run = tomlkit.table()
    run.add(tomlkit.comment('store: a path, ":memory:" or a plugin scheme; omit it to use the default store'))
    run.add("store", "runs/starter.db")
    run.add("concurrency", 8)
    run["concurrency"].comment("attempts running at once")
    run.add("journal", "full")
    run["journal"].comment("full keeps artifacts (task-level resume) | summary keeps digests")
    run.add("label", "starter")
    doc.add("run", run)

    pools = tomlkit.table(is_super_table=True)
    sim = tomlkit.table()
    sim.add("kind", "llm")
    sim.add("algorithm", "wait")
    sim["algorithm"].comment("wait | backoff | least_busy | failover | sticky | quota_aware")
    res = tomlkit.aot()
    endpoint = tomlkit.table()
    endpoint.add("id", "sim-1")
    endpoint.add("capacity", 4)
    endpoint["capacity"].comment("concurrent leases this endpoint allows")
    endpoint.add("cooldown_s", 1.0)
    endpoint.add("options", {"api_key": "${API_KEY:-sk-demo}"})
    res.append(endpoint)
    sim.add("resources", res)
    pools.add("sim", sim)
    doc.add("pools", pools)

    pipe = tomlkit.table()
    pipe.add("name", "starter")
    tasks = tomlkit.aot()
    first = tomlkit.table()
    first.add("use", "pyattacker.tasks:echo")
    tasks.append(first)
    ask = tomlkit.table()
    ask.add("use", "pyattacker.tasks:simulate_llm")
    ask["use"].comment("or your own task: my_pkg.tasks:ask_model")
    ask.add("name", "ask")
    ask.add("resource", "sim")
    ask.add("kwargs", {"latency_ms": 5, "fail_rate": 0.1, "tokens": 64})
    ask["kwargs"].comment("factory arguments")
    ask.add("retry", {"max_attempts": 3, "base": 0.2, "on": ["RetryableError", "TimeoutError"]})
    tasks.append(ask)
    pipe.add("tasks", tasks)
    doc.add("pipeline", pipe)

    source = tomlkit.table()
    source.add(tomlkit.comment('kind = "jsonl" with path = "data.jsonl" reads one seed per line'))
    source.add("kind", "range")
    source.add("n", 20)
    source.add("repeats", 1)
    source["repeats"].comment("pass@k: k independent pipelines per seed")
    doc.add("source", source)
    return doc


@click.command("init")
@click.argument("path", required=False, default="pyattacker.toml")
def init_command(path: str) -> None:
    """Write a commented starter config (TOML); never overwrites an existing file."""
    import tomlkit

    target = Path(path)
    if target.suffix.lower() != ".toml":  # the starter is TOML, with its comments
        raise ConfigError(f"PATH {target}: init writes a TOML config; name it *.toml")
    if target.exists():
        raise ConfigError(f"{target}: already exists; not overwriting it (choose another PATH)")
    make_parent(target, "PATH")
    try:
        with open(target, "x", encoding="utf-8") as fh:
            fh.write(tomlkit.dumps(starter_document()))
    except FileExistsError:
        raise ConfigError(f"{target}: already exists; not overwriting it") from None
    _out(f"wrote {target}; next: pyattacker validate -c {target} && pyattacker run -c {target}")
