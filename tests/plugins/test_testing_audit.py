"""``pyattacker.testing.audit``: a ledger line per execution, written before the task body runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pyattacker.plugins.api import iter_rows
from pyattacker.store.location import open_store
from pyattacker.testing.audit import LEDGER_ENV, STEP_SLEEP_ENV, Execution, read_ledger

CONFIG = """\
source: {{ kind: range, n: {count} }}
pipeline:
  tasks:
    - {{ use: pyattacker.testing.audit:step }}
    - {{ use: pyattacker.testing.audit:step }}
run: {{ concurrency: 2 }}
"""


def _run(tmp_path: Path, *args: str, sleep: str = "0") -> subprocess.Popen[bytes]:
    env = {**os.environ, LEDGER_ENV: str(tmp_path / "ledger.tsv"), STEP_SLEEP_ENV: sleep}
    return subprocess.Popen(
        [sys.executable, "-m", "pyattacker", *args, "-c", "cfg.yaml", "--store", "s.db"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def test_every_execution_is_in_the_ledger_with_its_process(tmp_path: Path) -> None:
    (tmp_path / "cfg.yaml").write_text(CONFIG.format(count=3))
    proc = _run(tmp_path, "run")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err.decode()
    ran = read_ledger(tmp_path / "ledger.tsv")
    assert sorted((e.pipeline_id, e.seq) for e in ran) == sorted(
        (e.pipeline_id, seq) for e in ran if e.seq == 0 for seq in (0, 1)
    )
    assert len(ran) == 6
    assert {e.pid for e in ran} == {proc.pid}


def test_a_missing_ledger_reads_as_nothing_ran(tmp_path: Path) -> None:
    assert read_ledger(tmp_path / "absent.tsv") == []


def test_the_ledger_shows_no_replay_after_sigkill_and_resume(tmp_path: Path) -> None:
    """The kit's intended use, end to end: what was durable at the kill never appears again."""
    (tmp_path / "cfg.yaml").write_text(CONFIG.format(count=30))
    ledger = tmp_path / "ledger.tsv"
    proc = _run(tmp_path, "run", sleep="0.05")
    try:
        deadline = time.monotonic() + 120
        while len(read_ledger(ledger)) < 12 and time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"the run ended before the kill: {proc.stderr.read().decode()}")  # type: ignore[union-attr]
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    reader = open_store(str(tmp_path / "s.db"), read_only=True)
    durable = {(a.pipeline_id, a.seq) for a in iter_rows(reader, "artifacts") if a.seq >= 0}
    reader.close()
    mark = len(read_ledger(ledger))
    resumed = _run(tmp_path, "resume")
    _, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, err.decode()
    after = read_ledger(ledger)[mark:]
    assert after, "resume ran nothing: the run had finished before the kill"
    assert all(isinstance(e, Execution) and e.pid == resumed.pid for e in after)
    assert [e for e in after if (e.pipeline_id, e.seq) in durable] == []
