"""Store files damaged after a crash: a hot rollback journal left by a writer killed in its first
transaction, and a WAL lost or cut short after data was committed to it (issue 44)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import cli, cli_env

#: a writer killed inside its first transaction, after some pages reached the file: the file
#: and a hot ``-journal`` beside it (what a kill during a store's creation leaves)
HOT_JOURNAL = r"""
import os, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA cache_size = 1")
conn.execute("BEGIN")
conn.execute("CREATE TABLE t (x)")
for i in range(500):
    conn.execute("INSERT INTO t VALUES (?)", ("x" * 500,))
os._exit(137)
"""

CONFIG = "run: {store: s.db}\npipeline: {tasks: [{use: echo}]}\nsource: {kind: range, n: 3}\n"


@pytest.fixture
def env(tmp_path: Path, _isolated_home: Path) -> dict[str, str]:
    (tmp_path / "c.yaml").write_text(CONFIG)
    return cli_env(_isolated_home, tmp_path)


def test_a_hot_journal_is_rolled_back_by_the_writer_and_named_to_readers(
    env: dict[str, str], tmp_path: Path
) -> None:
    """Before, ``report`` and ``resume`` both exited 2 for good ("attempt to write a readonly
    database": the read-only pre-check cannot roll a hot journal back) and only deleting files
    by hand helped. A reader now says what to do; the writer rolls the journal back and runs."""
    db = tmp_path / "s.db"
    subprocess.run([sys.executable, "-c", HOT_JOURNAL, str(db)], check=False, timeout=60)
    assert db.stat().st_size > 0 and Path(f"{db}-journal").exists()
    report = cli(["report", str(db)], env)
    assert report.returncode == 2 and "Traceback" not in report.stderr
    assert f"{db}-journal" in report.stderr and "resume" in report.stderr.lower()
    resumed = cli(["resume", "-c", str(tmp_path / "c.yaml")], env)
    assert resumed.returncode == 0, resumed.stderr
    assert not Path(f"{db}-journal").exists()
    again = cli(["report", str(db)], env)
    assert again.returncode == 0, again.stderr
    assert "succeeded" in again.stdout and "3" in again.stdout


#: a run of the config's three pipelines whose process then dies before closing the store: its
#: commits are in the -wal file only (a clean close would have copied them into the database)
KILLED_AFTER_RUN = r"""
import os, sys
from pyattacker import Runner, pipeline, task

@task
def echo(x):
    return x

with_runner = Runner(store=sys.argv[1], handle_signals=False)
report = with_runner.run(pipeline("p", echo).map(range(3)))
assert report.succeeded == 3, report
os._exit(137)
"""


def _killed_after_run(db: Path) -> None:
    subprocess.run([sys.executable, "-c", KILLED_AFTER_RUN, str(db)], check=False, timeout=120)
    assert Path(f"{db}-wal").stat().st_size > 0 and Path(f"{db}.contents").exists()


def _flip_wal_bit(db: Path) -> None:
    wal = Path(f"{db}-wal")
    data = bytearray(wal.read_bytes())
    data[32 + 24 + 100] ^= 0x10  # a byte of the first frame's page: its checksum no longer holds
    wal.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["wal_deleted", "wal_bit_flipped"])
def test_a_store_that_lost_committed_data_is_refused_by_resume_and_report(
    env: dict[str, str], tmp_path: Path, damage: str
) -> None:
    """Data lost from the WAL after a crash: before, ``report`` said "not a pyattacker store (an
    empty database)" while ``resume`` exited 0 and ran every durable task again. Both now exit 2
    naming the file and what is missing; ``--fresh-restart`` accepts the loss."""
    db = tmp_path / "s.db"
    _killed_after_run(db)
    if damage == "wal_deleted":
        Path(f"{db}-wal").unlink()
        Path(f"{db}-shm").unlink(missing_ok=True)
    else:
        _flip_wal_bit(db)
    report = cli(["report", str(db)], env)
    resumed = cli(["resume", "-c", str(tmp_path / "c.yaml")], env)
    for refused in (report, resumed):
        assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
        assert str(db) in refused.stderr and "0 of 1 runs" in refused.stderr
        assert "0 of 3 pipelines" in refused.stderr and "--fresh-restart" in refused.stderr
    assert "succeeded" not in resumed.stdout
    if damage == "wal_bit_flipped":  # the damaged log is kept as it was, for whoever repairs it
        assert Path(f"{db}-wal.lost").stat().st_size > 0
    accepted = cli(["resume", "-c", str(tmp_path / "c.yaml"), "--fresh-restart"], env)
    assert accepted.returncode == 0, accepted.stderr
    after = cli(["report", str(db)], env)
    assert after.returncode == 0, after.stderr


def test_a_store_without_a_contents_record_opens_as_before(env: dict[str, str], tmp_path: Path) -> None:
    """A store written before the record existed (no ``.contents``) is not refused."""
    db = tmp_path / "s.db"
    first = cli(["run", "-c", str(tmp_path / "c.yaml")], env)
    assert first.returncode == 0, first.stderr
    assert Path(f"{db}.contents").exists()
    Path(f"{db}.contents").unlink()
    again = cli(["resume", "-c", str(tmp_path / "c.yaml")], env)
    assert again.returncode == 0 and "skipped 3" in again.stdout, again.stderr


#: a run whose commits after its start record are in the -wal only, with no heartbeat after
#: them, killed by SIGKILL: the first task copies what was committed so far (the run's start)
#: into the database; the last one waits until four pipelines have succeeded, then kills its
#: own process. Without the WAL the file holds the run and nothing after its start.
KILLED_BETWEEN_HEARTBEATS = r"""
import os, signal, sqlite3, sys, time
from pyattacker import Runner, pipeline, task

db = sys.argv[1]

def look(sql):
    conn = sqlite3.connect(db, timeout=30)
    try:
        return conn.execute(sql).fetchone()
    finally:
        conn.close()

@task
def echo(x):
    if x == 0:
        busy, _, _ = look("PRAGMA wal_checkpoint(PASSIVE)")
        assert busy == 0
    if x == 5:
        while look("SELECT count(*) FROM pipelines WHERE state = 'succeeded'")[0] < 4:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGKILL)
    return x

Runner(store=db, concurrency=1, heartbeat_s=3600, handle_signals=False).run(
    pipeline("p", echo).map(range(6))
)
"""


def test_commits_after_the_last_heartbeat_lost_with_the_wal_are_named(
    env: dict[str, str], tmp_path: Path
) -> None:
    """Before, ``<file>.contents`` was written only with the run record (start, heartbeats,
    end): pipelines committed after it and lost with the ``-wal`` after a SIGKILL were run again
    by ``resume`` without a word. The record now follows every commit."""
    db = tmp_path / "s.db"
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_BETWEEN_HEARTBEATS, str(db)],
        check=False,
        timeout=120,
        capture_output=True,
    )
    assert killed.returncode == -9, killed.stderr
    assert Path(f"{db}-wal").stat().st_size > 0
    Path(f"{db}-wal").unlink()
    Path(f"{db}-shm").unlink(missing_ok=True)
    resumed = cli(["resume", "-c", str(tmp_path / "c.yaml")], env)
    assert resumed.returncode == 2 and "Traceback" not in resumed.stderr, resumed.stderr
    assert str(db) in resumed.stderr and "holds less than it once did" in resumed.stderr
    # the record knows the four pipelines that succeeded (at least) after the last run record
    assert re.search(r" of [4-6] pipelines", resumed.stderr) and "--fresh-restart" in resumed.stderr
    assert "succeeded" not in resumed.stdout
