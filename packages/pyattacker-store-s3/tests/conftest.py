"""A real S3 endpoint for the package's tests: moto's ``ThreadedMotoServer`` on loopback.

The server is started once per session on a free port of 127.0.0.1 and stopped at the end;
boto3 finds it through ``AWS_ENDPOINT_URL`` and dummy credentials in the environment (so the
subprocesses the CLI tests start find it too). No in-process mocks: every request is HTTP.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterator
from typing import Any

import pytest

PLUGIN = "pyattacker-store-s3"
BUCKET = "pyattacker-tests"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def moto_server() -> Iterator[Any]:
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=_free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing-secret",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        import boto3

        boto3.client("s3").create_bucket(Bucket=BUCKET)
        yield server
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(autouse=True)
def _only_this_plugin(moto_server: Any, monkeypatch: pytest.MonkeyPatch, pyattacker_home: Any) -> None:
    """Load this package's plugin and no other third-party one; a private PYATTACKER_HOME."""
    monkeypatch.setenv("PYATTACKER_ONLY_PLUGINS", PLUGIN)
