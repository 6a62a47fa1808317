"""`--shards 4` against one 60-rpm resource: real shard processes share one budget.

Each task notes when its lease was granted (``lease.acquired_at``: the monotonic clock, one
for every process of the machine). ``PYATTACKER_LIMIT_WINDOW_SCALE`` shortens the minute to
1.2 s, so the test sees several windows in a few seconds.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.resources.test_limits import _most_in_any_window
from tests.support.cli import cli, cli_env

GRANTS = """
import os
from pyattacker import task

@task(name="call")
async def call(value, ctx):
    async with ctx.acquire() as lease:
        with open(os.environ["GRANTS_LOG"], "a") as fh:
            fh.write(f"{lease.acquired_at!r} {os.environ['PYATACKER_SHARD']}\\n")
    return value
"""

CONFIG = """
run: {store: runs/s.db, concurrency: 8}
pools:
  api:
    resources:
      - {id: key-1, capacity: 8, limits: {rpm: 60}}
pipeline:
  name: limited
  tasks:
    - {use: "grants_mod:call", resource: api}
source: {kind: range, n: 180}
"""

SCALE = 0.02  # a 60 s window lasts 1.2 s


@pytest.fixture
def env(tmp_path: Path, _isolated_home: Path) -> dict[str, str]:
    (tmp_path / "grants_mod.py").write_text(GRANTS)
    out = cli_env(
        _isolated_home,
        tmp_path,
        GRANTS_LOG=str(tmp_path / "grants.log"),
        PYATTACKER_LIMIT_WINDOW_SCALE=str(SCALE),
    )
    out.pop("PYATACKER_SHARD", None)
    out.pop("PYATTACKER_SHARED_BUDGET", None)
    return out


def test_four_shard_processes_never_pass_one_60_rpm_limit_together(
    tmp_path: Path, env: dict[str, str]
) -> None:
    (tmp_path / "c.yaml").write_text(CONFIG)
    result = cli(
        ["run", "-c", "c.yaml", "--shards", "4", "--jobs", "4", "--summary-format", "json"], env, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert "one rate budget for all shards" in result.stderr
    assert (tmp_path / "runs" / "s.shards4.budget").exists()
    merged = json.loads(result.stdout)["merged"]
    assert merged["pipelines"]["by_state"] == {"succeeded": 180}
    lines = (tmp_path / "grants.log").read_text().split("\n")
    grants = [(float(t), shard) for t, shard in (line.split() for line in lines if line)]
    assert len(grants) == 180
    assert len({shard for _, shard in grants}) == 4
    # the four shards together: at most 60 grants in any window (each alone would allow 60)
    assert _most_in_any_window([t for t, _ in grants], 60.0 * SCALE) <= 60
