"""Requests per 1,000 tasks, pipelines/s and bytes per pipeline: the S3 store on moto vs SQLite.

Run: ``python packages/pyattacker-store-s3/benchmarks/bench_s3.py`` (needs ``moto[server]``).
A ``ThreadedMotoServer`` on loopback plays S3; every request the store's clients send is
counted with a botocore ``before-send`` hook. Tasks sleep 50 ms (an endpoint's latency).
Numbers go to stdout as JSON; the package README quotes them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import socket
import tempfile
import time
from typing import Any

import boto3
import pyattacker_store_s3.client as s3client
from moto.server import ThreadedMotoServer

from pyattacker import Runner, pipeline, task
from pyattacker.plugins.manager import discover

COUNTERS: list[s3client.RequestCounter] = []
_make = s3client.make_client


def _counted_client(**kwargs: Any) -> Any:
    client = _make(**kwargs)
    COUNTERS.append(s3client.RequestCounter(client))
    return client


@task
async def slow(value: int) -> int:
    await asyncio.sleep(0.05)
    return value


def _measure(store: str, pipelines: int, concurrency: int, plugins: Any) -> dict[str, Any]:
    COUNTERS.clear()
    started = time.perf_counter()
    with Runner(store=store, concurrency=concurrency, plugins=plugins) as runner:
        report = runner.run(pipeline(f"bench_{concurrency}", slow).map(range(pipelines)))
    elapsed = time.perf_counter() - started
    assert report.exit_code == 0, report
    by_op: dict[str, int] = {}
    for counter in COUNTERS:
        for op, n in counter.by_operation.items():
            by_op[op] = by_op.get(op, 0) + n
    return {
        "store": store.split(":")[0],
        "pipelines": pipelines,
        "concurrency": concurrency,
        "pipelines_per_s": round(pipelines / elapsed, 1),
        "requests": sum(by_op.values()),
        "requests_by_operation": by_op,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--pipelines", type=int, default=1000)
    p.add_argument(
        "--intervals", default="0,50,100", help="commit_interval_ms values to measure (comma-separated)"
    )
    args = p.parse_args()
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench", AWS_DEFAULT_REGION="us-east-1",
        AWS_ENDPOINT_URL=f"http://127.0.0.1:{port}",
    )  # fmt: skip
    s3client.make_client = _counted_client  # type: ignore[assignment]
    import pyattacker_store_s3.store as s3store

    s3store.make_client = _counted_client  # type: ignore[assignment]
    try:
        boto3.client("s3").create_bucket(Bucket="bench")
        plugins = discover()
        results = []
        with tempfile.TemporaryDirectory() as tmp:
            for concurrency in (64, 1024):
                for interval in [int(v) for v in args.intervals.split(",")]:
                    prefix = f"c{concurrency}-i{interval}"
                    location = f"s3://bench/{prefix}/run?commit_interval_ms={interval}"
                    row = _measure(location, args.pipelines, concurrency, plugins)
                    listed = boto3.client("s3").list_objects_v2(Bucket="bench", Prefix=prefix)
                    stored = sum(o["Size"] for o in listed.get("Contents", ()))
                    row["commit_interval_ms"] = interval
                    row["bytes_per_pipeline"] = round(stored / args.pipelines, 1)
                    row["requests_per_1000_tasks"] = round(row["requests"] * 1000 / args.pipelines, 1)
                    results.append(row)
                db = os.path.join(tmp, f"c{concurrency}.db")
                sqlite = _measure(db, args.pipelines, concurrency, plugins)
                sqlite["store"] = "sqlite"
                sqlite["bytes_per_pipeline"] = round(os.path.getsize(db) / args.pipelines, 1)
                results.append(sqlite)
        print(json.dumps(results, indent=1))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
