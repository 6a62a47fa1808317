"""The ``serve`` dashboard in a real browser: its script runs against the real server and store.

The HTTP tests (test_serve.py) check what the server sends; these check what a user sees once
the page's script has fetched and drawn it, under the server's own Content-Security-Policy.
"""

from __future__ import annotations

import html
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _view_fixtures import XSS, serving
from browser import render

TOKEN = "browser-test-token"
_CARD = re.compile(r'<div class="card"><div class="v">([^<]*)</div><div class="k">([^<]*)</div></div>')


def _inner(dom: str, element_id: str) -> str:
    """The serialised children of the element with ``element_id`` (no nested same-tag)."""
    match = re.search(rf'<(\w+) id="{element_id}"[^>]*>(.*?)</\1>', dom, re.S)
    assert match, f"no #{element_id} in the page"
    return match.group(2)


def _text_of(dom: str, element_id: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", _inner(dom, element_id)))


def _cards(dom: str) -> dict[str, str]:
    section = re.search(r'<section id="cards" class="cards">(.*?)</section>', dom, re.S)
    assert section, "no cards"
    return {html.unescape(k): html.unescape(v) for v, k in _CARD.findall(section.group(1))}


def _rows(dom: str, table_id: str) -> list[list[str]]:
    match = re.search(rf'<table id="{table_id}">(.*?)</table>', dom, re.S)
    assert match, f"no table #{table_id}"
    rows = re.findall(r"<tr>(.*?)</tr>", match.group(1), re.S)
    return [[html.unescape(c) for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)] for r in rows[1:]]


@pytest.fixture(scope="module")
def served(view_store: str) -> Iterator[str]:
    """``pyattacker serve`` as users start it; yields the URL it printed (with the token)."""
    with serving(view_store, TOKEN) as (_port, url):
        yield url


def test_dashboard_draws_the_run_in_a_browser(served: str) -> None:
    """Cards, tables and the run line after two refreshes (page time 3 s, a refresh every 2 s);
    the failed pipelines' markup message is shown as text, never run as markup."""
    dom = render(served, budget_ms=3000)
    assert _text_of(dom, "status") == "status completed"  # an error would be shown here instead
    run_line = _text_of(dom, "run")
    # the second refresh asks for the run by id: it is still the one chosen as the latest
    assert re.fullmatch(r"run run-\S+ \(latest\)", run_line), run_line
    assert _text_of(dom, "age") == ""  # a small run's counts are read at every refresh
    cards = _cards(dom)
    assert {k: cards[k] for k in ("pipelines", "succeeded", "failed", "in flight")} == {
        "pipelines": "20",
        "succeeded": "18",
        "failed": "2",
        "in flight": "0",
    }
    errors = _rows(dom, "errors")
    assert len(errors) == 2 and all(row[3] == XSS for row in errors)
    assert "<script>alert" not in dom  # the message stayed text
    pipelines = _rows(dom, "pipelines")
    assert len(pipelines) == 20 and {row[2] for row in pipelines} == {"succeeded", "failed"}
    assert "<polyline" in _inner(dom, "throughput") and "<rect" in _inner(dom, "latency")  # charts drawn


@pytest.fixture()
def in_process(view_store: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, dict[str, Any]]]:
    """The real viewer server on a thread, with ``/stats`` saying how old its counts are."""
    from pyattacker_plugins.serve.api import Api
    from pyattacker_plugins.serve.server import ViewerServer

    age: dict[str, Any] = {"s": 0.0}
    real = Api.stats

    def aged(self: Api, *args: Any) -> dict[str, Any]:
        snap = real(self, *args)
        snap["stats_age_s"] = age["s"]
        if "eta_s" in age:  # a live run that knows its size (the stored run has finished)
            snap["eta_s"] = age["eta_s"]
        return snap

    monkeypatch.setattr(Api, "stats", aged)
    # every /stats reads again: the test changes the age between two page loads within a second,
    # which the shared answers (serve/shared_answers.py) would otherwise reuse
    server = ViewerServer(view_store, "127.0.0.1", 0, TOKEN, None, answer_ttl_s=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"{server.url}?token={TOKEN}", age
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_dashboard_says_how_old_the_counts_are(in_process: tuple[str, dict[str, Any]]) -> None:
    """A large run's counts are re-read less often than the page refreshes: like `watch`, the
    page says so once they are 2 s old or more, and says nothing while they are fresh."""
    url, age = in_process
    age["s"] = 12.4
    dom = render(url, budget_ms=500)
    assert _text_of(dom, "age") == "(counts 12 s old)"
    assert _cards(dom)["pipelines"] == "20"
    age["s"] = 1.2
    assert _text_of(render(url, budget_ms=500), "age") == ""


def test_dashboard_shows_how_long_is_left_only_when_it_is_known(
    in_process: tuple[str, dict[str, Any]],
) -> None:
    """The `eta` card reads `/stats`' `eta_s` as `watch` prints it; a finished run (null) has none."""
    url, age = in_process
    assert "eta" not in _cards(render(url, budget_ms=500))
    age["eta_s"] = 750.0
    assert _cards(render(url, budget_ms=500))["eta"] == "12m 30s"
    age["eta_s"] = 3720.4
    assert _cards(render(url, budget_ms=500))["eta"] == "1h 02m"


def test_browser_helper_finds_no_chromium_outside_ci(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Without Chromium the browser tests are skipped locally and fail in CI."""
    import browser

    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("PYATTACKER_TEST_CHROMIUM", raising=False)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="installs Debian's chromium"):
        browser.chromium()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception):
        browser.chromium()
