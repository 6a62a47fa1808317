"""While a run goes, a process whose garbage collector is as Python starts it runs with what
existed before the run frozen and a larger first threshold; both are undone when the last
run ends, also by an exception. A program that set its own collector settings keeps them untouched."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pyattacker import Runner, pipeline, task
from pyattacker.engine.collector import DEFAULT_THRESHOLDS, RUN_THRESHOLD, RunCollector


@pytest.fixture
def default_collector() -> Iterator[None]:
    """The collector as the interpreter starts it, and the test's own settings put back after."""
    saved, enabled = gc.get_threshold(), gc.isenabled()
    gc.unfreeze()
    gc.enable()
    gc.set_threshold(*DEFAULT_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*saved)
        (gc.enable if enabled else gc.disable)()


def _run_seeing(tmp_path: Path) -> list[tuple[tuple[int, int, int], int]]:
    seen: list[tuple[tuple[int, int, int], int]] = []

    @task
    async def look(x: Any) -> Any:
        seen.append((gc.get_threshold(), gc.get_freeze_count()))
        return x

    with Runner(store=str(tmp_path / "gc.db"), concurrency=4) as runner:
        report = runner.run(pipeline("gc", look).map(range(3)))
    assert report.counters["pipelines_succeeded"] == 3
    return seen


@pytest.mark.usefixtures("default_collector")
def test_a_run_tunes_an_untouched_collector_and_restores_it(tmp_path: Path) -> None:
    seen = _run_seeing(tmp_path)
    assert {threshold for threshold, _ in seen} == {(RUN_THRESHOLD, *DEFAULT_THRESHOLDS[1:])}
    assert all(frozen > 0 for _, frozen in seen)
    assert gc.get_threshold() == DEFAULT_THRESHOLDS
    assert gc.get_freeze_count() == 0
    assert gc.isenabled()


@pytest.mark.usefixtures("default_collector")
def test_overlapping_runs_share_the_tuning_and_an_error_restores_it() -> None:
    outer = RunCollector().__enter__()
    with pytest.raises(RuntimeError), RunCollector():  # a second run, ending by an exception
        assert gc.get_threshold()[0] == RUN_THRESHOLD
        raise RuntimeError("the run failed")
    assert gc.get_threshold()[0] == RUN_THRESHOLD  # the first run still goes
    assert gc.get_freeze_count() > 0
    outer.__exit__(None, None, None)
    assert gc.get_threshold() == DEFAULT_THRESHOLDS
    assert gc.get_freeze_count() == 0


@pytest.mark.usefixtures("default_collector")
def test_the_programs_own_settings_are_left_alone(tmp_path: Path) -> None:
    gc.set_threshold(2_000, 20, 5)
    seen = _run_seeing(tmp_path)
    assert {s for s in seen} == {((2_000, 20, 5), 0)}
    assert gc.get_threshold() == (2_000, 20, 5)


@pytest.mark.usefixtures("default_collector")
def test_objects_frozen_before_the_run_stay_frozen_and_the_threshold_is_raised(tmp_path: Path) -> None:
    gc.freeze()  # as a forked shard does with its parent's objects
    seen = _run_seeing(tmp_path)
    assert {threshold for threshold, _ in seen} == {(RUN_THRESHOLD, *DEFAULT_THRESHOLDS[1:])}
    assert gc.get_threshold() == DEFAULT_THRESHOLDS
    assert gc.get_freeze_count() > 0  # not unfrozen by the run (objects freed meanwhile leave it)
    gc.unfreeze()
