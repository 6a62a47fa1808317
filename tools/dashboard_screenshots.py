"""Regenerate the dashboard screenshots in docs/viewing.md (``docs/data/screenshots/*.png``).

Builds the 120-pipeline example store with the real runner (``tests.support.views.build_store``:
retries, failures with a markup message, metrics and curves), serves it on a loopback port with
the real viewer, and drives headless Chromium over its DevTools pipe
(``tests.support.browser.Session``; Debian's ``chromium`` package). Run from the checkout:

    .venv/bin/python tools/dashboard_screenshots.py [--out docs/data/screenshots]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.support.browser import Session  # noqa: E402
from tests.support.views import build_store  # noqa: E402

from pyattacker_plugins.serve.server import ViewerServer  # noqa: E402

PAINTED = "document.readyState === 'complete' && !document.body.hasAttribute('aria-busy')"
DRAWN = "document.querySelectorAll('#throughput canvas, #latency canvas').length === 2"


def _clip(page: Session, selectors: list[str]) -> dict[str, float]:
    """The page rectangle from the top of the first element to the bottom of the last."""
    first, last = (
        page.evaluate(
            f"(() => {{ const r = document.querySelector({s!r}).getBoundingClientRect();"
            " return [r.top + window.scrollY, r.bottom + window.scrollY]; })()"
        )
        for s in (selectors[0], selectors[-1])
    )
    width = page.evaluate("document.documentElement.scrollWidth")
    top = max(0.0, first[0] - 8)
    return {"x": 0, "y": top, "width": width, "height": last[1] + 8 - top, "scale": 1}


def _choose(page: Session, element_id: str, value: str) -> None:
    page.evaluate(
        f"(() => {{ const e = document.getElementById({element_id!r}); e.value = {value!r};"
        " e.dispatchEvent(new Event('change')); })()"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs" / "data" / "screenshots"))
    out = Path(parser.parse_args(argv).out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pyattacker-shots-") as tmp:
        store = build_store(Path(tmp) / "example.db", 120, concurrency=8)
        server = ViewerServer(store, "127.0.0.1", 0, "screenshots", None)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            with Session(width=1280, height=900) as page:
                page.goto(f"{server.url}?token=screenshots")
                page.wait(PAINTED, "the first paint")
                page.wait(DRAWN, "the charts")
                page.screenshot(str(out / "dashboard.png"), _clip(page, ["header", ".charts"]))
                _choose(page, "filter-state", "failed")
                _choose(page, "filter-sort", "duration")
                _choose(page, "filter-order", "desc")
                page.wait(
                    "document.getElementById('page-next').disabled &&"
                    " document.querySelectorAll('#pipelines tr').length === 18",
                    "the filtered table",
                )
                page.screenshot(str(out / "pipelines-filtered.png"), _clip(page, [".filters", ".pager"]))
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=10)
    for name in ("dashboard.png", "pipelines-filtered.png"):
        print(out / name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
