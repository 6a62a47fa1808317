"""Tasks for the rate budget tests: ``grant`` returns when its lease was granted (the machine's
monotonic clock: the tests run one local Ray, so one clock for every shard); ``call`` asks a
loopback server, and turns its 429 into a ``RetryableError`` with the server's Retry-After."""

from __future__ import annotations

import asyncio
import os
import urllib.error
import urllib.request
from typing import Any

from pyattacker import RetryableError, task

PORT_ENV = "PYATTACKER_TEST_SERVER_PORT_FILE"  # PYATTACKER_*: forwarded to every shard


@task
async def grant(value: Any, ctx: Any) -> Any:
    async with ctx.acquire() as lease:
        return {"at": lease.acquired_at, "shard": os.environ["PYATACKER_SHARD"]}


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=30) as response:
        body: bytes = response.read()
        return body


@task
async def call(value: Any, ctx: Any) -> Any:
    with open(os.environ[PORT_ENV]) as fh:
        port = fh.read().strip()
    url = f"http://127.0.0.1:{port}/shard-" + os.environ["PYATACKER_SHARD"].split("/")[0]
    async with ctx.acquire():
        try:
            await asyncio.to_thread(_get, url)
        except urllib.error.HTTPError as exc:
            if exc.code != 429:
                raise
            after = float(exc.headers["Retry-After"])
            raise RetryableError("429", error_class="rate_limit", retry_after=after) from None
    return value
