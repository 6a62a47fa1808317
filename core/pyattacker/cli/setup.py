"""``pyattacker validate`` and ``pyattacker init``: check a config file, or write a starter one.

``validate`` runs the same checks as ``run`` (``pyattacker.config.build``) without opening the
dataset, creating folders or calling tasks; ``init`` writes a commented TOML config
(``starter_document``) and never overwrites a file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import rich_click as click

from pyattacker.cli.common import out, warn
from pyattacker.errors import ConfigError
from pyattacker.paths import make_parent

if TYPE_CHECKING:
    from tomlkit import TOMLDocument

__all__ = ["init_command", "starter_document", "validate_command"]


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
    note = "  # the default: the file has no source: section" if effective.get("source_is_default") else ""
    lines.append("source: " + json.dumps(effective["source"], default=str) + note)
    return "\n".join(lines)


@click.command("validate")
@click.option(
    "-c", "--config", "config_path", required=True, metavar="PATH", help="The config file to check."
)
@click.option("--strict-env", is_flag=True, default=False, help="An unset ${VAR} is an error, not a warning.")
@click.option(
    "--strict",
    is_flag=True,
    default=False,
    help="Every warning is an error: an unset ${VAR}, a missing source file.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="How to print the effective config.",
)
def validate_command(config_path: str, strict_env: bool, strict: bool, fmt: str) -> None:
    """Check a config file without running anything; print the effective config.

    Reports every problem (one per line, each with its field path) and exits 2, or prints the
    config as it would run and exits 0. Never reads the dataset, creates folders or calls tasks;
    a missing source file is a warning (an error with --strict).
    """
    # start-up: the config layer is heavy, and `--help` imports this module
    from pyattacker.cli.suites import is_suite_file, validate_suite
    from pyattacker.config.build import check_config, effective_config, load_config, source_problem

    if is_suite_file(config_path):
        validate_suite(config_path, strict_env or strict, fmt, strict=strict)
        return
    loaded = load_config(config_path, strict_env=strict_env or strict)
    for warning in loaded.warnings:
        warn(warning)
    checked = check_config(loaded)
    for note in checked.notes:
        warn(note)
    missing = source_problem(checked)
    if missing is not None and strict:
        raise ConfigError(f"{loaded.path}: invalid config\n  {missing} (--strict)")
    if missing is not None:
        warn(f"{loaded.path}: {missing} (run refuses to start without it; --strict makes this an error)")
    effective = effective_config(checked)
    if fmt == "json":
        out(json.dumps(effective, default=str, indent=2))
    else:
        out(_readable(effective))
        out("config is valid")


def starter_document() -> TOMLDocument:
    """The commented starter config, built with tomlkit so the comments survive."""
    import tomlkit  # start-up: only `init` writes TOML

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
    target = Path(path)
    if target.suffix.lower() != ".toml":  # the starter is TOML, with its comments
        raise ConfigError(f"PATH {target}: init writes a TOML config; name it *.toml")
    if target.exists():
        raise ConfigError(f"{target}: already exists; not overwriting it (choose another PATH)")
    make_parent(target, "PATH")
    try:
        with open(target, "x", encoding="utf-8") as fh:
            fh.write(starter_document().as_string())
    except FileExistsError:
        raise ConfigError(f"{target}: already exists; not overwriting it") from None
    out(f"wrote {target}; next: pyattacker validate -c {target} && pyattacker run -c {target}")
