"""``pyattacker demo``: simulated pipelines (prepare -> ask -> judge) on three simulated endpoints.

No network and no config: it checks that an installation works, and with ``--fail-rate`` shows
retries and a degraded endpoint. It runs and reports exactly as ``run`` does
(``pyattacker.cli.execute``).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import rich_click as click

from pyattacker.cli.common import check_store_flag
from pyattacker.cli.execute import execute, finish
from pyattacker.engine.settings import MAX_CONCURRENCY, RunConfig
from pyattacker.errors import ConfigError
from pyattacker.flow.retry import Retrying
from pyattacker.flow.taskspec import task
from pyattacker.paths import make_parent

__all__ = ["demo_command", "demo_judge", "demo_prepare"]


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
    from pyattacker.resources.pool import Pool  # start-up: `--help` imports this module

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
    # start-up: `--help` imports this module
    from pyattacker.flow.chain import pipeline
    from pyattacker.plugins.manager import get_plugins

    factory = get_plugins().tasks.get("simulate_llm")
    if factory is None:
        raise ConfigError(
            "the built-in task simulate_llm is missing: reinstall pyattacker (pip install -e .)"
        )
    ask = factory(latency_ms=5, fail_rate=fail_rate, tokens=64).with_overrides(
        name="ask", resource="sim", retry=Retrying(max_attempts=4, base=0.05, cap=0.4)
    )
    return pipeline("demo.qa", demo_prepare, ask, demo_judge)  # the reference's name


def _export_results(store_location: str, run_id: str, path: str) -> int:
    """Write one JSON line per pipeline of the run: state, error and the final result."""
    # start-up: `--help` imports this module
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
                            "name": row.name,
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
    folder created) or ``demo.db`` beside the default store, replaced by each demo."""
    # start-up: `--help` imports this module
    from pyattacker.config.build import store_location
    from pyattacker.store.location import local_file

    if not store:
        return _demo_store()
    check_store_flag(store)
    location = store_location(store)
    local = local_file(location)
    if local is not None:
        make_parent(local, "--store")
    return location


def _demo_store() -> str:
    """``demo.db`` beside the default store, emptied first: every demo reuses the one file. A
    demo already writing it (its writer lock held) is left alone, and this one gets a file of
    its own."""
    # start-up: `--help` imports this module
    from pyattacker.errors import StoreUnavailable
    from pyattacker.store.location import default_store_path
    from pyattacker.store.writer_lock import WriterLock

    folder = default_store_path().parent
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "demo.db"
    try:
        # the lock beside a SQLite store (the default store's kind) is PATH.lock
        lock = WriterLock.acquire(f"{path}.lock", str(path))
    except StoreUnavailable:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        return str(folder / f"demo-{stamp}-{uuid.uuid4().hex[:6]}.db")
    try:
        # (and the record of what the old file held: the new one must not be measured by it)
        for leftover in (path, folder / "demo.db-wal", folder / "demo.db-shm", folder / "demo.db.contents"):
            leftover.unlink(missing_ok=True)
    finally:
        lock.release()
    return str(path)


@click.command("demo")
@click.option(
    "--store", help="Where to write (default: demo.db in the default store folder, replaced by each demo)."
)
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
    location = _demo_location(store)
    if export_path:
        make_parent(export_path, "--export")  # before the run, not after it
    pools = _demo_pools(fail_rate)
    template = _demo_template(fail_rate)
    config = RunConfig(store=location, concurrency=concurrency, label="demo")
    specs: Iterator[Any] = template.map({"i": i} for i in range(pipelines))
    report, health = execute(config, pools, specs, total=pipelines, progress=progress)
    if export_path:
        n = _export_results(location, report.run_id, export_path)
        click.echo(f"exported {n} results to {export_path}", err=True)
    finish(report, health, pools, location, summary_format)
