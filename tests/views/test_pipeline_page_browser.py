"""The pipeline page and the failure groups in a real browser (headless Chromium): a failed
pipeline's traceback shown, a log line streamed over Server-Sent Events arriving after the page
loaded, and stored text (XSS probes in messages and log lines) rendered as text."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pyattacker.model import Batch, LogRecord
from pyattacker_plugins.store_sqlite import SqliteStore
from tests.support.browser import render
from tests.support.drilldown import Client, build_drilldown_store, viewer
from tests.support.views import XSS

PROBE = "<img src=x onerror=alert(1)>"


def _text(dom: str, element_id: str) -> str:
    match = re.search(rf'<(\w+) id="{element_id}"[^>]*>(.*?)</\1>', dom, re.S)
    assert match, f"no #{element_id} in the page"
    return html.unescape(re.sub(r"<[^>]+>", " ", match.group(2)))


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    return build_drilldown_store(tmp_path_factory.mktemp("page") / "d.db")


def _pid(port: int, key: str) -> str:
    rows = Client(port).json("/pipelines?limit=100")["rows"]
    return str(next(r["pipeline_id"] for r in rows if r["key"] == key))


def test_pipeline_page_shows_the_traceback_attempts_artifacts_and_logs_as_text(store: str) -> None:
    with viewer(store) as (server, _url):
        pid = _pid(server.bound_port, "d0")
        dom = render(f"{server.url}pipeline.html?pipeline_id={pid}&token=drilldown-token", budget_ms=2000)
    assert "Traceback (most recent call last)" in _text(dom, "traceback")
    assert "ValueError" in _text(dom, "traceback") and "d_judge" in _text(dom, "traceback")
    assert XSS in _text(dom, "error") and "<script>alert" not in dom  # shown, never run
    attempts = _text(dom, "attempts")
    assert "retry in" in attempts and "no retry" in attempts
    assert "api" in _text(dom, "leases")
    assert re.search(r"[0-9a-f]{16}", _text(dom, "artifacts"))
    logs = _text(dom, "logs")
    assert f"fetched 0 {XSS}" in logs and "judge: judging 0" in logs
    assert _text(dom, "status").strip() == ""  # no error drawn


@pytest.fixture()
def streaming(store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:
    """A viewer whose first log stream commits a new line to the store as it starts: the line
    exists only after the page has loaded, so it can only reach the page through the stream."""
    import shutil

    from pyattacker_plugins.serve import server as server_module

    copy = str(tmp_path / "live.db")
    shutil.copy(store, copy)
    real = server_module.log_stream
    committed: list[bool] = []

    def stream(reader: Any, filters: dict[str, Any], after: int | None, **kw: Any) -> Iterator[bytes]:
        if not committed:
            committed.append(True)
            writer = SqliteStore.open_writer(copy)
            try:
                pid = filters["pipeline_id"]
                batch = Batch()
                batch.logs.append(
                    LogRecord(
                        run_id="live",
                        pipeline_id=pid,
                        task_run_id=f"{pid}:1",
                        task_name="d_judge",
                        seq=1,
                        attempt=3,
                        ts=1.0,
                        lines=[(1.0, "stdout", f"streamed later {PROBE}")],
                    )
                )
                writer.commit(batch)
            finally:
                writer.close()
        return real(reader, filters, after, **kw)

    monkeypatch.setattr(server_module, "log_stream", stream)
    with viewer(copy, sse_hold_s=1.0) as (server, _url):
        pid = _pid(server.bound_port, "d1")
        yield f"{server.url}pipeline.html?pipeline_id={pid}&token=drilldown-token", copy


def test_a_log_line_streamed_after_the_page_loaded_arrives_as_text(streaming: tuple[str, str]) -> None:
    url, _copy = streaming
    dom = render(url, budget_ms=3000)
    logs = _text(dom, "logs")
    assert f"streamed later {PROBE}" in logs and "d_judge#3" in logs
    assert "fetched 1" in logs  # the lines the page loaded with are still there, once each
    assert logs.count("streamed later") == 1
    assert "<img src=x" not in dom  # the probe stayed text


def test_dashboard_links_pipelines_to_their_page_and_groups_failures(store: str) -> None:
    with viewer(store) as (server, _url):
        dom = render(f"{server.url}?token=drilldown-token", budget_ms=2500)
    groups = _text(dom, "failure-groups")
    assert "ValueError" in groups and "KeyError" in groups and XSS in groups
    assert "<script>alert" not in dom
    links = re.findall(r'<a href="/pipeline\.html\?pipeline_id=([0-9a-f]+)">d\d</a>', dom)
    assert len(set(links)) == 8
