"""``run|resume --shards N --executor ray`` against a real local Ray: the same results as a
single process, a SIGKILLed shard resumed without replays, Ctrl-C, a bad address.

Run with ``-n 0`` (one process, so one Ray): ``.ci/run`` does.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pyattacker.plugins.api import iter_rows
from pyattacker.shard.plan import shard_index
from pyattacker.store.location import open_store
from pyattacker.testing.audit import LEDGER_ENV, Execution, read_ledger

from .conftest import PLUGIN

HERE = Path(__file__).parent


def _env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYATTACKER_ONLY_PLUGINS": PLUGIN, "PYTHONPATH": path, **extra}


def _argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "pyattacker", *args]


def _cli(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _argv(*args), cwd=tmp_path, env=_env(**env), capture_output=True, text=True, timeout=300
    )


def _ray(address: str, *more: str, progress_s: float = 0) -> list[str]:
    options = ["address=" + address, f"progress_s={progress_s}", f"env=PYTHONPATH,{LEDGER_ENV}", *more]
    argv = ["--executor", "ray"]
    for option in options:
        argv += ["--executor-option", option]
    return argv


def _config(tmp_path: Path, rows: int, tasks: str) -> None:
    data = "".join(json.dumps({"id": f"r{i:03d}", "text": f"row {i}"}) + "\n" for i in range(rows))
    (tmp_path / "data.jsonl").write_text(data)
    (tmp_path / "cfg.yaml").write_text(
        f"pipeline:\n  name: ray_cli\n  tasks:\n{tasks}"
        "source: { kind: jsonl, path: data.jsonl, key_field: id }\n"
    )


ECHO = "    - { use: pyattacker.tasks:echo }\n    - { use: pyattacker.tasks:echo }\n"
AUDITED = "    - { use: pyattacker.testing.audit:step }\n" * 2


def _results(tmp_path: Path, *stores: str) -> dict[str, Any]:
    out = tmp_path / f"export-{len(list(tmp_path.glob('export-*')))}.jsonl"
    done = _cli(tmp_path, "export", *stores, str(out), "--rows", "results")
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    return {r["pipeline_id"]: (r.get("state"), r.get("result")) for r in rows}


def _artifacts(store: Path) -> set[tuple[str, int]]:
    reader = open_store(str(store), read_only=True)
    try:
        return {(a.pipeline_id, a.seq) for a in iter_rows(reader, "artifacts") if a.seq >= 0}
    finally:
        reader.close()


_ledger = read_ledger


@pytest.mark.parametrize("storage", ["auto", "ship"])
def test_sharded_run_equals_single_process_run(tmp_path: Path, ray_address: str, storage: str) -> None:
    _config(tmp_path, 30, ECHO)
    single = _cli(tmp_path, "run", "-c", "cfg.yaml", "--store", "single.db")
    assert single.returncode == 0, single.stderr
    sharded = _cli(
        tmp_path,
        "run", "-c", "cfg.yaml", "--shards", "2", "--store", "runs/x.db", "--summary-format", "json",
        *_ray(ray_address, f"storage={storage}"),
    )  # fmt: skip
    assert sharded.returncode == 0, sharded.stderr
    doc = json.loads(sharded.stdout)
    assert doc["executor"] == "ray" and doc["exit_code"] == 0
    assert [s["code"] for s in doc["shards"]] == [0, 0]
    assert ("shipped back to the driver" in doc["executor_note"]) == (storage == "ship"), doc["executor_note"]
    assert doc["merged"]["pipelines"]["by_state"] == {"succeeded": 30}

    stores = [tmp_path / "runs" / f"x.shard{i}of2.db" for i in range(2)]
    assert _results(tmp_path, *map(str, stores)) == _results(tmp_path, "single.db")
    for i, store in enumerate(stores):  # the local executor's assignment: each key in its shard's store
        keys = {pid for pid, _seq in _artifacts(store)}
        assert keys and all(shard_index(k, 2) == i for k in keys)

    if storage != "ship":
        return
    # a resume ships each store to its node: every pipeline is found done there, none runs again
    again = _cli(
        tmp_path,
        "resume",
        "-c",
        "cfg.yaml",
        "--shards",
        "2",
        "--store",
        "runs/x.db",
        *_ray(ray_address, f"storage={storage}"),
    )
    assert again.returncode == 0, again.stderr
    assert "attempts 0" in again.stdout and "skipped 0" not in again.stdout, again.stdout


def _start(tmp_path: Path, ledger: Path, address: str, progress_s: float = 0) -> subprocess.Popen[str]:
    ray = _ray(address, progress_s=progress_s)
    cmd = _argv("run", "-c", "cfg.yaml", "--shards", "2", "--store", "runs/x.db", "--concurrency", "2", *ray)
    return subprocess.Popen(
        cmd,
        cwd=tmp_path,
        env=_env(**{LEDGER_ENV: str(ledger)}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_ledger(proc: subprocess.Popen[str], ledger: Path, lines: int) -> list[Execution]:
    """Wait until the ledger has ``lines`` lines, from both shards (each has its store then)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the run ended early: {proc.communicate()[1]}")
        seen = _ledger(ledger)
        if len(seen) >= lines and len({shard_index(key, 2) for key, _seq, _pid in seen}) == 2:
            return seen
        time.sleep(0.05)
    raise AssertionError("the shards wrote nothing to the ledger in 120 s")


def test_sigkilled_shard_is_resumed_without_replays(tmp_path: Path, ray_address: str) -> None:
    _config(tmp_path, 40, AUDITED)
    ledger = tmp_path / "ledger.tsv"
    proc = _start(tmp_path, ledger, ray_address, progress_s=0.2)
    try:
        seen = _wait_for_ledger(proc, ledger, 10)
        victim_key, _seq, victim = seen[0]
        os.kill(victim, signal.SIGKILL)  # the shard's own process, on its Ray node
        out, err = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
    killed = shard_index(victim_key, 2)
    assert proc.returncode == 2, err
    assert f"shard {killed}/2: exit 2 (killed by SIGKILL" in out, out
    assert "[ray] shard 0/2: " in err or "[ray] shard 1/2: " in err, err  # progress from the stores

    stores = [tmp_path / "runs" / f"x.shard{i}of2.db" for i in range(2)]
    durable = _artifacts(stores[0]) | _artifacts(stores[1])
    assert durable and len(durable) < 80, "the kill came too late to prove anything"
    crash_mark = len(_ledger(ledger))

    resumed = _cli(
        tmp_path, "resume", "-c", "cfg.yaml", "--shards", "2", "--store", "runs/x.db", *_ray(ray_address),
        **{LEDGER_ENV: str(ledger)},
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    after = [(p, s) for p, s, _pid in _ledger(ledger)[crash_mark:]]
    assert after, "resume ran nothing: the test proves nothing"
    replays = [entry for entry in after if entry in durable]
    assert replays == [], f"{len(replays)} durable task(s) ran again after the kill"
    # only the killed shard had work left: the other one ended before the resume
    assert {shard_index(k, 2) for k, _ in after} == {killed}
    report = _cli(tmp_path, "report", str(stores[0]), str(stores[1]), "--run-id", "all", "--json")
    assert json.loads(report.stdout)["pipelines"]["by_state"] == {"succeeded": 40}


def test_ctrl_c_stops_remote_shards_with_130_and_leaves_them_resumable(
    tmp_path: Path, ray_address: str
) -> None:
    _config(tmp_path, 40, AUDITED)
    ledger = tmp_path / "ledger.tsv"
    proc = _start(tmp_path, ledger, ray_address)
    try:
        _wait_for_ledger(proc, ledger, 6)
        os.kill(proc.pid, signal.SIGINT)  # the driver only, as a terminal's Ctrl-C reaches it
        _out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "resumable" in err
    stores = [tmp_path / "runs" / f"x.shard{i}of2.db" for i in range(2)]
    assert all(s.exists() for s in stores)
    report = json.loads(_cli(tmp_path, "report", *map(str, stores), "--json").stdout)
    assert report["pipelines"]["by_state"].get("succeeded", 0) < 40

    resumed = _cli(
        tmp_path, "resume", "-c", "cfg.yaml", "--shards", "2", "--store", "runs/x.db", *_ray(ray_address),
        **{LEDGER_ENV: str(ledger)},
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    final = json.loads(_cli(tmp_path, "report", *map(str, stores), "--run-id", "all", "--json").stdout)
    assert final["pipelines"]["by_state"] == {"succeeded": 40}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_bad_address_and_bad_options_are_exit_2(tmp_path: Path) -> None:
    _config(tmp_path, 4, ECHO)
    base = ["run", "-c", "cfg.yaml", "--shards", "2", "--store", "x.db", "--executor", "ray"]
    nobody = _cli(tmp_path, *base, "--executor-option", f"address=127.0.0.1:{_free_port()}")
    assert nobody.returncode == 2, nobody.stderr
    assert "no Ray cluster reachable at 127.0.0.1:" in nobody.stderr
    unknown = _cli(tmp_path, *base, "--executor-option", "adress=127.0.0.1:1")
    assert unknown.returncode == 2
    assert "unknown option(s) adress" in unknown.stderr
    storage = _cli(tmp_path, *base, "--executor-option", "storage=nfs")
    assert storage.returncode == 2
    assert "storage must be one of auto, shared, ship" in storage.stderr
    budget = _cli(tmp_path, *base, "--executor-option", "budget=nfs")
    assert budget.returncode == 2
    assert "budget must be one of auto, actor, file" in budget.stderr
    assert not list(tmp_path.glob("x.shard*"))


def test_ray_is_imported_only_when_the_executor_is_used(tmp_path: Path) -> None:
    code = (
        "import sys; from pyattacker.plugins.manager import get_plugins; get_plugins();"
        " print('ray' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
    listed = _cli(tmp_path, "plugins", "--json")
    assert "executor-ray" in listed.stdout or PLUGIN in listed.stdout


def test_ctrl_c_while_shards_wait_for_a_node_ends_them_unstarted(tmp_path: Path, ray_address: str) -> None:
    """Shards that ask for more CPUs than the cluster has wait for a node; a Ctrl-C then ends
    them at once (130), nothing of them having run."""
    _config(tmp_path, 6, ECHO)
    cmd = _argv(
        "run", "-c", "cfg.yaml", "--shards", "2", "--store", "runs/x.db", *_ray(ray_address, "num_cpus=3")
    )
    proc = subprocess.Popen(
        cmd, cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # the driver says so once it has connected and starts submitting
            if "running 2 shards" in line:
                break
        time.sleep(1.0)  # both submitted (placement can never succeed: 3 CPUs asked, 2 exist)
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert out.count("interrupted before it started on a Ray node") == 2, out
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").glob("x.shard*"))
