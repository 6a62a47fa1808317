"""The viewer's drill-down over HTTP: one pipeline in full, failures by error class, task logs
paged and streamed as Server-Sent Events that resume after ``Last-Event-ID``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.drilldown import Client, build_drilldown_store, viewer
from tests.support.views import XSS


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    return build_drilldown_store(tmp_path_factory.mktemp("drill") / "d.db")


@pytest.fixture(scope="module")
def client(store: str) -> Iterator[Client]:
    with viewer(store, sse_hold_s=0.5) as (server, _url):
        yield Client(server.bound_port)


def _pid(client: Client, key: str) -> str:
    rows = client.json("/pipelines?limit=100")["rows"]
    return next(r["pipeline_id"] for r in rows if r["key"] == key)


def _events(body: bytes) -> list[tuple[int, dict[str, Any]]]:
    out = []
    for block in body.decode().split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith(":")
        )
        if fields.get("event") == "log":
            out.append((int(fields["id"]), json.loads(fields["data"])))
    return out


def test_pipeline_detail_has_attempts_decisions_artifacts_and_logs(client: Client) -> None:
    p = client.json(f"/pipeline?pipeline_id={_pid(client, 'd0')}")
    assert p["state"] == "failed" and p["error_message"] == XSS and "ValueError" in p["traceback"]
    assert p["last_frame"]["function"] == "d_judge"
    judge = [a for a in p["attempts"] if a["task_name"] == "d_judge"]
    assert [a["attempt"] for a in judge] == [1, 2]
    assert judge[0]["decision"]["retry"] is True and judge[1]["decision"]["retry"] is False
    assert all(a["duration_ms"] >= 0 for a in p["attempts"])
    fetch = next(a for a in p["attempts"] if a["task_name"] == "d_fetch")
    assert fetch["leases"] and fetch["leases"][0]["pool"] == "api"
    assert {(a["seq"], a["size"] > 0, len(a["digest"]) > 0) for a in p["artifacts"]} >= {
        (-1, True, True),
        (0, True, True),
    }
    assert "payload" not in p["artifacts"][0]
    assert {m["name"] for m in p["metrics"]} == {"score"} and p["curve_keys"] == ["loss"]
    lines = [
        (row["task_name"], row["attempt"], line["stream"], line["text"])
        for row in p["logs"]
        for line in row["lines"]
    ]
    assert ("d_fetch", 1, "log", f"fetched 0 {XSS}") in lines
    assert ("d_judge", 2, "WARNING", "judge: judging 0") in lines and p["keeps_logs"] is True


def test_failures_are_grouped_by_error_class_with_an_example(client: Client) -> None:
    body = client.json("/failures")
    groups = {g["error_type"]: g for g in body["groups"]}
    # d0, d3, d6 fail with ValueError; d5 with KeyError
    assert {k: g["count"] for k, g in groups.items()} == {"ValueError": 3, "KeyError": 1} and body[
        "total"
    ] == 4
    assert [g["error_type"] for g in body["groups"]] == ["ValueError", "KeyError"]  # largest first
    value = groups["ValueError"]
    assert value["example"]["error_message"] == XSS and value["example"]["key"] in {"d0", "d3", "d6"}
    assert value["tasks"] == {"d_judge": 3} and "d_judge" in value["example"]["last_frame"]
    assert groups["KeyError"]["example"]["key"] == "d5" and groups["KeyError"]["error_class"]


def test_logs_page_by_log_id(client: Client) -> None:
    first = client.json("/logs?limit=3")
    assert len(first["rows"]) == 3 and first["next"] is not None
    rest = client.json(f"/logs?limit=1000&after={first['next']}")
    ids = [r["log_id"] for r in first["rows"] + rest["rows"]]
    assert ids == sorted(set(ids)) and rest["next"] is None
    one = client.json(f"/logs?pipeline_id={_pid(client, 'd1')}&task=d_fetch")
    assert len(one["rows"]) == 1 and one["rows"][0]["lines"][0]["text"] == f"fetched 1 {XSS}"
    assert client.request("/logs?after=x")[0] == 400


def test_stream_sends_logs_as_events_and_resumes_after_last_event_id(client: Client) -> None:
    pid = _pid(client, "d2")
    status, headers, body = client.request(f"/logs/stream?pipeline_id={pid}")
    assert status == 200 and headers["content-type"].startswith("text/event-stream")
    assert headers["content-security-policy"].startswith("default-src 'self'")
    events = _events(body)
    assert body.startswith(b"retry: ") and len(events) == 3  # fetch, judge #1, judge #2
    assert all(data["log_id"] == i and data["pipeline_id"] == pid for i, data in events)
    resumed = _events(
        client.request(f"/logs/stream?pipeline_id={pid}", headers={"Last-Event-ID": str(events[0][0])})[2]
    )
    assert [i for i, _ in resumed] == [i for i, _ in events[1:]]
    assert _events(client.request(f"/logs/stream?pipeline_id={pid}&after={events[-1][0]}")[2]) == []


def test_stream_keeps_the_viewers_rules(client: Client, tmp_path: Path) -> None:
    assert client.request("/logs/stream", auth=False)[0] == 401
    assert client.request("/logs/stream", headers={"Host": "evil.example"})[0] == 403
    status, _, body = client.request("/logs/stream", headers={"Last-Event-ID": "not-a-number"})
    assert status == 400 and b"after" in body
    assert client.request("/logs/stream?after=1&after=2")[0] == 400
    assert client.request("/pipeline.html")[0] == 200 and client.request("/pipeline.js")[0] == 200
    assert client.request("/pipeline.html", auth=False)[0] == 401


def test_stream_of_an_unreadable_store_is_503(tmp_path: Path) -> None:
    path = build_drilldown_store(tmp_path / "gone.db", n=1)
    with viewer(path) as (server, _url):
        Path(path).unlink()
        status, _, body = Client(server.bound_port).request("/logs/stream")
        assert status == 503 and b"cannot be read" in body
