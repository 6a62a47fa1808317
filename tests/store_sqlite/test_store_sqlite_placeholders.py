"""The markers of the store's write statements: shared values declared once, every other one plain.

A statement binds the texts a group of rows shares once, as ``?1..?k`` declared ahead of the
INSERT, and every other value through a plain ``?``. Numbering every value (as before) cost
O(n²) per statement from Python 3.12 on (``sqlite3`` asks SQLite for each value's name, and
SQLite searches the numbered ones linearly): a quarter of a run's CPU on 3.13. CPython 3.12.0 to
3.12.3 warn once per numbered value (gh-117995), so there nothing is bound once. These tests
force either mode on whatever Python runs them and check that both store the very same rows,
and that the default mode issues no warning on this Python.
"""

from __future__ import annotations

import re
import sqlite3
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pyattacker.errors import StoreUnavailable
from pyattacker.model import OK_DECISION, Batch
from pyattacker_plugins.store_sqlite import SqliteStore, SqliteStoreOpener
from pyattacker_plugins.store_sqlite import commit as commit_mod
from pyattacker_plugins.store_sqlite import statements as statements_mod
from tests.support.store_contract import artifact, attempt, event, pipeline, run, task

OPENER = SqliteStoreOpener()
_NUMBER = re.compile(r"\?(\d+)")


def _batches() -> Iterator[Batch]:
    """Commits that take every branch of a statement: groups that share their texts (bound once),
    NULL patterns, ids stored as given and derived ones, groups whose values differ, more rows
    than one statement holds, an upsert of one key twice in a batch."""
    b = Batch()
    b.runs.append(run("r1"))
    b.pipelines += [pipeline(f"p{i}", state="running") for i in range(70)]
    b.tasks += [task(f"p{i}", 0, state="succeeded", resource="apis") for i in range(70)]
    for t in b.tasks[:40]:
        t.output_artifact_id = t.task_run_id  # the same object as its slot id
    for t in b.tasks[40:]:
        t.output_artifact_id = f"out-{t.pipeline_id}"
    b.artifacts += [artifact(f"p{i}", 0, payload=b"x" * i) for i in range(70)]
    b.attempts += [attempt(f"p{i}", decision=OK_DECISION) for i in range(70)]
    b.events += [event(pid=f"p{i}") for i in range(5)] + [event("run.started", pid=None)]
    yield b
    b = Batch()
    b.attempts += [attempt("p1", outcome="failed", n=2), attempt("p2"), attempt("p3", run_id="r2")]
    b.tasks += [task("p1", 1, state="failed"), task("p2", 1, run_id="r2", state="succeeded")]
    b.tasks += [task("p3", 1, state="succeeded", resource=None)]  # a NULL in a shared column
    for i in range(4, 8):  # an id that is not the slot's: stored as given, twice
        t = task(f"p{i}", 1, state="succeeded")
        t.task_run_id = t.output_artifact_id = f"custom-{i}"
        b.tasks.append(t)
    b.pipelines += [pipeline("p1", state="failed", cursor=1), pipeline("p1", state="succeeded", cursor=2)]
    b.artifacts += [artifact("p1", 1, payload=None), artifact("p2", 1)]
    yield b


def _contents(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, with the SQLite type of each value."""
    conn = sqlite3.connect(path)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        out = {}
        for table in sorted(tables):
            cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]
            typed = ", ".join(f'"{c}", typeof("{c}")' for c in cols)
            out[table] = sorted(conn.execute(f'SELECT {typed} FROM "{table}"').fetchall(), key=repr)
        return out
    finally:
        conn.close()


def _force(monkeypatch: pytest.MonkeyPatch, bind_once: bool) -> None:
    """Every write statement of the store in one mode, its variants built afresh."""
    for _attr, statement in commit_mod._WRITES:
        monkeypatch.setattr(statement, "bind_once", bind_once)
        monkeypatch.setattr(statement, "_cache", {})


def _write(path: Path, spy: list[tuple[str, int]], monkeypatch: pytest.MonkeyPatch) -> None:
    real = statements_mod.write_shared_rows

    def record(
        conn: sqlite3.Connection, sql_for: Callable[[int], str], k: int, params: list[Any], n: int
    ) -> None:
        spy.append((sql_for(n), k))
        real(conn, sql_for, k, params, n)

    with monkeypatch.context() as m:
        m.setattr(statements_mod, "write_shared_rows", record)
        store = OPENER.open(str(path))
        try:
            for batch in _batches():
                store.commit(batch)
        finally:
            store.close()


def _numbers(sql: str) -> set[int]:
    return {int(n) for n in _NUMBER.findall(sql)}


def test_values_bound_once_or_not_the_same_rows_are_stored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[bool, list[tuple[str, int]]] = {True: [], False: []}
    for bind_once in (True, False):
        _force(monkeypatch, bind_once)
        with warnings.catch_warnings():
            # (binding once on a Python that warns about numbered markers is this test's doing)
            warnings.simplefilter("ignore", DeprecationWarning)
            _write(tmp_path / f"{bind_once}.db", seen[bind_once], monkeypatch)
    once, plain = _contents(tmp_path / "True.db"), _contents(tmp_path / "False.db")
    for rows in (once, plain):  # (the files' own creation times differ)
        rows["store_meta"] = [r for r in rows["store_meta"] if r[0] != "created_at"]
    assert once == plain
    assert len(plain["tasks"]) == 77 and len(plain["attempts"]) == 73
    # bound once: the k shared values declared first, as the only numbered markers (the cost of
    # a marker's name lookup grows with their count); groups that differ bind every value
    assert any(k for _sql, k in seen[True]) and any(not k for _sql, k in seen[True])
    for sql, k in seen[True]:
        assert _numbers(sql) == set(range(1, k + 1)), sql
        assert sql.startswith(
            f"WITH _shared AS (SELECT {', '.join(f'?{j}' for j in range(1, k + 1))}) "
        ) is bool(k)
    # not bound once: plain markers only
    assert seen[False] and not any(k or _numbers(sql) for sql, k in seen[False])


def test_the_default_mode_is_the_one_for_this_python_and_warns_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bound once except on CPython 3.12.0-3.12.3, which warn per numbered value (gh-117995)."""
    seen: list[tuple[str, int]] = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        _write(tmp_path / "s.db", seen, monkeypatch)
    assert _contents(tmp_path / "s.db")["tasks"]
    affected = (3, 12, 0) <= sys.version_info[:3] < (3, 12, 4)
    assert statements_mod.BIND_ONCE is not affected
    assert any(k for _sql, k in seen) is not affected


@pytest.mark.parametrize("mode", ["writer", "reader"])
def test_a_sqlite_library_older_than_the_statements_need_is_refused_before_the_file_is_touched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """Upserts need SQLite 3.24: an older library would fail at the first commit with a bare
    syntax error; the store says so when it opens, and leaves the path as it was."""
    path = tmp_path / "s.db"
    if mode == "reader":
        OPENER.open(str(path)).close()
    before = sorted(p.name for p in tmp_path.iterdir())
    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 22, 0))
    with pytest.raises(
        StoreUnavailable, match=r"uses SQLite 3\.22\.0; the sqlite store needs 3\.24\.0 or later"
    ):
        if mode == "writer":
            OPENER.open(str(path))
        else:
            SqliteStore.open_reader(str(path))
    assert sorted(p.name for p in tmp_path.iterdir()) == before
