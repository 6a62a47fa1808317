"""The viewer's runs and compare pages: their JSON endpoints over HTTP, and what a user sees in
a real browser (headless Chromium), with text from the store drawn as text."""

from __future__ import annotations

import html
import json
import re
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pyattacker.store.location import open_store
from tests.support.browser import render
from tests.support.runs import two_run_store
from tests.support.views import XSS

TOKEN = "runs-page-token"


@pytest.fixture(scope="module")
def viewer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str, str]]:
    """The real viewer on a loopback thread over a two-run store (a note written on the first
    run); yields its URL and the two run ids."""
    from pyattacker_plugins.serve.server import ViewerServer

    path = two_run_store(tmp_path_factory.mktemp("pages") / "a.db")
    store = open_store(path)
    try:
        first, second = (r.run_id for r in store.runs())
        store.write_note(first, f"baseline\n{XSS}", expected_revision=0, author="ann@lab", now=1.0)
    finally:
        store.close()
    server = ViewerServer(path, "127.0.0.1", 0, TOKEN, None, answer_ttl_s=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.url, first, second
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _get(url: str) -> tuple[int, Any]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_runs_endpoint_lists_every_run_with_notes(viewer: tuple[str, str, str]) -> None:
    url, first, second = viewer
    status, doc = _get(url + "runs")
    assert status == 200 and doc["latest"] == second
    runs = {r["run_id"]: r for r in doc["runs"]}
    assert list(runs) == [first, second]
    assert (runs[first]["notes"], runs[first]["notes_revision"]) == ("baseline", 1)
    assert runs[second]["label"] == XSS and runs[second]["pipelines"]["total"] == 14


def test_compare_endpoint_and_its_errors(viewer: tuple[str, str, str]) -> None:
    url, first, second = viewer
    status, doc = _get(f"{url}compare?a={first}&b={second}")
    assert status == 200 and doc["a"]["notes"] == f"baseline\n{XSS}"
    rows = {r["name"]: (r["a"], r["b"], r["delta"]) for r in doc["rows"]}
    assert rows["pipelines.total"] == (10, 14, 4)
    assert _get(f"{url}compare?a={first}")[0] == 400
    status, doc = _get(f"{url}compare?a={first}&b=nope")
    assert status == 404 and "no run 'nope'" in doc["error"]


def _cells(dom: str, table_id: str) -> list[list[str]]:
    match = re.search(rf'<table id="{table_id}">(.*?)</table>', dom, re.S)
    assert match, f"no table #{table_id}"
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", match.group(1), re.S)
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", r, re.S) for r in rows[1:]]
    return [[html.unescape(re.sub(r"<[^>]+>", "", c)) for c in row] for row in cells]


def test_runs_page_lists_the_runs_in_a_browser(viewer: tuple[str, str, str]) -> None:
    url, first, second = viewer
    dom = render(f"{url}runs.html?token={TOKEN}", budget_ms=2000)
    rows = _cells(dom, "runs")
    assert [row[2] for row in rows] == [first, second]
    assert rows[1][3] == XSS and rows[1][4] == "completed"  # the label, drawn as text
    assert rows[0][8] == "baseline (rev 1)" and rows[1][8] == "tried concurrency 2 (rev 1)"
    assert rows[1][7] == "14 (failed 2, succeeded 12)"
    assert "<script>alert" not in dom
    assert re.search(r'<span id="status"[^>]*></span>', dom)  # loaded: no error shown


def test_compare_page_shows_deltas_and_notes_as_text(viewer: tuple[str, str, str]) -> None:
    url, first, second = viewer
    dom = render(f"{url}compare.html?a={first}&b={second}&token={TOKEN}", budget_ms=2000)
    sides = _cells(dom, "sides")
    assert [row[1] for row in sides] == [first, second] and sides[1][2] == XSS
    numbers = {row[0]: row[1:] for row in _cells(dom, "numbers")}
    assert numbers["pipelines.total"] == ["10", "14", "+4"]
    assert numbers["retries"] == ["2", "2", "0"]
    assert "tasks.fetch.p95_ms" in numbers
    config = {row[0]: row[1:] for row in _cells(dom, "config")}
    assert config["concurrency"] == ["4", "2"]
    notes = [html.unescape(n) for n in re.findall(r'<pre class="note-text">(.*?)</pre>', dom, re.S)]
    assert notes == [f"baseline\n{XSS}", f"tried concurrency 2\n{XSS}"]
    assert "<script>alert" not in dom


def test_compare_page_says_what_is_wrong_with_a_missing_run(viewer: tuple[str, str, str]) -> None:
    url, first, _second = viewer
    dom = render(f"{url}compare.html?a={first}&b=nope&token={TOKEN}", budget_ms=2000)
    status = re.search(r'<span id="status"[^>]*>(.*?)</span>', dom, re.S)
    assert status and "error: store" in status.group(1) and "no run" in html.unescape(status.group(1))


def test_pages_are_served_with_the_dashboard_assets(viewer: tuple[str, str, str], tmp_path: Path) -> None:
    url, _first, _second = viewer
    for page in ("runs.html", "compare.html", "runs.js"):
        request = urllib.request.Request(url + page, headers={"Authorization": f"Bearer {TOKEN}"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert answer.status == 200
            assert "script-src 'self'" in answer.headers["Content-Security-Policy"]
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url + "runs.html", timeout=30)  # no token: 401
    assert refused.value.code == 401
