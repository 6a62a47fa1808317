"""The one-writer rule: a second writer is refused naming the holder; a stale lease is taken over."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import boto3
import pytest

from pyattacker.errors import ConfigError, StoreUnavailable
from pyattacker.store.location import open_store
from pyattacker.testing.rows import commit, pipeline

from .conftest import BUCKET


def _lease(prefix: str, **holder: object) -> None:
    body = {"pid": 1, "host": socket.gethostname(), "token": "t", "expires_at": time.time() + 300, "ttl": 30}
    body.update(holder)
    boto3.client("s3").put_object(Bucket=BUCKET, Key=f"{prefix}/writer.lease", Body=json.dumps(body).encode())


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_second_writer_is_refused_naming_the_holder(tmp_path: Path) -> None:
    location = f"s3://{BUCKET}/lease-{tmp_path.name}/run"
    first = open_store(location)
    try:
        with pytest.raises(
            StoreUnavailable, match=rf"is being written by pid {os.getpid()} on {socket.gethostname()}"
        ):
            open_store(location)
    finally:
        first.close()
    open_store(location).close()  # released on close


def test_a_lease_left_by_a_killed_writer_is_taken_over(tmp_path: Path) -> None:
    prefix = f"lease-{tmp_path.name}/run"
    first = open_store(f"s3://{BUCKET}/{prefix}")
    commit(first, pipelines=[pipeline("p1", state="running")])
    first._lease._stop.set()  # type: ignore[attr-defined]  # as if killed: nothing released
    _lease(prefix, pid=_dead_pid())  # its pid on this host is gone, its lease not yet expired
    second = open_store(f"s3://{BUCKET}/{prefix}")
    try:
        assert second.interrupt_running("r-new", 5.0) == 1
        # the old writer cannot write over the new one: its next segment number is taken
        commit(second, pipelines=[pipeline("p2")])
        with pytest.raises(StoreUnavailable, match="another writer"):
            commit(first, pipelines=[pipeline("p3")])
        assert set(second.lookup_pipelines(["p1", "p2", "p3"])) == {"p1", "p2"}
    finally:
        second.close()


def test_a_live_lease_elsewhere_is_refused_until_it_expires(tmp_path: Path) -> None:
    prefix = f"lease-{tmp_path.name}/run"
    _lease(prefix, host="other-host", pid=4242)
    with pytest.raises(StoreUnavailable, match="is being written by pid 4242 on other-host"):
        open_store(f"s3://{BUCKET}/{prefix}")
    _lease(prefix, host="other-host", pid=4242, expires_at=time.time() - 1)  # its writer stopped renewing
    open_store(f"s3://{BUCKET}/{prefix}").close()


def test_bad_locations_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown option\(s\) sync"):
        open_store(f"s3://{BUCKET}/x?sync=full")
    with pytest.raises(ConfigError, match="does not exist"):
        open_store(f"s3://{BUCKET}/missing-{tmp_path.name}", read_only=True)
    with pytest.raises(StoreUnavailable, match="bucket 'no-such-bucket' does not exist"):
        open_store("s3://no-such-bucket/run")
