"""Stores with several runs, written by the real runner: what ``runs``, ``compare`` and the
viewer's runs pages are tested on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyattacker import Pool, Resource, Runner, pipeline
from tests.support.views import XSS, fetch, judge


def run_into(path: Path, n: int, start: int = 0, concurrency: int = 4, **overrides: Any) -> str:
    """One run of ``n`` two-task pipelines (seeds from ``start``) into the store at ``path``;
    run-scope metric ``accuracy`` is ``0.5 + start / 100``."""
    pools = [Pool("api", [Resource("llm", id="r1", capacity=2)])]

    def finished(runner: Runner, record: Any, artifact: Any) -> None:
        runner.report_metric("accuracy", 0.5 + start / 100)

    with Runner(
        store=str(path), pools=pools, concurrency=concurrency, on_pipeline_finished=finished, **overrides
    ) as runner:
        runner.run(
            pipeline("p", fetch, judge).map(
                ({"i": i} for i in range(start, start + n)), key_of=lambda s: f"k{s['i']}"
            )
        )
    return str(path)


def two_run_store(path: Path) -> str:
    """10 pipelines at concurrency 4, then 14 more at concurrency 2 with a label and notes that
    hold markup (the second run's notes: ``tried concurrency 2`` then the markup)."""
    run_into(path, 10)
    run_into(path, 14, start=10, concurrency=2, label=XSS, notes=f"tried concurrency 2\n{XSS}")
    return str(path)
