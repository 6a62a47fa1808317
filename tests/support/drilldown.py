"""A store for the viewer's drill-down tests (pipeline page, failure groups, task logs), written
by the real runner, and the real viewer server on a thread of the test process."""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pyattacker import Pool, Resource, RetryableError, Runner, pipeline, task
from tests.support.views import XSS

TOKEN = "drilldown-token"


@task(resource="api")
async def d_fetch(x: dict[str, Any], ctx: Any) -> int:
    async with ctx.acquire():
        ctx.log("fetched %s %s", x["i"], XSS)
        ctx.record(score=x["i"])
        ctx.track(loss=0.5)
        return int(x["i"])


@task(retry={"max_attempts": 2, "base": 0.001})
def d_judge(x: int, ctx: Any) -> dict[str, Any]:
    logging.getLogger("judge").warning("judging %d", x)
    if x % 2 == 0 and ctx.attempt < 2:
        raise RetryableError("flaky once")
    if x % 3 == 0:
        raise ValueError(XSS)
    if x == 5:
        raise KeyError("missing")
    return {"v": x}


def build_drilldown_store(path: str | Path, n: int = 8) -> str:
    """``n`` two-task pipelines (key ``d{i}``): even ones retry once, every third fails with a
    markup message (``ValueError``), ``d5`` with a ``KeyError``; every attempt logs."""
    pools = [Pool("api", [Resource("llm", id="r1", capacity=2)])]
    with Runner(store=str(path), pools=pools, concurrency=2, handle_signals=False) as runner:
        runner.run(
            pipeline("dd", d_fetch, d_judge).map(({"i": i} for i in range(n)), key_of=lambda s: f"d{s['i']}")
        )
    return str(path)


class Client:
    """Requests to a viewer on ``port`` with the test token."""

    def __init__(self, port: int) -> None:
        self.port = port

    def request(
        self, path: str, *, headers: dict[str, str] | None = None, auth: bool = True
    ) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            h = {"Host": f"127.0.0.1:{self.port}"}
            if auth:
                h["Authorization"] = f"Bearer {TOKEN}"
            h.update(headers or {})
            conn.request("GET", path, headers=h)
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()

    def json(self, path: str) -> Any:
        status, _, body = self.request(path)
        assert status == 200, (path, status, body)
        return json.loads(body)


@contextlib.contextmanager
def viewer(store: str, *, sse_hold_s: float = 1.0) -> Iterator[tuple[Any, str]]:
    """The real viewer server on a thread (stopped and closed after); yields it and its URL
    with the token."""
    from pyattacker_plugins.serve.server import ViewerServer

    server = ViewerServer(store, "127.0.0.1", 0, TOKEN, None, answer_ttl_s=0, sse_hold_s=sse_hold_s)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield server, f"{server.url}?token={TOKEN}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
