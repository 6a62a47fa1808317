"""A failed pipeline's stored traceback is shown: ``report --errors`` (its last frame),
``report --traceback`` (all of it), ``report --json``, every ``export --rows`` kind that shows the
failure, and the viewer's pipeline detail (a real ``serve`` on a loopback port)."""

from __future__ import annotations

import csv
import io
import json
import textwrap
from typing import Any

import pytest

from pyattacker.views.failures import last_frame, last_frame_text
from tests.support.cli import cli, cli_env
from tests.support.views import serving

TOKEN = "tb-token-43"
TASKS = textwrap.dedent(
    """
    from pyattacker import task

    def helper(value):
        raise ValueError(f"bad value {value['i']}")

    @task(name="boom", retry={"max_attempts": 2, "base": 0.0, "on": ["ValueError"]})
    def boom(value):
        return helper(value)
    """
)


@pytest.fixture(scope="module")
def failed(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, str]]:
    """A store whose three pipelines failed in ``helper`` (called by task ``boom``), by the CLI."""
    root = tmp_path_factory.mktemp("tracebacks")
    (root / "tbtasks.py").write_text(TASKS)
    config = {
        "run": {"store": str(root / "tb.db")},
        "source": {"kind": "range", "n": 3},
        "pipeline": {"name": "tb", "tasks": [{"use": "tbtasks:boom"}]},
    }
    (root / "tb.json").write_text(json.dumps(config))
    env = cli_env(root / "home", root)
    done = cli(["run", "-c", str(root / "tb.json")], env)
    assert done.returncode == 1, done.stderr
    return str(root / "tb.db"), env


def _where(text: str) -> bool:
    return "tbtasks.py:5 in helper: raise ValueError(f\"bad value {value['i']}\")" in text


def test_report_errors_shows_the_last_frame(failed: tuple[str, dict[str, str]]) -> None:
    store, env = failed
    done = cli(["report", store, "--errors", "5"], env)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    at = [line for line in lines if line.strip().startswith("at ")]
    assert len(at) == 3 and all(_where(line) for line in at)
    assert "Traceback (most recent call last)" not in done.stdout


def test_report_traceback_shows_the_whole_traceback(failed: tuple[str, dict[str, str]]) -> None:
    store, env = failed
    done = cli(["report", store, "--traceback"], env)  # implies --errors 20
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("Traceback (most recent call last)") == 3
    assert "in boom" in done.stdout and "in helper" in done.stdout
    assert "ValueError: bad value 2" in done.stdout


def test_report_json_carries_traceback_and_last_frame(failed: tuple[str, dict[str, str]]) -> None:
    store, env = failed
    done = cli(["report", store, "--json"], env)
    doc = json.loads(done.stdout)
    assert len(doc["errors"]) == 3
    for error in doc["errors"]:
        assert "Traceback (most recent call last)" in error["traceback"]
        assert error["last_frame"]["function"] == "helper" and error["last_frame"]["line"] == 5
        assert error["last_frame"]["file"].endswith("tbtasks.py")


def _export(store: str, env: dict[str, str], kind: str, fmt: str) -> list[dict[str, Any]]:
    done = cli(["export", store, "-", "--rows", kind, "--format", fmt], env)
    assert done.returncode == 0, done.stderr
    if fmt == "csv":
        return list(csv.DictReader(io.StringIO(done.stdout)))
    return [json.loads(line) for line in done.stdout.splitlines()]


def _final(event: dict[str, Any]) -> bool:
    """A ``task.failed`` event that was not retried (the one that failed the pipeline)."""
    data = event["data"] if isinstance(event["data"], dict) else json.loads(event["data"])
    return not data["decision"]["retry"]


@pytest.mark.parametrize("fmt", ["jsonl", "csv"])
@pytest.mark.parametrize(
    ("kind", "shows_failure"),
    [
        ("pipelines", lambda r: True),
        ("results", lambda r: True),
        ("tasks", lambda r: True),
        ("attempts", lambda r: str(r["attempt"]) == "2"),  # the attempt that ended the task
        ("events", lambda r: r["kind"] == "pipeline.failed" or (r["kind"] == "task.failed" and _final(r))),
    ],
)
def test_every_export_kind_that_shows_the_failure_carries_the_traceback(
    failed: tuple[str, dict[str, str]], kind: str, shows_failure: Any, fmt: str
) -> None:
    store, env = failed
    rows = _export(store, env, kind, fmt)
    assert rows and all("traceback" in r for r in rows)
    with_tb = [r for r in rows if r["traceback"]]
    assert with_tb == [r for r in rows if shows_failure(r)]
    assert len(with_tb) >= 3
    assert all(_where(last_frame_text(r["traceback"]) or "") for r in with_tb)


def test_the_viewer_lists_the_last_frame_and_details_the_traceback(
    failed: tuple[str, dict[str, str]],
) -> None:
    import http.client

    store, _env = failed

    def get(path: str) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            conn.request(
                "GET", path, headers={"Host": f"127.0.0.1:{port}", "Authorization": f"Bearer {TOKEN}"}
            )
            resp = conn.getresponse()
            return resp.status, json.loads(resp.read())
        finally:
            conn.close()

    with serving(store, TOKEN) as (port, _url):
        status, pipes = get("/pipelines")
        assert status == 200 and len(pipes["rows"]) == 3
        for row in pipes["rows"]:
            assert "traceback" not in row  # lists stay lean
            assert _where(row["last_frame"])
        status, errors = get("/errors")
        assert status == 200 and all(_where(e["last_frame"]) for e in errors["rows"])
        pid = errors["rows"][0]["pipeline_id"]
        status, detail = get(f"/pipeline?pipeline_id={pid}")
        assert status == 200
        assert "Traceback (most recent call last)" in detail["traceback"]
        assert detail["last_frame"]["function"] == "helper"
        assert [t["name"] for t in detail["tasks"]] == ["boom"]
        assert get("/pipeline")[0] == 400
        assert get("/pipeline?pipeline_id=nope")[0] == 404


def test_last_frame_of_a_chained_error_is_where_the_last_error_was_raised() -> None:
    def inner() -> None:
        raise KeyError("k")

    def outer() -> None:
        try:
            inner()
        except KeyError as exc:
            raise RuntimeError("wrapped") from exc

    import traceback

    try:
        outer()
    except RuntimeError as exc:
        text = "".join(traceback.format_exception(exc))
    frame = last_frame(text)
    assert frame is not None
    assert frame["function"] == "outer" and frame["code"] == 'raise RuntimeError("wrapped") from exc'
    assert last_frame(None) is None and last_frame("no frames here") is None
