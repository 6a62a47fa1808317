"""A resume's state lookups (SQLite): exact whatever the order of the ids, and read ahead in
storage order only when the ids come in that order (checked on the statements that run)."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from pyattacker_plugins.store_sqlite import SqliteStore, SqliteStoreOpener
from tests.support.store_contract import commit, pipeline

CHUNK = 64


def pid(i: int) -> str:
    return hashlib.blake2b(str(i).encode(), digest_size=16).hexdigest()  # random, like real ids


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    s = SqliteStoreOpener().open(str(tmp_path / "runs.db"))
    assert isinstance(s, SqliteStore)
    # 600 pipelines stored in admission order over several commits, two runs, mixed states
    for lo in range(0, 600, 50):
        commit(
            s,
            pipelines=[
                pipeline(
                    pid(i),
                    run_id="r1" if i < 400 else "r2",
                    state="failed" if i % 97 == 0 else "succeeded",
                    spec_digest="v2:spec",
                    seed_digest=f"seed-{i}",
                )
                for i in range(lo, lo + 50)
            ],
        )
    yield s
    s.close()


def expected(store: SqliteStore, ids: list[str]) -> dict[str, tuple[str, str, str, str]]:
    rows = store.lookup_pipelines(ids)
    return {k: (r.state, r.spec_digest or "", r.seed_digest or "", r.run_id) for k, r in rows.items()}


def lookups(store: SqliteStore, order: list[int]) -> tuple[dict[str, tuple[str, ...]], list[str]]:
    """Look the ids up chunk by chunk, as a resume does; returns the answers and the SQL run."""
    statements: list[str] = []
    conn = store._db()
    conn.set_trace_callback(statements.append)
    found: dict[str, tuple[str, ...]] = {}
    answers = []
    try:
        for start in range(0, len(order), CHUNK):
            ids = [pid(i) for i in order[start : start + CHUNK]]
            answers.append((ids, store.lookup_states(ids)))
    finally:
        conn.set_trace_callback(None)
    for ids, answer in answers:  # each answer holds exactly the stored ids it was asked for
        assert answer == expected(store, ids)
        found.update(answer)
    return found, statements


def kinds(statements: list[str]) -> list[str]:
    return ["range" if "ORDER BY pk LIMIT" in s else "probe" for s in statements if s.startswith("SELECT")]


def test_in_storage_order_reads_ahead_instead_of_probing(store: SqliteStore) -> None:
    order = list(range(600))
    found, statements = lookups(store, order)
    assert found == expected(store, [pid(i) for i in order])
    # the first chunk finds where the rows are; every later one is one range read
    assert kinds(statements) == ["probe"] + ["range"] * (len(range(0, 600, CHUNK)) - 1)


def test_any_other_order_is_exact_and_stops_reading_ahead(store: SqliteStore) -> None:
    order = list(range(600))
    random.Random(7).shuffle(order)
    found, statements = lookups(store, order)
    assert found == expected(store, [pid(i) for i in order])
    assert "range" not in kinds(statements)


def test_missing_duplicated_and_new_ids(store: SqliteStore) -> None:
    # a resume that goes past the stored rows: ids never stored, duplicates, then stored ids again
    order = list(range(300)) + list(range(900, 1000)) + [5, 5, 6] + list(range(300, 600))
    found, statements = lookups(store, order)
    assert found == expected(store, [pid(i) for i in order])
    assert not any(pid(i) in found for i in range(900, 1000))
    assert kinds(statements).count("range") >= 4  # back in order after the gap: reading ahead again


def test_reversed_order_within_chunks(store: SqliteStore) -> None:
    order = [i for start in range(0, 600, CHUNK) for i in reversed(range(start, min(start + CHUNK, 600)))]
    found, statements = lookups(store, order)
    assert found == expected(store, [pid(i) for i in order])
    assert kinds(statements).count("range") == len(range(0, 600, CHUNK)) - 1  # order inside a chunk is free


def test_ids_out_of_place_are_still_found(store: SqliteStore) -> None:
    # storage order, except that a few ids sit in another chunk than their rows' neighbours
    order = list(range(600))
    for a, b in ((3, 500), (70, 260), (130, 131 + CHUNK)):
        order[a], order[b] = order[b], order[a]
    found, statements = lookups(store, order)
    assert found == expected(store, [pid(i) for i in order])
    assert kinds(statements).count("range") >= 5  # still reading ahead, probing the few it missed


def test_reading_ahead_stops_when_the_order_changes(store: SqliteStore) -> None:
    tail = list(range(4 * CHUNK, 600))
    random.Random(3).shuffle(tail)
    order = list(range(4 * CHUNK)) + tail
    found, statements = lookups(store, order)
    assert found == expected(store, [pid(i) for i in order])
    ranges = kinds(statements)
    assert ranges[:4] == ["probe", "range", "range", "range"]
    assert ranges[4:].count("range") <= 1  # one read that found little, then probes only
