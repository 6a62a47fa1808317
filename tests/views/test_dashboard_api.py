"""The dashboard's JSON: ``/pipelines`` filters, order and keyset pages, ``/timeline``'s time
buckets, and the vendored chart library served like the page's own files (real SQLite stores)."""

from __future__ import annotations

import http.client
import json
from pathlib import Path
from typing import Any

import pytest

from pyattacker.views.common import open_view
from pyattacker_plugins.serve.api import Api, ApiError
from pyattacker_plugins.serve.dashboard_api import MAX_BUCKETS, WIDTHS, bucket_width
from tests.support.views import serving


@pytest.fixture(scope="module")
def api(view_store: str) -> Api:
    return Api(view_store, answer_ttl_s=0)


def _keys(api: Api, **params: Any) -> list[str]:
    body = api.call("/pipelines", {"limit": "1000", **{k: str(v) for k, v in params.items()}})
    assert body["next"] is None
    return [row["key"] for row in body["rows"]]


def test_pipelines_filter_by_state_task_error_class_and_text(api: Api) -> None:
    """Each filter keeps what it names; together they all hold."""
    assert sorted(_keys(api, state="failed")) == ["k13", "k6"]  # judge raises ValueError at 7 * n - 1
    assert sorted(_keys(api, task="judge")) == ["k13", "k6"]
    assert _keys(api, task="fetch") == []
    assert sorted(_keys(api, error_class="ValueError")) == ["k13", "k6"]
    assert sorted(_keys(api, error_class="invalid")) == ["k13", "k6"]  # the retry class too
    assert sorted(_keys(api, q="K1")) == ["k1", *(f"k1{i}" for i in range(10))]  # case-insensitive
    assert _keys(api, q="<script>alert") == ["k6", "k13"]  # in the error message, as text
    assert _keys(api, q="k1", state="failed", error_class="ValueError") == ["k13"]
    assert _keys(api, q="nothing like it") == []


@pytest.mark.parametrize("sort", ["created", "finished", "duration", "attempts", "key"])
@pytest.mark.parametrize("order", ["asc", "desc"])
def test_pipelines_pages_by_keyset_in_every_order(api: Api, sort: str, order: str) -> None:
    """Pages of 3 followed by their ``next`` cursor visit every pipeline once, in the order a
    single page gives, and that order is the one asked for."""
    whole = api.call("/pipelines", {"limit": "1000", "sort": sort, "order": order})["rows"]
    seen: list[str] = []
    params = {"limit": "3", "sort": sort, "order": order}
    while True:
        body = api.call("/pipelines", params)
        seen += [r["pipeline_id"] for r in body["rows"]]
        if body["next"] is None:
            break
        params["after"] = body["next"]
    assert seen == [r["pipeline_id"] for r in whole] and len(seen) == 20

    def value(r: dict[str, Any]) -> Any:
        if sort == "duration":
            return r["finished_at"] - r["started_at"]
        return {"created": r["created_at"], "finished": r["finished_at"], "key": r["key"]}.get(
            sort, r["attempts_total"]
        )

    values = [value(r) for r in whole]
    assert values == sorted(values, reverse=order == "desc")


@pytest.mark.parametrize(
    ("params", "named"),
    [
        ({"sort": "bogus"}, "'sort'"),
        ({"order": "up"}, "'order'"),
        ({"state": "done"}, "'state'"),
        ({"q": "x" * 201}, "'q'"),
        ({"task": "t" * 201}, "'task'"),
        ({"limit": "many"}, "limit"),
        ({"sort": "key", "after": "WzEuMCwiYSJd"}, "'after'"),  # [1.0, "a"]: a number for a text sort
        ({"after": "WyJhIiwiYiJd"}, "'after'"),  # ["a", "b"]: text for a time
    ],
)
def test_bad_pipeline_parameters_are_400_naming_them(api: Api, params: dict[str, str], named: str) -> None:
    with pytest.raises(ApiError) as caught:
        api.call("/pipelines", params)
    assert caught.value.status == 400 and named in caught.value.body["error"]


def test_timeline_buckets_the_whole_run(api: Api, view_store: str) -> None:
    """Every attempt is in one bucket; the buckets cover the run from its start to its end at a
    width that gives at most MAX_BUCKETS of them; counts and percentiles match the attempts."""
    body = api.call("/timeline", {})
    with open_view(view_store) as store:
        (run,) = store.runs()
        attempts = list(store.page("attempts", run_id=run.run_id, limit=10_000))
    buckets = body["buckets"]
    assert body["start"] == run.started_at and body["end"] == run.ended_at
    assert body["width_s"] == bucket_width(run.ended_at - run.started_at)
    assert len(buckets) <= MAX_BUCKETS + 1 and buckets[0]["t"] == run.started_at
    assert sum(b["attempts"] for b in buckets) == len(attempts) == 44
    assert sum(b["failed"] for b in buckets) == sum(a.outcome != "succeeded" for a in attempts)
    full = [b for b in buckets if b["attempts"]]
    assert all(b["p50_ms"] <= b["p95_ms"] <= b["p99_ms"] <= b["max_ms"] for b in full)
    assert max(b["max_ms"] for b in full) == max(a.duration_ms for a in attempts)
    assert all(b["p50_ms"] is None and b["per_s"] == 0 for b in buckets if not b["attempts"])
    for b in full:
        assert b["per_s"] == pytest.approx(b["attempts"] / body["width_s"])
        assert b["error_rate"] == b["failed"] / b["attempts"]


def test_bucket_width_fits_short_and_long_runs() -> None:
    """Half a second and a day both get many buckets, never more than MAX_BUCKETS."""
    for span in (0.05, 0.5, 7.0, 3600.0, 86400.0):
        width = bucket_width(span)
        assert width in WIDTHS and span / width <= MAX_BUCKETS
        assert span / width > MAX_BUCKETS / 3  # (the next width down would not fit)


def test_timeline_of_a_store_without_runs() -> None:
    """No run yet: no buckets, no error."""
    from pyattacker.views.common import RunChoice
    from pyattacker_plugins.serve.dashboard_api import timeline
    from pyattacker_plugins.store_memory import MemoryStore

    body = timeline(MemoryStore(), RunChoice(run_id=None, how="empty"))
    assert body["buckets"] == [] and body["width_s"] is None


def test_the_vendored_chart_library_is_served_under_the_csp(view_store: str) -> None:
    """uPlot's files come from the viewer itself (no CDN), behind the same auth and headers;
    the 400 of a bad filter names the parameter over HTTP too."""
    with serving(view_store, "tok") as (port, _url):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        headers = {"Host": f"127.0.0.1:{port}", "Authorization": "Bearer tok"}
        try:
            for path, kind in (
                ("/vendor/uplot/uPlot.iife.min.js", "text/javascript"),
                ("/vendor/uplot/uPlot.min.css", "text/css"),
                ("/charts.js", "text/javascript"),
            ):
                conn.request("GET", path, headers=headers)
                resp = conn.getresponse()
                body = resp.read()
                assert resp.status == 200 and resp.getheader("Content-Type", "").startswith(kind), path
                assert "script-src 'self'" in resp.getheader("Content-Security-Policy", "")
                assert len(body) > 1000
            conn.request("GET", "/pipelines?sort=size", headers=headers)
            resp = conn.getresponse()
            assert resp.status == 400 and "'sort'" in json.loads(resp.read())["error"]
            conn.request("GET", "/vendor/uplot/uPlot.iife.min.js", headers={"Host": f"127.0.0.1:{port}"})
            resp = conn.getresponse()
            resp.read()
            assert resp.status == 401
        finally:
            conn.close()
    licence = Path(__file__).parents[2] / "plugins/pyattacker_plugins/serve/static/vendor/uplot/LICENSE"
    assert "MIT License" in licence.read_text()


def test_the_screenshots_of_the_docs_are_committed() -> None:
    """docs/viewing.md shows PNGs that tools/dashboard_screenshots.py writes, and they exist."""
    import re

    docs = Path(__file__).parents[2] / "docs"
    shown = re.findall(r"\]\((data/screenshots/[^)]+\.png)\)", (docs / "viewing.md").read_text())
    assert sorted(shown) == ["data/screenshots/dashboard.png", "data/screenshots/pipelines-filtered.png"]
    tool = (Path(__file__).parents[2] / "tools" / "dashboard_screenshots.py").read_text()
    for name in shown:
        assert (docs / name).read_bytes().startswith(b"\x89PNG\r\n\x1a\n") and Path(name).name in tool


def test_percentiles_of_a_large_run_come_from_a_sample_sqlite_agrees(
    view_store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past PERCENTILE_SAMPLE attempts the percentiles are those of one attempt in ``step`` (by
    id), counts and maxima still of every attempt; SQLite answers what the default answers."""
    from pyattacker.plugins import store_queries
    from pyattacker.plugins.store_base import StoreBase

    monkeypatch.setattr(store_queries, "PERCENTILE_SAMPLE", 5)  # 44 attempts: one in 9
    with open_view(view_store) as store:
        (run,) = store.runs()
        own = store.attempt_timeline(run.run_id, run.started_at, 0.01)
        assert own == StoreBase.attempt_timeline(store, run.run_id, run.started_at, 0.01)
        assert type(store).attempt_timeline is not StoreBase.attempt_timeline
        sampled = [a for a in store.page("attempts", limit=1000) if (a.attempt_id or 0) % 9 == 0]
    assert sum(b.attempts for b in own) == 44
    assert sum(b.p50_ms is not None for b in own) == len(
        {int((a.ended_at - run.started_at) / 0.01) for a in sampled}
    )
    body = Api(view_store, answer_ttl_s=0).call("/timeline", {})
    assert body["percentiles_of_one_in"] == 9
