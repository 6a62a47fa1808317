"""Group commit across PUTs: batches queued while a PUT is in flight share the next segment."""

from __future__ import annotations

import time
from pathlib import Path

import boto3
import pytest
from pyattacker_store_s3.store import S3Store

from pyattacker.errors import ConfigError
from pyattacker.store.location import open_store
from pyattacker.testing.rows import attempt, batch_of, pipeline

from .conftest import BUCKET


def _segments(prefix: str) -> list[str]:
    listed = boto3.client("s3").list_objects_v2(Bucket=BUCKET, Prefix=f"{prefix}/segments/")
    return [o["Key"] for o in listed.get("Contents", ())]


def test_batches_queued_during_a_put_go_out_in_one(tmp_path: Path) -> None:
    prefix = f"group-{tmp_path.name}/run"
    store = open_store(f"s3://{BUCKET}/{prefix}")
    try:
        assert store.commits_behind
        with store._lock:  # type: ignore[attr-defined]  # hold the writer after its first PUT
            first = store.commit_behind(batch_of(pipelines=[pipeline("p0")], attempts=[attempt("p0")]))
            while not _segments(prefix):  # the first PUT is done; applying it waits for the lock
                time.sleep(0.01)
            later = [
                store.commit_behind(batch_of(pipelines=[pipeline(f"p{i}")], attempts=[attempt(f"p{i}")]))
                for i in range(1, 6)
            ]
            assert first is not None and not first.done()  # not acknowledged before it is applied
        for future in [first, *later]:
            assert future is not None
            future.result(timeout=60)
        assert len(_segments(prefix)) == 2  # p0 alone, then p1..p5 together
        assert [a.attempt_id for a in store.page("attempts")] == [1, 2, 3, 4, 5, 6]
    finally:
        store.close()
    reader = open_store(f"s3://{BUCKET}/{prefix}", read_only=True)
    assert len(reader.lookup_pipelines([f"p{i}" for i in range(6)])) == 6


def test_commit_interval_spaces_puts_so_later_batches_share_one(tmp_path: Path) -> None:
    """``?commit_interval_ms``: a batch committed right after a PUT waits for the interval, and
    every batch queued meanwhile goes out with it (one request, not one per batch)."""
    prefix = f"interval-{tmp_path.name}/run"
    store = open_store(f"s3://{BUCKET}/{prefix}?commit_interval_ms=2000")
    try:
        store.commit(batch_of(pipelines=[pipeline("p0")], attempts=[attempt("p0")]))
        assert len(_segments(prefix)) == 1
        later = []
        for i in range(1, 6):  # each alone would be its own PUT without the interval
            later.append(
                store.commit_behind(batch_of(pipelines=[pipeline(f"p{i}")], attempts=[attempt(f"p{i}")]))
            )
            time.sleep(0.05)  # the writer is idle between them
        for future in later:
            assert future is not None
            future.result(timeout=60)
        assert len(_segments(prefix)) == 2  # p0, then p1..p5 together
    finally:
        store.close()


def test_a_bad_commit_interval_is_a_config_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="commit_interval_ms must be a number of milliseconds"):
        open_store(f"s3://{BUCKET}/bad-{tmp_path.name}/run?commit_interval_ms=soon")


class _Gets:
    """Counts a client's GetObject requests by key folder (a botocore event hook)."""

    def __init__(self, client: object) -> None:
        self.keys: list[str] = []
        client.meta.events.register("before-parameter-build.s3.GetObject", self._count)  # type: ignore[attr-defined]

    def _count(self, params: dict, **kwargs: object) -> None:
        self.keys.append(params["Key"])


def test_compaction_lets_a_reader_open_with_one_get_per_run_of_segments(tmp_path: Path) -> None:
    prefix = f"compact-{tmp_path.name}/run"
    store = open_store(f"s3://{BUCKET}/{prefix}?compact_every=4")
    try:
        for i in range(10):  # one segment each: committed one after another
            store.commit(batch_of(pipelines=[pipeline(f"p{i}")], attempts=[attempt(f"p{i}")]))
        follower = open_store(f"s3://{BUCKET}/{prefix}", read_only=True)  # opened mid-run
        store.commit(batch_of(pipelines=[pipeline("p10")], attempts=[attempt("p10")]))
    finally:
        store.close()  # compacts the rest (segments 9-11)
    listed = boto3.client("s3").list_objects_v2(Bucket=BUCKET, Prefix=f"{prefix}/compacted/")
    names = [o["Key"].rsplit("/", 1)[-1] for o in listed.get("Contents", ())]
    assert names == [
        "000000000001-000000000004.seg",
        "000000000005-000000000008.seg",
        "000000000009-000000000011.seg",
    ]
    assert len(_segments(prefix)) == 11  # the single segments stay (a reader may have listed them)

    client = boto3.client("s3")
    gets = _Gets(client)
    reader = S3Store(f"s3://{BUCKET}/{prefix}", read_only=True, client=client)
    assert [k.rsplit("/", 2)[-2] for k in gets.keys] == ["compacted"] * 3  # not 11 segment GETs
    expected = [f"p{i}" for i in range(11)]
    assert [a.pipeline_id for a in reader.page("attempts")] == expected
    assert [a.attempt_id for a in reader.page("attempts")] == list(range(1, 12))
    assert [a.pipeline_id for a in follower.page("attempts")] == expected  # a reader from before
