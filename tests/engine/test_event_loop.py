"""``run.event_loop``: which loop a run builds, what it records, and the errors for bad values."""

from __future__ import annotations

import asyncio
import sqlite3
import sys
from pathlib import Path

import msgspec
import pytest

from pyattacker import ConfigError, Runner, VirtualClock, pipeline, task
from pyattacker.engine.event_loop import loop_factory, resolve_event_loop

uvloop = pytest.importorskip("uvloop", reason="the test extra installs uvloop (not on Windows)")


@task(name="where")
async def where(value: int) -> str:
    await asyncio.sleep(0)
    return type(asyncio.get_running_loop()).__module__


def _loop_of_run(store: Path, **settings: object) -> tuple[str, str]:
    """Run one pipeline; (the loop its task ran on, the loop the run row recorded)."""
    with Runner(store=str(store), **settings) as runner:  # type: ignore[arg-type]
        report = runner.run(pipeline("loops", where).map([1]))
    assert report.status == "completed"
    conn = sqlite3.connect(store)
    try:
        (config,) = conn.execute("SELECT config_json FROM runs").fetchone()
        ((pid,),) = conn.execute("SELECT pipeline_id FROM pipelines").fetchall()
    finally:
        conn.close()
    with Runner(store=str(store)) as reader:
        art = reader.store.get_artifact(pid, 0)
    assert art is not None
    ran_on = msgspec.json.decode(art.payload)
    return ran_on, msgspec.json.decode(config)["event_loop"]


def test_auto_uses_uvloop_when_installed(tmp_path: Path) -> None:
    ran_on, recorded = _loop_of_run(tmp_path / "a.db")
    assert ran_on.startswith("uvloop")
    assert recorded == "uvloop"


def test_asyncio_is_used_when_asked(tmp_path: Path) -> None:
    ran_on, recorded = _loop_of_run(tmp_path / "b.db", event_loop="asyncio")
    assert ran_on.startswith("asyncio")
    assert recorded == "asyncio"


def test_virtual_clock_keeps_its_own_loop(tmp_path: Path) -> None:
    """Simulated time needs the virtual loop whatever the setting; the run records it as asyncio's."""
    ran_on, recorded = _loop_of_run(tmp_path / "v.db", clock=VirtualClock(), event_loop="uvloop")
    assert ran_on == "pyattacker.clock"  # the virtual clock's loop, a subclass of asyncio's
    assert recorded == "asyncio"


def test_auto_falls_back_to_asyncio_without_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # ``import uvloop`` now raises ImportError
    assert resolve_event_loop("auto") == "asyncio"
    assert loop_factory("auto") is asyncio.new_event_loop


def test_uvloop_without_uvloop_is_a_config_error_before_the_store_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)
    with pytest.raises(ConfigError, match=r"run\.event_loop: 'uvloop' is not installed"):
        Runner(store=str(tmp_path / "never.db"), event_loop="uvloop")
    assert not (tmp_path / "never.db").exists()


def test_unknown_loop_names_the_setting(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"run\.event_loop: must be one of auto, asyncio, uvloop"):
        Runner(store=str(tmp_path / "x.db"), event_loop="tokio")
