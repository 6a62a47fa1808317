"""The ``serve`` dashboard in a real browser: its script runs against the real server and store.

The HTTP tests (test_serve.py) check what the server sends; these check what a user sees once
the page's script has fetched and drawn it, under the server's own Content-Security-Policy.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import re
import sqlite3
import threading
from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest

from pyattacker import Handoff, Runner, pipeline, task
from tests.support.browser import render
from tests.support.views import XSS, build_handoff_store, serving

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
    # charts drawn by uPlot (their pixels: test_dashboard_charts.py)
    charts = dom[dom.index('id="throughput"') : dom.index('id="resources"')]
    assert charts.count("<canvas") == 2 and 'id="latency"' in charts


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
    from tests.support import browser

    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("PYATTACKER_TEST_CHROMIUM", raising=False)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="installs Debian's chromium"):
        browser.chromium()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception):
        browser.chromium()


# -- control flow (docs/handoffs.md): the handoffs card, each pipeline's route, handed_off tasks ---
class _Node:
    """An element of the page as the browser left it: tag, attributes, children."""

    def __init__(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tag = tag
        self.attrs = {k: v or "" for k, v in attrs}
        self.children: list[_Node | str] = []

    @property
    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text for c in self.children)

    @property
    def classes(self) -> set[str]:
        return set(self.attrs.get("class", "").split())

    def walk(self) -> Iterator[_Node]:
        yield self
        for child in self.children:
            if isinstance(child, _Node):
                yield from child.walk()

    def find(self, pred: Callable[[_Node], bool]) -> list[_Node]:
        return [n for n in self.walk() if pred(n)]

    def by_id(self, element_id: str) -> _Node:
        (found,) = self.find(lambda n: n.attrs.get("id") == element_id)
        return found


class _Tree(HTMLParser):
    """The serialised DOM parsed back into elements (attribute values and text unescaped)."""

    VOID = frozenset({"meta", "link", "input", "br", "img", "hr", "wbr", "source", "col", "area", "base"})

    def __init__(self, dom: str) -> None:
        super().__init__(convert_charrefs=True)
        self.root = _Node("#document", [])
        self._open = [self.root]
        self.feed(dom)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = _Node(tag, attrs)
        self._open[-1].children.append(node)
        if tag not in self.VOID:
            self._open.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._open[-1].children.append(_Node(tag, attrs))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self._open) - 1, 0, -1):
            if self._open[i].tag == tag:
                del self._open[i:]
                return

    def handle_data(self, data: str) -> None:
        self._open[-1].children.append(data)


def _page(dom: str) -> _Node:
    return _Tree(dom).root


def _table(page: _Node, table_id: str) -> tuple[list[str], list[list[_Node]]]:
    """The header texts and the body rows (cells as elements) of table ``table_id``."""
    rows = page.by_id(table_id).find(lambda n: n.tag == "tr")
    head = [th.text for th in rows[0].find(lambda n: n.tag == "th")] if rows else []
    return head, [[c for c in r.children if isinstance(c, _Node) and c.tag == "td"] for r in rows[1:]]


def _pipelines(page: _Node) -> dict[str, dict[str, _Node]]:
    """Each pipeline row of the table, by its key: cells by column header."""
    head, rows = _table(page, "pipelines")
    return {row[0].text: dict(zip(head, row, strict=True)) for row in rows}


def _task_states(page: _Node) -> dict[str, list[tuple[str, set[str]]]]:
    """The Tasks table: for each task name, its state counts as shown and the classes they wear."""
    _, rows = _table(page, "tasks")
    return {
        name.text: [
            (s.text, s.classes) for s in states.find(lambda n: n.tag == "span" and "states" not in n.classes)
        ]
        for name, states in rows
    }


def _cards_of(page: _Node) -> dict[str, str]:
    """The summary cards: value by label."""
    out = {}
    for c in page.by_id("cards").find(lambda n: "card" in n.classes):
        value, key = (n for n in c.children if isinstance(n, _Node))
        out[key.text] = value.text
    return out


def _hops(cell: _Node) -> list[tuple[str, set[str], str]]:
    """The parts of a route cell: text, classes and hover text of each hop (and of the count)."""
    return [
        (n.text, n.classes, n.attrs.get("title", ""))
        for n in cell.find(lambda n: n.tag == "span" and bool(n.classes & {"hop", "more"}))
    ]


@pytest.fixture(scope="module")
def handoff_page(tmp_path_factory: pytest.TempPathFactory) -> _Node:
    """The dashboard of a store whose pipelines jumped, restarted and jumped again
    (``build_handoff_store``), served as users start it, after two refreshes."""
    store = build_handoff_store(tmp_path_factory.mktemp("handoffs") / "h.db")
    with serving(store, TOKEN) as (_port, url):
        return _page(render(url, budget_ms=3000))


def test_dashboard_counts_the_jumps_and_draws_each_pipelines_route(handoff_page: _Node) -> None:
    """The `handoffs` card counts the latest run's jumps; each pipeline that jumped shows its
    route (`lookup → report`, `judge → end`, `restart`), the reason on hover."""
    page = handoff_page
    assert page.by_id("status").text == "status completed"
    cards = _cards_of(page)
    assert cards["handoffs"] == "11" and cards["pipelines"] == "7"
    rows = _pipelines(page)
    head, _ = _table(page, "pipelines")
    assert head == ["pipeline", "name", "state", "route", "tasks", "attempts", "duration", "metrics"]
    routes = {key: row["route"].text for key, row in rows.items()}
    assert routes == {
        "k0": "lookup → report",
        "k1": "lookup → end",
        "k2": "",  # ran every task: nothing drawn
        "k3": "judge → end",
        "k4": "lookup → report · restart · lookup → end",
        "hops": "+9 earlier · s4 → s6 · s6 → s8 · s8 → s10 · s10 → end",
        "kx": f"{XSS} → report",
    }
    (k0,) = _hops(rows["k0"]["route"])
    assert k0[1] == {"hop", "forward"}
    assert "forward: lookup (seq 1) → report (seq 4)" in k0[2] and "reason: cache hit" in k0[2]
    forward, restart, end = _hops(rows["k4"]["route"])
    assert restart[0] == "restart" and "restart" in restart[1]
    assert "restart from the seed at load" in restart[2] and "reason: fresh_restart" in restart[2]
    assert "reason: cache hit" in forward[2] and "forward: lookup (seq 1) → end" in end[2]
    assert "reason: out of scope" in end[2] and "run: run-" in end[2]
    more, *latest = _hops(rows["hops"]["route"])
    assert more[1] == {"more"} and len(latest) == 4
    # the nine hidden hops are listed on hover, oldest first
    assert more[2].splitlines() == [
        "s0 → s2",
        "s2 → s4",
        "s4 → s6",
        "s6 → s8",
        "s8 → s10",
        "s10 → end",
        "restart",
        "s0 → s2",
        "s2 → s4",
    ]
    assert {r["state"].text for r in rows.values()} == {"succeeded"}


def test_dashboard_shows_handed_off_task_states_like_the_others(handoff_page: _Node) -> None:
    """The Tasks table lists each task's states as `report` and `watch` do; `handed_off` wears
    its own class, which the stylesheet colours like the other states."""
    from pyattacker_plugins.serve.assets import read_asset

    app_css = read_asset("app.css").decode()

    states = _task_states(handoff_page)
    assert states["lookup"] == [("handed_off=3", {"handed_off"}), ("succeeded=2", {"succeeded"})]
    assert states["judge"] == [("handed_off=1", {"handed_off"}), ("succeeded=1", {"succeeded"})]
    assert states["s10"] == [("handed_off=1", {"handed_off"})]
    assert "s1" not in states  # skipped by every jump of the latest run
    assert all(f".{state} {{" in app_css for state in ("handed_off", "failed", "succeeded", "running"))


def test_dashboard_draws_a_markup_task_name_and_reason_as_text(handoff_page: _Node) -> None:
    """A task named ``XSS`` that hands off with reason ``XSS``: the route, its hover text and the
    Tasks table show the characters; the page holds no element the store's text made."""
    page = handoff_page
    route = _pipelines(page)["kx"]["route"]
    (hop,) = _hops(route)
    assert hop[0] == f"{XSS} → report"
    assert f"forward: {XSS} (seq 1) → report (seq 2)" in hop[2] and f"reason: {XSS}" in hop[2]
    assert _task_states(page)[XSS] == [("handed_off=1", {"handed_off"})]
    scripts = page.find(lambda n: n.tag == "script")
    # the page's own and the vendored chart library, nothing else
    own = ["/vendor/uplot/uPlot.iife.min.js", "/charts.js", "/app.js"]
    assert [s.attrs.get("src") for s in scripts] == own
    assert not route.find(lambda n: n.tag not in ("td", "span"))
    assert not page.find(lambda n: any(k.startswith("on") for k in n.attrs))


def _as_schema_2(source: str, target: Path) -> str:
    """A copy of ``source`` as a file written before the control ledger (schema 2) looks."""
    src, dst = sqlite3.connect(source), sqlite3.connect(target)
    try:
        src.backup(dst)
        dst.execute("DROP TABLE handoffs")
        dst.execute("UPDATE store_meta SET value = '2' WHERE key = 'schema_version'")
        dst.execute("PRAGMA user_version = 2")
        dst.commit()
    finally:
        src.close()
        dst.close()
    return str(target)


@pytest.mark.parametrize("schema", [3, 2])
def test_a_store_without_handoffs_draws_no_control_flow(view_store: str, tmp_path: Path, schema: int) -> None:
    """A run that never jumped, and a file of schema 2 (no ledger table): no `handoffs` card, no
    route column, no `handed_off`; the page draws the run as before."""
    store = view_store if schema == 3 else _as_schema_2(view_store, tmp_path / "v2.db")
    with serving(store, TOKEN) as (_port, url):
        page = _page(render(url, budget_ms=3000))
    assert page.by_id("status").text == "status completed"  # an error would be shown here
    cards = _cards_of(page)
    assert "handoffs" not in cards and cards["pipelines"] == "20"
    head, rows = _table(page, "pipelines")
    assert head == ["pipeline", "name", "state", "tasks", "attempts", "duration", "metrics"]
    assert len(rows) == 20
    assert not page.find(lambda n: bool(n.classes & {"route", "hop", "more", "handed_off"}))
    states = _task_states(page)
    assert set(states) == {"fetch", "judge"}
    assert states["judge"] == [("failed=2", {"failed"}), ("succeeded=18", {"succeeded"})]


@contextlib.contextmanager
def _viewer(store: str) -> Iterator[str]:
    """The real viewer server on a loopback thread, every request read afresh; yields its URL."""
    from pyattacker_plugins.serve.server import ViewerServer

    server = ViewerServer(store, "127.0.0.1", 0, TOKEN, None, answer_ttl_s=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"{server.url}?token={TOKEN}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_dashboard_without_ledger_fields_draws_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Answers without `handoffs` and `handoffs_total` (a server that does not send them): the
    page leaves the control flow out and draws everything else."""
    from pyattacker_plugins.serve.api import Api

    store = build_handoff_store(tmp_path / "h.db")
    real_stats, real_pipelines = Api.stats, Api.pipelines

    def stats(self: Api, *args: Any) -> dict[str, Any]:
        snap = real_stats(self, *args)
        del snap["handoffs_total"]
        return snap

    def pipelines(self: Api, *args: Any) -> dict[str, Any]:
        body = real_pipelines(self, *args)
        for row in body["rows"]:
            del row["handoffs"]
        return body

    monkeypatch.setattr(Api, "stats", stats)
    monkeypatch.setattr(Api, "pipelines", pipelines)
    with _viewer(store) as url:
        page = _page(render(url, budget_ms=500))
    assert page.by_id("status").text == "status completed"
    assert "handoffs" not in _cards_of(page)
    head, rows = _table(page, "pipelines")
    assert "route" not in head and len(rows) == 7
    assert not page.find(lambda n: bool(n.classes & {"route", "hop"}))


# a run the test holds at its first task, then lets jump: the page is open meanwhile
LIVE: dict[str, threading.Event] = {}


@task("wait")
async def live_wait(seed: dict[str, int]) -> Any:
    LIVE["waiting"].set()
    await asyncio.to_thread(LIVE["go"].wait, 60)
    return Handoff.to("report", {"i": seed["i"]}, reason="cache hit")


@task("work")
def live_work(x: Any) -> Any:
    return x


@task("report")
def live_report(x: Any) -> Any:
    return x


LIVE_QA = pipeline("live", live_wait, live_work, live_report, control={"edges": {"wait": ["report"]}})


def test_dashboard_draws_a_jump_on_the_next_poll_while_the_run_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page is open on a running run whose pipeline has not jumped yet; the jump is
    committed between two of its polls: the next poll draws the card, the route and the
    `handed_off` task, as it redraws every other field."""
    from pyattacker_plugins.serve.api import Api

    LIVE.update(waiting=threading.Event(), go=threading.Event())
    path = str(tmp_path / "live.db")
    outcome: dict[str, Any] = {}

    def run() -> None:
        with Runner(store=path, handle_signals=False) as runner:
            outcome["report"] = runner.run(LIVE_QA.map([{"i": 0}], key_of=lambda s: "k0"))

    writer = threading.Thread(target=run, name="live-run")
    writer.start()
    try:
        assert LIVE["waiting"].wait(60), "the run never reached its first task"
        real_call = Api.call
        armed = threading.Event()
        polls = {"stats": 0}

        def call(self: Api, path: str, params: dict[str, str]) -> Any:
            if path == "/stats" and armed.is_set():
                polls["stats"] += 1
                if polls["stats"] == 2:  # the second poll of the page opened once armed
                    LIVE["go"].set()  # the task jumps, the run finishes, then the poll reads
                    writer.join(60)
            return real_call(self, path, params)

        monkeypatch.setattr(Api, "call", call)
        with _viewer(path) as url:
            before = _page(render(url, budget_ms=500))  # one poll
            armed.set()
            after = _page(render(url, budget_ms=3000))  # two polls: the jump lands between them
        assert polls["stats"] >= 2
        assert before.by_id("status").text == "status running"
        assert "handoffs" not in _cards_of(before) and "route" not in _table(before, "pipelines")[0]
        assert after.by_id("status").text == "status completed"
        assert _cards_of(after)["handoffs"] == "1"
        assert _pipelines(after)["k0"]["route"].text == "wait → report"
        assert _task_states(after)["wait"] == [("handed_off=1", {"handed_off"})]
        assert outcome["report"].counters["handoffs"] == 1
    finally:
        LIVE["go"].set()
        writer.join(60)


@task
def _ask(x: Any, ctx: Any) -> Any:
    return {"try": ctx.visit}


@task
def _judge(a: Any, ctx: Any) -> Any:
    if ctx.visit < 2:
        return Handoff.rewind("ask", {"feedback": ctx.visit}, reason="too vague")
    return a


def test_dashboard_route_shows_rewinds_with_their_visits(tmp_path: Path) -> None:
    """A judge loop's route: each rewind with the visit it left and the one it entered."""
    store = str(tmp_path / "loop.db")
    loop = pipeline(
        "loop",
        _ask.with_overrides(name="ask"),
        _judge.with_overrides(name="judge"),
        control={"rewind": {"judge": ["ask"]}, "max_handoffs": 3},
    )
    with Runner(store=store, handle_signals=False) as runner:
        assert runner.run(loop.map_keyed([("k0", 0)])).succeeded == 1
    with serving(store, TOKEN) as (_port, url):
        page = _page(render(url, budget_ms=3000))
    rows = _pipelines(page)
    assert rows["k0"]["route"].text == "judge#0 ↺ ask#1 · judge#1 ↺ ask#2"
    first, second = _hops(rows["k0"]["route"])
    assert first[1] == {"hop", "backward"}
    assert "rewind: judge (seq 1) → ask (seq 0)" in first[2] and "visits: left 0, entered 1" in first[2]
    assert "reason: too vague" in second[2]
