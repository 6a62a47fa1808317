"""The plugin API page: locations handed over unchanged, contract versions, contract checks at
registration, and stores that only satisfy the protocol."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from pyattacker import Pool, Resource, Runner, hookimpl, pipeline, task
from pyattacker.errors import PluginError
from pyattacker.plugins import api
from pyattacker.plugins.manager import discover
from pyattacker.store.location import open_store
from pyattacker_plugins.store_memory import MemoryStore
from tests.support.plugins import make_fake_dist


class _Recording(api.StoreOpenerBase):
    """An opener that remembers every location it was handed and opens a memory store."""

    name = "rec"
    schemes = ("rec",)

    def __init__(self) -> None:
        self.seen: list[str] = []

    def open(self, location: str, *, read_only: bool = False) -> MemoryStore:
        self.seen.append(location)
        return MemoryStore(location)


def _plugin_with(opener: Any, api_version: int | None = None) -> types.ModuleType:
    module = types.ModuleType("rec_plugin")

    @hookimpl
    def pyattacker_stores(register: Any) -> None:
        register(opener)

    module.pyattacker_stores = pyattacker_stores  # type: ignore[attr-defined]
    if api_version is not None:
        module.PYATTACKER_PLUGIN_API = api_version  # type: ignore[attr-defined]
    return module


@pytest.mark.parametrize("location", ["rec://bucket/runs", "rec:bucket/runs?region=eu", "REC://b/r"])
def test_a_store_opener_receives_the_location_exactly_as_written(location: str) -> None:
    opener = _Recording()
    plugins = discover(entry_points=[])
    row = plugins.add_plugin(_plugin_with(opener), "rec")
    assert (row.status, row.contract) == ("active", api.API_VERSION)
    store = open_store(location, plugins=plugins)
    assert opener.seen == [location] and store.location == location


def test_a_plugin_written_for_api_1_still_gets_the_location_without_its_scheme() -> None:
    opener = _Recording()
    plugins = discover(entry_points=[])
    row = plugins.add_plugin(_plugin_with(opener, api_version=1), "rec")
    assert (row.status, row.contract) == ("active", 1)
    open_store("rec://bucket/runs", plugins=plugins)
    assert opener.seen == ["bucket/runs"]


@pytest.mark.parametrize(
    ("declared", "message"),
    [
        (3, "written for plugin API 3; this pyattacker offers plugin API 2"),
        (0, "written for plugin API 0; this pyattacker supports plugin API 1 to 2"),
        ("2", "PYATTACKER_PLUGIN_API must be an integer, got '2'"),
    ],
)
def test_a_plugin_for_a_contract_this_kernel_lacks_is_failed_with_the_reason(
    declared: Any, message: str
) -> None:
    plugins = discover(entry_points=[])
    row = plugins.add_plugin(_plugin_with(_Recording(), declared), "rec")
    assert row.status == "failed" and message in (row.error or "")
    assert "rec" not in plugins.stores  # nothing it registered is used


def test_a_factory_class_missing_a_contract_method_fails_at_registration() -> None:
    class NoFingerprint:
        name = "nofp"

        async def acquire(self, pool: Any, **kw: Any) -> Any: ...

    module = types.ModuleType("algo_plugin")

    @hookimpl
    def pyattacker_algorithms(register: Any) -> None:
        register("nofp", NoFingerprint)

    module.pyattacker_algorithms = pyattacker_algorithms  # type: ignore[attr-defined]
    plugins = discover(entry_points=[])
    row = plugins.add_plugin(module, "algo")
    assert row.status == "failed"
    assert "algorithms 'nofp': class NoFingerprint lacks fingerprint" in (row.error or "")


class _ProtocolOnly:
    """A store written from the ``Store`` protocol alone (no ``StoreBase``): its rows live in a
    memory store it holds, and it offers none of the optional reads."""

    def __init__(self, location: str) -> None:
        self.location, self.read_only = location, False
        self._rows = MemoryStore(location)
        for name in api.Store.__dict__:
            if name in (
                "commit",
                "page",
                "runs",
                "interrupt_running",
                "metrics",
                "metric_points",
                "resources",
            ):
                setattr(self, name, getattr(self._rows, name))

    def close(self) -> None:
        pass


def test_a_protocol_only_store_is_adapted_once_and_runs_with_every_read() -> None:
    store = open_store(_ProtocolOnly("proto:x"))
    assert isinstance(store, api.StoreBase) and store.location == "proto:x"
    assert store.supports_handoffs is False and store.commits_behind is False

    @task(name="double")
    def double(x: int) -> int:
        return 2 * x

    pool = Pool("p", [Resource("r", capacity=2)])
    with Runner(store=store, pools=[pool]) as runner:
        report = runner.run(pipeline("twice", double).map(range(5)))
    assert report.succeeded == 5
    assert store.pipeline_totals()[0] == {"succeeded": 5}
    assert store.task_counts() == {"double": {"succeeded": 5}}
    finals = store.final_artifacts([p.pipeline_id for p in store.page("pipelines")])
    assert len(finals) == 5


def test_an_object_that_is_not_a_store_is_refused_naming_what_it_lacks() -> None:
    class Half:
        location = "half:x"

        def commit(self, batch: Any) -> None: ...

    with pytest.raises(PluginError, match=r"Half is not a store: it lacks page, runs, interrupt_running"):
        open_store(Half())


def test_plugins_json_shows_the_contract_each_plugin_was_checked_against(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_fake_dist(
        tmp_path / "site",
        monkeypatch,
        dist="old-plugin",
        modules={"old_plugin": "PYATTACKER_PLUGIN_API = 1\n", "future_plugin": "PYATTACKER_PLUGIN_API = 9\n"},
        entry_points={"pyattacker.plugins": {"old": "old_plugin", "future": "future_plugin"}},
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site"), "PYATTACKER_PLUGIN_CACHE": "0"}
    env["PYATTACKER_ONLY_PLUGINS"] = "old-plugin"
    out = subprocess.run(
        [sys.executable, "-m", "pyattacker", "plugins", "--json"], capture_output=True, text=True, env=env
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    rows = {r["name"]: r for r in (data["plugins"] if isinstance(data, dict) else data)}
    assert rows["old"]["status"] == "active" and rows["old"]["contract"] == 1
    assert rows["future"]["status"] == "failed" and rows["future"]["contract"] is None
    assert "written for plugin API 9" in rows["future"]["error"]
    assert rows["store-sqlite"]["contract"] == api.API_VERSION


class _RunnerOnlyAlgorithm:
    """An algorithm known only to one Runner's plugins (not installed): it delegates to wait."""

    name = "runner_only"

    def __init__(self, **params: Any) -> None:
        self.params = params

    def fingerprint(self) -> dict[str, Any]:
        return {"name": "runner_only", **self.params}

    async def acquire(self, pool: Any, **kwargs: Any) -> Any:
        from pyattacker.resources.algorithm import resolve_algorithm

        return await resolve_algorithm("wait").acquire(pool, **kwargs)


def test_an_algorithm_registered_only_with_a_runner_can_be_named_by_a_task() -> None:
    """A task's ``algorithm=`` is part of its fingerprint, computed when the pipeline is built
    (before any runner): a name only ``Runner(plugins=...)`` knows is fingerprinted by its spec,
    not refused as unknown; the runner then resolves it through its own plugins."""
    module = types.SimpleNamespace()

    @hookimpl
    def pyattacker_algorithms(register: Any) -> None:
        register("runner_only", _RunnerOnlyAlgorithm)

    module.pyattacker_algorithms = pyattacker_algorithms
    plugins = discover()
    plugins.add_plugin(module, "runner-only-algorithm")

    @task(resource="apis", algorithm={"name": "runner_only", "tag": 1})
    async def call(x: Any, ctx: Any) -> Any:
        async with ctx.acquire():
            return x

    flow = pipeline("p", call)
    with Runner(plugins=plugins, pools=[Pool("apis", [Resource.create("api", capacity=2)])]) as runner:
        report = runner.run(flow.map(range(3)))
    assert (report.succeeded, report.failed) == (3, 0)
    # the spec is the fingerprint: another parameter is another task identity
    other = task(call.fn, resource="apis", algorithm={"name": "runner_only", "tag": 2})
    assert other.fingerprint()["algorithm"] == {"name": "runner_only", "tag": 2}
    assert other.fingerprint() != call.fingerprint()
    # a name this runner's plugins do not know stops the run before its first pipeline, naming it
    typo = pipeline("q", task(call.fn, resource="apis", algorithm="runner_onyl"))
    with Runner(plugins=plugins, pools=[Pool("apis", [Resource.create("api", capacity=2)])]) as runner:
        refused = runner.run(typo.map(range(3)))
        assert list(api.iter_rows(runner.store, "attempts")) == []
    assert refused.stop_reason == "producer_error"
    assert (refused.producer_error or "").startswith(
        "ConfigError: unknown algorithm 'runner_onyl' (did you mean 'runner_only'?)"
    )
