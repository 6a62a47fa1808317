"""Store files damaged after a crash: a hot rollback journal left by a writer killed in its first
transaction, and a WAL lost or cut short after data was committed to it (issue 44)."""

from __future__ import annotations

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
