"""`--shards 2` against a loopback server that answers one request 429 with Retry-After: while
the server's hold lasts, no request of either shard reaches it.

Both shards share one 1-rpm resource (a "minute" of 0.5 s through
``PYATTACKER_LIMIT_WINDOW_SCALE``): one grant per 0.5 s between them, so the next request
after the 429 would come from either shard well inside a 2 s hold. The server
(``tests/support/retry_after_server.py``, a process of its own stopped by its PID) records
when each request arrived, on the machine's monotonic clock.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cli import cli, cli_env

SERVER = Path(__file__).parents[1] / "support" / "retry_after_server.py"
HOLD_S = 2.0

CALLS = """
import asyncio
import os
import urllib.error
import urllib.request

from pyattacker import RetryableError, task


def _get(url):
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.read()


@task(name="call")
async def call(value, ctx):
    with open(os.environ["SERVER_PORT_FILE"]) as fh:
        port = fh.read().strip()
    with open(os.environ["SERVER_PORT_FILE"] + ".keep", "w") as fh:  # how long a grant counts
        fh.write(os.environ["PYATTACKER_SHARED_BUDGET_KEEP_S"])
    url = f"http://127.0.0.1:{port}/shard-" + os.environ["PYATACKER_SHARD"].split("/")[0]
    async with ctx.acquire():
        try:
            await asyncio.to_thread(_get, url)
        except urllib.error.HTTPError as exc:
            if exc.code != 429:
                raise
            after = float(exc.headers["Retry-After"])
            raise RetryableError("429", error_class="rate_limit", retry_after=after) from None
    return value
"""

CONFIG = """
run: {store: runs/h.db, concurrency: 4}
pools:
  api:
    resources:
      - {id: key-1, capacity: 4, limits: {rpm: 1}}
pipeline:
  name: held
  tasks:
    - {use: "calls_mod:call", resource: api, retry: {max_attempts: 3, base: 0.01}}
source: {kind: range, n: 16}
"""


def start_server(tmp_path: Path, clients: int, seconds: float) -> tuple[subprocess.Popen[bytes], Path]:
    """The server process (stopped by its PID by the caller) and its arrival log."""
    port_file, log = tmp_path / "server.port", tmp_path / "arrivals.log"
    proc = subprocess.Popen(
        [sys.executable, str(SERVER), str(port_file), str(log), str(clients), str(seconds)]
    )
    deadline = time.monotonic() + 60
    while not port_file.exists():
        assert proc.poll() is None, "the loopback server did not start"
        assert time.monotonic() < deadline, "the loopback server wrote no port"
        time.sleep(0.05)
    return proc, log


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    os.kill(proc.pid, signal.SIGTERM)
    proc.wait(timeout=30)


def arrivals(log: Path) -> list[tuple[float, int, str]]:
    lines = (line.split() for line in log.read_text().splitlines())
    return [(float(at), int(status), client) for at, status, client in lines]


def assert_held(seen: list[tuple[float, int, str]], hold_s: float) -> None:
    """One 429, once both shards were running; no request of either arrived while its
    Retry-After lasted; both went on after it."""
    limited = [(at, client) for at, status, client in seen if status == 429]
    assert len(limited) == 1, seen
    start = limited[0][0]
    assert {c for at, _, c in seen if at < start} == {"shard-0", "shard-1"}
    during = [(round(at - start, 3), c) for at, _, c in seen if start < at < start + hold_s]
    assert during == [], f"requests arrived (s into a {hold_s} s hold, shard) {during}"
    assert {c for at, _, c in seen if at >= start + hold_s} == {"shard-0", "shard-1"}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Path]:
    proc, log = start_server(tmp_path, clients=2, seconds=HOLD_S)
    try:
        yield log
    finally:
        stop_server(proc)


def test_a_retry_after_in_one_shard_holds_both_shards(
    tmp_path: Path, _isolated_home: Path, server: Path
) -> None:
    (tmp_path / "calls_mod.py").write_text(CALLS)
    (tmp_path / "c.yaml").write_text(CONFIG)
    env = cli_env(
        _isolated_home,
        tmp_path,
        SERVER_PORT_FILE=str(tmp_path / "server.port"),
        PYATTACKER_LIMIT_WINDOW_SCALE=str(0.5 / 60),
    )
    env.pop("PYATACKER_SHARD", None)
    env.pop("PYATTACKER_SHARED_BUDGET", None)
    argv = ["run", "-c", "c.yaml", "--shards", "2", "--jobs", "2", "--summary-format", "json"]
    result = cli(argv, env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert doc["merged"]["pipelines"]["by_state"] == {"succeeded": 16}
    assert all(s["code"] == 0 for s in doc["shards"])
    seen = arrivals(server)
    assert len(seen) == 17  # sixteen rows, one of them retried after its 429
    # each shard was told the longest window (a budget kept outside the machine forgets older records)
    assert float((tmp_path / "server.port.keep").read_text()) == pytest.approx(0.5)
    assert_held(seen, HOLD_S)
