"""One rate budget across the Ray executor's shards: the ``BudgetLog`` actor (``budget=actor``).

Against the session's real local Ray (``-n 0``). ``PYATTACKER_LIMIT_WINDOW_SCALE`` makes a
minute 1.2 s. Grants are counted from what the shard stores recorded (each task's result holds
its lease's grant time), never from the budget itself.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from pyattacker.resources.shared_budget import BudgetEntry, budget_key

from .budget_tasks import PORT_ENV
from .test_ray_shards import _cli, _ray, _results

SCALE = 0.02  # a 60 s window lasts 1.2 s
SERVER = Path(__file__).parents[3] / "tests" / "support" / "retry_after_server.py"


def _most_in_any_window(times: list[float], span: float) -> int:
    """The most grants in any window of ``span`` seconds (each window starts at a grant)."""
    times = sorted(times)
    most, first = 0, 0
    for last, at in enumerate(times):
        while times[first] <= at - span:
            first += 1
        most = max(most, last - first + 1)
    return most


def _limited_config(tmp_path: Path, rows: int, task: str, limits: str, retry: str = "") -> None:
    (tmp_path / "cfg.yaml").write_text(
        "run: {concurrency: 8}\n"
        "pools:\n  api:\n    resources:\n"
        f"      - {{id: key-1, capacity: 8, limits: {limits}}}\n"
        "pipeline:\n  name: limited\n  tasks:\n"
        f"    - {{use: 'budget_tasks:{task}', resource: api{retry}}}\n"
        f"source: {{kind: range, n: {rows}}}\n"
    )


def test_four_ray_shards_never_pass_one_60_rpm_limit_together(tmp_path: Path, ray_address: str) -> None:
    _limited_config(tmp_path, 180, "grant", "{rpm: 60}")
    done = _cli(
        tmp_path,
        "run", "-c", "cfg.yaml", "--shards", "4", "--jobs", "4", "--store", "runs/g.db",
        "--summary-format", "json",
        *_ray(ray_address, "budget=actor", "num_cpus=0.25"),
        PYATTACKER_LIMIT_WINDOW_SCALE=str(SCALE),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["merged"]["pipelines"]["by_state"] == {"succeeded": 180}
    assert "one rate budget for all shards in Ray actor pyattacker-budget-" in doc["executor_note"]
    assert "unless the ray executor shares it otherwise" in done.stderr  # the parent does not claim the file
    # the shards shared the actor, not the kernel's file (which the parent creates, empty)
    assert (tmp_path / "runs" / "g.shards4.budget").stat().st_size == 0
    stores = [str(tmp_path / "runs" / f"g.shard{i}of4.db") for i in range(4)]
    grants = [result for state, result in _results(tmp_path, *stores).values() if state == "succeeded"]
    assert len(grants) == 180
    assert len({g["shard"] for g in grants}) == 4
    assert _most_in_any_window([g["at"] for g in grants], 60.0 * SCALE) <= 60  # each alone: 60


def test_a_retry_after_in_one_ray_shard_holds_both(tmp_path: Path, ray_address: str) -> None:
    """The file budget's loopback test (tests/shard/test_shared_hold_shards.py), through the actor."""
    port_file, log = tmp_path / "server.port", tmp_path / "arrivals.log"
    server = subprocess.Popen([sys.executable, str(SERVER), str(port_file), str(log), "2", "2"])
    try:
        deadline = time.monotonic() + 60
        while not port_file.exists():
            assert server.poll() is None and time.monotonic() < deadline, "the loopback server did not start"
            time.sleep(0.05)
        _limited_config(tmp_path, 24, "call", "{rpm: 1}", ", retry: {max_attempts: 3, base: 0.01}")
        done = _cli(
            tmp_path,
            "run", "-c", "cfg.yaml", "--shards", "2", "--jobs", "2", "--store", "runs/h.db",
            "--summary-format", "json",
            *_ray(ray_address, "budget=actor", "num_cpus=0.25"),
            PYATTACKER_LIMIT_WINDOW_SCALE=str(0.5 / 60), **{PORT_ENV: str(port_file)},
        )  # fmt: skip
    finally:
        os.kill(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["merged"]["pipelines"]["by_state"] == {"succeeded": 24}
    seen = [
        (float(at), int(code), who)
        for at, code, who in (line.split() for line in log.read_text().splitlines())
    ]
    limited = [at for at, code, _ in seen if code == 429]
    assert len(limited) == 1, seen
    start = limited[0]
    assert {who for at, _, who in seen if at < start} == {"shard-0", "shard-1"}
    during = [(round(at - start, 3), who) for at, _, who in seen if start < at < start + 2.0]
    assert during == [], f"requests arrived (s into a 2 s hold, shard) {during}"
    assert any(at >= start + 2.0 for at, _, _ in seen)


def test_actor_budget_clients_see_each_others_records_never_earlier(ray_address: str) -> None:
    from pyattacker_executor_ray.budget import ActorBudget, start_budget_log

    actor, _name = start_budget_log("unit", keep_s=60.0)
    one, two = ActorBudget(actor), ActorBudget(actor)
    key = budget_key("api", "key-1")
    with one.hold():
        assert one.pull() == []
        made = time.monotonic()
        one.push(BudgetEntry(key, 0, one.new_ref(), made, 5.0))
    with two.hold():
        seen = two.pull()
    with one.hold():
        assert one.pull() == []  # its own record is not handed back
    assert [(e.key, e.kind, e.tokens) for e in seen] == [(key, 0, 5.0)]
    assert seen[0].at >= made  # one machine: the converted time is never earlier than the real one
    assert seen[0].at - made < 5.0
    import ray

    ray.kill(actor)
