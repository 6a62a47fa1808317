"""The dashboard: a static HTML shell, a stylesheet and a script (no inline code, no CDN), kept
as real files in ``static/`` and read once, on first request.

The HTML holds no stored text at all; the script fetches the JSON endpoints and builds every
node with ``createElement``/``textContent`` (never ``innerHTML``), so an error message that
contains markup is shown as the characters it is. Time series and curves are drawn by the
vendored uPlot on canvases (``charts.js``); the utilisation bars are inline SVG built as above.
Hover text (a handoff's reason) goes through ``setAttribute("title", ...)``, which never parses
markup; nothing sets an inline style, so the server's CSP (``style-src 'self'``) holds.
"""

from __future__ import annotations

from functools import cache
from importlib.resources import files

__all__ = ["STATIC", "read_asset"]

#: URL path -> (content type, file under ``static/``)
STATIC: dict[str, tuple[str, str]] = {
    "/": ("text/html; charset=utf-8", "index.html"),
    "/app.js": ("text/javascript; charset=utf-8", "app.js"),
    "/app.css": ("text/css; charset=utf-8", "app.css"),
    "/runs.html": ("text/html; charset=utf-8", "runs.html"),
    "/compare.html": ("text/html; charset=utf-8", "compare.html"),
    "/runs.js": ("text/javascript; charset=utf-8", "runs.js"),
    "/charts.js": ("text/javascript; charset=utf-8", "charts.js"),
    # uPlot (MIT, static/vendor/uplot/LICENSE), vendored: the viewer loads nothing from elsewhere
    "/vendor/uplot/uPlot.iife.min.js": ("text/javascript; charset=utf-8", "vendor/uplot/uPlot.iife.min.js"),
    "/vendor/uplot/uPlot.min.css": ("text/css; charset=utf-8", "vendor/uplot/uPlot.min.css"),
    "/pipeline.html": ("text/html; charset=utf-8", "pipeline.html"),
    "/pipeline.js": ("text/javascript; charset=utf-8", "pipeline.js"),
}


@cache
def read_asset(name: str) -> bytes:
    """The bytes of ``static/<name>``, read from the installed package once."""
    return files(__package__).joinpath("static", *name.split("/")).read_bytes()
