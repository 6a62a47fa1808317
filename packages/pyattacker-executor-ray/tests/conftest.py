"""One real local Ray for the package's tests (no mocks), started once per session.

``ray.init(num_cpus=2, include_dashboard=False)`` in the test process, usage statistics off;
every command under test is a ``pyattacker`` subprocess that connects to it through
``--executor-option address=...`` (its GCS address), and ``ray.shutdown()`` stops it at the end.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

PLUGIN = "pyattacker-executor-ray"


@pytest.fixture(scope="session")
def ray_address() -> Iterator[str]:
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    import ray

    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        logging_level="WARNING",
    )
    try:
        yield str(ray.get_runtime_context().gcs_address)
    finally:
        ray.shutdown()


@pytest.fixture(autouse=True)
def _only_this_plugin(monkeypatch: pytest.MonkeyPatch, pyattacker_home: Any) -> None:
    """Load this package's plugin and no other third-party one; a private PYATTACKER_HOME."""
    monkeypatch.setenv("PYATTACKER_ONLY_PLUGINS", PLUGIN)
