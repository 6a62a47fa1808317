"""Plain ``?`` markers where ``sqlite3`` warns about numbered ones (CPython 3.12.0-3.12.3).

Those versions read ``?1`` as a named parameter and issue a ``DeprecationWarning`` for every
value bound from a sequence (gh-117995): hundreds per group commit, which halved the store's
speed and failed every commit under ``-W error``. The store probes the module once
(``statements.NUMBERED``) and then writes with plain markers. These tests force either mode on
whatever Python runs them and check that both store the very same rows; on an affected Python
the last one also checks that a commit issues no warning at all.
"""

from __future__ import annotations

import re
import sqlite3
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pyattacker.model import OK_DECISION, Batch
from pyattacker_plugins.store_sqlite import SqliteStoreOpener
from pyattacker_plugins.store_sqlite import statements as statements_mod
from pyattacker_plugins.store_sqlite import store as store_mod
from store_contract import artifact, attempt, event, pipeline, run, task

OPENER = SqliteStoreOpener()
_NUMBERED_MARK = re.compile(r"\?\d")


def _batches() -> Iterator[Batch]:
    """Commits that take every branch of a statement: groups that share their texts (bound once
    when numbered), the alias of the same object, NULL patterns, groups whose values differ,
    more rows than one statement holds, an upsert of one key twice in a batch."""
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
    for i in range(4, 8):  # an id that is not the slot's (stored as given), and its alias
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


def _force(monkeypatch: pytest.MonkeyPatch, numbered: bool) -> None:
    """Every write statement of the store in one mode, its variants built afresh."""
    for _attr, statement in store_mod._WRITES:
        monkeypatch.setattr(statement, "numbered", numbered)
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


def test_plain_markers_store_the_same_rows_as_numbered_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: dict[bool, list[tuple[str, int]]] = {True: [], False: []}
    for numbered in (True, False):
        _force(monkeypatch, numbered)
        with warnings.catch_warnings():
            # (forcing numbered markers on a Python that warns about them is this test's doing)
            warnings.simplefilter("ignore", DeprecationWarning)
            _write(tmp_path / f"{numbered}.db", seen[numbered], monkeypatch)
    numbered_rows, plain_rows = _contents(tmp_path / "True.db"), _contents(tmp_path / "False.db")
    for rows in (numbered_rows, plain_rows):  # (the files' own creation times differ)
        rows["store_meta"] = [r for r in rows["store_meta"] if r[0] != "created_at"]
    assert numbered_rows == plain_rows
    assert len(plain_rows["tasks"]) == 77 and len(plain_rows["attempts"]) == 73
    # numbered: some groups bound their shared texts once, every marker numbered
    assert any(k for _sql, k in seen[True])
    assert all(_NUMBERED_MARK.search(sql) for sql, _k in seen[True])
    # plain: no marker numbered and nothing bound once, so the values follow the text's order
    assert seen[False] and not any(k for _sql, k in seen[False])
    assert not any(_NUMBERED_MARK.search(sql) for sql, _k in seen[False])


def test_a_commit_issues_no_deprecation_warning_on_this_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mode the probe chose: on CPython 3.12.0-3.12.3 numbered markers would warn per value."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        _write(tmp_path / "s.db", [], monkeypatch)
    assert _contents(tmp_path / "s.db")["tasks"]


class _Probe:
    """A connection whose ``execute`` does what an affected or a future ``sqlite3`` does."""

    def __init__(self, outcome: str) -> None:
        self.outcome = outcome
        self.closed = False

    def execute(self, sql: str, params: tuple[Any, ...]) -> None:
        assert sql == "SELECT ?1" and params == (1,)
        if self.outcome == "warns":
            warnings.warn("Binding 1 ('?1') is a named parameter", DeprecationWarning, stacklevel=1)
        elif self.outcome == "refuses":
            raise sqlite3.ProgrammingError("numbered parameters from a sequence")

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize(("outcome", "ok"), [("quiet", True), ("warns", False), ("refuses", False)])
def test_the_probe_reads_what_the_module_does(outcome: str, ok: bool) -> None:
    conn = _Probe(outcome)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the probe records the warning: it never escapes
        assert statements_mod.numbered_parameters_ok(lambda _path: conn) is ok
    assert conn.closed


def test_the_probe_agrees_with_the_real_module() -> None:
    """What the store uses is what this interpreter's ``sqlite3`` does."""
    conn = sqlite3.connect(":memory:")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            conn.execute("SELECT ?1", (1,))
    except sqlite3.ProgrammingError:
        quiet = False
    else:
        quiet = not caught
    finally:
        conn.close()
    assert statements_mod.NUMBERED is quiet
