"""The dashboard driven in headless Chromium as a person uses it (``tests.support.browser.Session``):
charts drawn on their canvases, the pipelines table filtered, sorted and paged, numbers
humanised, the loading state of the first paint, and stored text shown as text."""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.browser import Session, chromium
from tests.support.views import XSS, build_handoff_store, build_store

TOKEN = "charts-test-token"
#: the page has drawn once (the first refresh answered, or failed)
PAINTED = "document.readyState === 'complete' && !document.body.hasAttribute('aria-busy')"
#: pixels of a chart's canvas drawn in its first series' colour (#1f77b4)
SERIES_PIXELS = """(() => {
  const c = document.querySelector('#%s canvas');
  if (!c) return -1;
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  let n = 0;
  for (let i = 0; i < d.length; i += 4) {
    const near = Math.abs(d[i] - 31) + Math.abs(d[i + 1] - 119) + Math.abs(d[i + 2] - 180) < 90;
    if (near && d[i + 3] > 100) n++;
  }
  return n;
})()"""
ROWS = "Array.from(document.querySelectorAll('#pipelines tr')).slice(1).map(r => r.cells[0].textContent)"


@pytest.fixture(scope="module")
def many(tmp_path_factory: pytest.TempPathFactory) -> str:
    """120 pipelines: three pages of the table (50 a page)."""
    return build_store(tmp_path_factory.mktemp("many") / "many.db", 120, concurrency=8)


@contextlib.contextmanager
def _viewer(store: str) -> Iterator[str]:
    from pyattacker_plugins.serve.server import ViewerServer

    server = ViewerServer(store, "127.0.0.1", 0, TOKEN, None)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"{server.url}?token={TOKEN}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture()
def page() -> Iterator[Session]:
    chromium()  # skipped without a browser (a failure in CI)
    with Session() as session:
        yield session


@contextlib.contextmanager
def _open(page: Session, store: str) -> Iterator[None]:
    """The real viewer on a loopback thread, open in ``page`` once it has drawn."""
    with _viewer(store) as url:
        page.goto(url)
        page.wait(PAINTED, "the first paint")
        yield


def _set(page: Session, element_id: str, value: str) -> None:
    """Choose ``value`` in a filter as a person does (the change event included)."""
    page.evaluate(
        f"(() => {{ const e = document.getElementById({element_id!r}); e.value = {json.dumps(value)};"
        " e.dispatchEvent(new Event('change')); })()"
    )


def test_charts_are_drawn_with_time_on_the_x_axis(page: Session, view_store: str) -> None:
    """Throughput and latency are uPlot charts whose lines have pixels; their x scale is time
    over the run; the curves figure shows the run's `loss` curve (it records some)."""
    with _open(page, view_store):
        assert page.wait(SERIES_PIXELS % "throughput", "the throughput line") > 0
        assert page.wait(SERIES_PIXELS % "latency", "the latency line") > 0
        assert page.evaluate("document.getElementById('throughput').pyaChart.scales.x.time") is True
        xs = page.evaluate("document.getElementById('throughput').pyaChart.data[0]")
        assert len(xs) > 10 and xs == sorted(xs)  # a short run still gets many buckets
        assert page.evaluate("document.getElementById('curves-figure').hidden") is False
        assert page.wait(SERIES_PIXELS % "curves", "the loss curve") > 0
        assert page.evaluate("document.getElementById('curve-scope').textContent") == "pipeline k0"


def test_no_curves_box_for_a_run_that_records_none(page: Session, tmp_path: Path) -> None:
    """A run without metric points shows no curves figure at all (no "no data yet" box)."""
    store = build_handoff_store(tmp_path / "h.db")
    with _open(page, store):
        assert page.evaluate("document.getElementById('curves-figure').hidden") is True
        assert page.evaluate("document.querySelectorAll('#curves canvas').length") == 0


def test_numbers_are_humanised(page: Session, view_store: str) -> None:
    """Durations read as people say them, counts with separators; the cards use them."""
    with _open(page, view_store):
        said = page.evaluate(
            "[PyaCharts.ms(62449.382), PyaCharts.ms(840.2), PyaCharts.ms(0.0724), PyaCharts.ms(750000),"
            " PyaCharts.count(1234567), PyaCharts.number(0.73312), PyaCharts.percent(0.25),"
            " PyaCharts.seconds(0.004)]"
        )
        assert said == ["62.4 s", "840 ms", "0.0724 ms", "12m 30s", "1,234,567", "0.733", "25 %", "4 ms"]
        cards = page.evaluate(
            "Object.fromEntries(Array.from(document.querySelectorAll('#cards .card'))"
            ".map(c => [c.querySelector('.k').textContent, c.querySelector('.v').textContent]))"
        )
        assert cards["p95 latency"].endswith((" ms", " s")) and "." not in cards["pipelines"]
        durations = page.evaluate(
            "Array.from(document.querySelectorAll('#pipelines tr')).slice(1).map(r => r.cells[5].textContent)"
        )
        assert durations and all(d.endswith((" ms", " s")) for d in durations)


def test_first_paint_shows_loading_then_the_run(page: Session, view_store: str) -> None:
    """Before the first answers the page says it is loading (not empty bodies); once drawn,
    no loading mark is left."""
    from pyattacker_plugins.serve.assets import read_asset

    shell = read_asset("index.html").decode()
    for element_id in ("cards", "throughput", "latency", "resources", "errors", "tasks", "pipelines"):
        start = shell.index(f'id="{element_id}"')
        assert 'class="loading"' in shell[start : shell.index("</", start)], element_id
    assert '<body aria-busy="true">' in shell
    with _open(page, view_store):
        assert page.evaluate("document.querySelectorAll('.loading').length") == 0
        assert page.evaluate("document.getElementById('status').textContent") == "status completed"


def test_filters_sort_and_pages(page: Session, many: str) -> None:
    """Three pages of 50, 50 and 20 with next/previous; a state filter, a text filter and a
    descending key sort redraw the table from its first page."""
    with _open(page, many):
        first = page.wait(f"(() => {{ const r = {ROWS}; return r.length === 50 && r; }})()")
        assert page.evaluate("document.getElementById('page-prev').disabled") is True
        page.evaluate("document.getElementById('page-next').click()")
        second = page.wait(f"(() => {{ const r = {ROWS}; return r[0] !== {first[0]!r} && r; }})()")
        page.evaluate("document.getElementById('page-next').click()")
        third = page.wait(f"(() => {{ const r = {ROWS}; return r.length === 20 && r; }})()")
        assert len(second) == 50 and len(set(first + second + third)) == 120
        assert page.evaluate("document.getElementById('page-next').disabled") is True
        assert page.evaluate("document.getElementById('page-number').textContent") == "page 3"
        page.evaluate("document.getElementById('page-prev').click()")
        assert page.wait(f"(() => {{ const r = {ROWS}; return r[0] === {second[0]!r} && r; }})()") == second

        _set(page, "filter-state", "failed")
        failed = page.wait(f"(() => {{ const r = {ROWS}; return r.length < 50 && r; }})()")
        states = page.evaluate(
            "Array.from(document.querySelectorAll('#pipelines tr')).slice(1).map(r => r.cells[2].textContent)"
        )
        assert set(states) == {"failed"} and len(failed) == 17  # every 7th of i + 1 in 1..120
        assert page.evaluate("document.getElementById('page-number').textContent") == "page 1"
        _set(page, "filter-state", "")
        _set(page, "filter-q", "K11")
        found = page.wait(f"(() => {{ const r = {ROWS}; return r.length === 11 && r; }})()")
        assert set(found) == {"k11", *(f"k11{i}" for i in range(10))}
        _set(page, "filter-q", "")
        _set(page, "filter-sort", "key")
        _set(page, "filter-order", "desc")
        ordered = page.wait(f"(() => {{ const r = {ROWS}; return r[0] === 'k99' && r; }})()")
        assert ordered == sorted(ordered, reverse=True)
        href = page.evaluate("document.querySelector('#pipelines tr:nth-child(2) a').getAttribute('href')")
        assert href.startswith("/pipeline.html?pipeline_id=")  # the pipeline page (drill-down)


def test_store_text_in_filters_and_charts_stays_text(page: Session, tmp_path: Path) -> None:
    """A task named with markup is offered in the task filter as its characters; filtering by
    markup text matches nothing and makes no element; the page runs only its own scripts."""
    store = build_handoff_store(tmp_path / "x.db")
    with _open(page, store):
        options = page.wait(
            "(() => { const o = Array.from(document.querySelectorAll('#filter-task option'))"
            ".map(o => o.textContent); return o.length > 1 && o; })()"
        )
        assert XSS in options
        _set(page, "filter-task", XSS)
        page.wait("document.querySelector('#pipelines td.empty') !== null", "the empty filtered table")
        _set(page, "filter-task", "")
        _set(page, "filter-q", XSS)
        page.wait("document.querySelector('#pipelines td.empty') !== null", "no match for markup")
        scripts = page.evaluate("Array.from(document.scripts).map(s => s.getAttribute('src'))")
        assert scripts == ["/vendor/uplot/uPlot.iife.min.js", "/charts.js", "/app.js"]
        assert (
            page.evaluate("document.querySelectorAll('script:not([src]), [onerror], [onload]').length") == 0
        )
