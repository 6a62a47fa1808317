"""simulate_llm (deterministic, reports to its lease) and shell_run (process-group cleanup)."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pyattacker import ConfigError, Pool, Runner, pipeline
from pyattacker.plugins.manager import get_plugins


def _factory(name: str) -> Any:
    obj = get_plugins().tasks.get(name)
    assert obj is not None
    return obj


def _run_sim(fail_rate: float) -> tuple[dict[str, Any], Any]:
    sim = _factory("simulate_llm")(latency_ms=1, fail_rate=fail_rate, resource="llm").with_overrides(
        retry={"max_attempts": 3, "base": 0.0}
    )
    pool = Pool("llm", [{"id": "a", "capacity": 2, "cooldown_s": 0.01, "dead_after": 1000}])
    template = pipeline("sim", sim)
    with Runner(store=":memory:", pools=[pool], concurrency=4, handle_signals=False) as runner:
        report = runner.run(template.map({"i": i} for i in range(40)))
        rows = {r.pipeline_id: (r.state, r.attempts_total) for r in runner.store.page("pipelines", limit=100)}
    return rows, (report, pool.stats())


def test_simulate_llm_is_deterministic_and_reports_to_the_lease() -> None:
    first, (report, stats) = _run_sim(0.4)
    second, _ = _run_sim(0.4)
    assert first == second  # failures are drawn from the seeded ctx.rng
    assert report.counters["retries"] > 0
    assert stats.failed_total > 0 and stats.ok_total == report.counters["pipelines_succeeded"]
    assert stats.usage.get("tokens") == 64 * stats.ok_total


def test_simulate_llm_without_resource_and_answer_shape() -> None:
    sim = _factory("simulate_llm")(latency_ms=0)
    with Runner(store=":memory:", handle_signals=False) as runner:
        runner.run(pipeline("p", sim).map([{"q": 1}]))
        art = runner.store.page("artifacts", limit=10)[-1]
        value = runner.codecs.decode(art.codec, art.type_name, art.payload)
    assert value["input"] == {"q": 1} and value["tokens"] == 64 and value["answer"].startswith("sim-")


@pytest.mark.parametrize(
    "kwargs", [{"fail_rate": 1.5}, {"error": "boom"}, {"tokens": -1}, {"latency_ms": "x"}]
)
def test_simulate_llm_checks_arguments(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        _factory("simulate_llm")(**kwargs)


# -- shell_run -------------------------------------------------------------------------------
def _alive(pid: int) -> bool:
    """Running (a zombie left to a non-reaping init counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def _wait_gone(pids: list[int], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return False


SPAWNER = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
    "open(sys.argv[1], 'w').write(f'{__import__(\"os\").getpid()} {child.pid}')\n"
    "time.sleep(60)\n"
)


def _pids(path: Path) -> list[int]:
    for _ in range(100):
        if path.exists() and path.read_text().strip():
            return [int(x) for x in path.read_text().split()]
        time.sleep(0.05)
    raise AssertionError("spawner did not start")


def test_shell_run_json_roundtrip() -> None:
    spec = _factory("shell_run")(
        command=[sys.executable, "-c", "import json,sys; print(json.dumps(json.load(sys.stdin)))"]
    )
    result = asyncio.run(spec.fn({"a": [1, 2]}, None))
    assert result["returncode"] == 0 and result["json"] == {"a": [1, 2]}
    shell = _factory("shell_run")(command="cat; echo oops >&2; exit 3", check=False)
    out = asyncio.run(shell.fn("hi", None))
    assert out == {"returncode": 3, "stdout": '"hi"', "stderr": "oops\n", "json": "hi"}


def test_shell_run_check_raises() -> None:
    spec = _factory("shell_run")(command="exit 4")
    with pytest.raises(Exception, match="command exited with 4") as info:
        asyncio.run(spec.fn(None, None))
    assert getattr(info.value, "error_class", None) == "command_failed"


def test_shell_run_timeout_kills_the_process_group(tmp_path: Path) -> None:
    marker = tmp_path / "pids"
    spec = _factory("shell_run")(command=[sys.executable, "-c", SPAWNER, str(marker)], timeout_s=1.0)
    with pytest.raises(TimeoutError, match="timed out"):
        asyncio.run(spec.fn({}, None))
    pids = _pids(marker)
    assert len(pids) == 2
    assert _wait_gone(pids), f"still running: {[p for p in pids if _alive(p)]}"


def test_shell_run_cancellation_kills_the_process_group(tmp_path: Path) -> None:
    marker = tmp_path / "pids"
    spec = _factory("shell_run")(command=[sys.executable, "-c", SPAWNER, str(marker)], timeout_s=60)

    async def main() -> list[int]:
        job = asyncio.ensure_future(spec.fn({}, None))
        for _ in range(200):
            await asyncio.sleep(0.05)
            if marker.exists() and marker.read_text().strip():
                break
        job.cancel()
        with pytest.raises(asyncio.CancelledError):
            await job
        return _pids(marker)

    pids = asyncio.run(main())
    assert _wait_gone(pids), f"still running: {[p for p in pids if _alive(p)]}"


def test_shell_run_cancelled_while_spawning_leaves_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "pids"
    spec = _factory("shell_run")(command=[sys.executable, "-c", SPAWNER, str(marker)], timeout_s=60)

    async def main() -> None:
        job = asyncio.ensure_future(spec.fn({}, None))
        await asyncio.sleep(0)  # the task has started creating the process
        job.cancel()
        with pytest.raises(asyncio.CancelledError):
            await job

    before = set(os.listdir("/proc"))
    asyncio.run(main())
    time.sleep(0.3)
    if marker.exists() and marker.read_text().strip():
        assert _wait_gone(_pids(marker))
    leftovers = [p for p in set(os.listdir("/proc")) - before if p.isdigit() and _alive(int(p))]
    cmdlines = []
    for p in leftovers:
        try:
            cmdlines.append(Path(f"/proc/{p}/cmdline").read_bytes())
        except OSError:
            pass
    assert not any(b"time.sleep(60)" in c for c in cmdlines)
