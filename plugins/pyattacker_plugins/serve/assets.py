"""The dashboard: a static HTML shell, a stylesheet and a script (no inline code, no CDN), kept
as real files in ``static/`` and read once, on first request.

The HTML holds no stored text at all; the script fetches the JSON endpoints and builds every
node with ``createElement``/``textContent`` (never ``innerHTML``), so an error message that
contains markup is shown as the characters it is. Charts are inline SVG built the same way.
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
    "/pipeline.html": ("text/html; charset=utf-8", "pipeline.html"),
    "/pipeline.js": ("text/javascript; charset=utf-8", "pipeline.js"),
}


@cache
def read_asset(name: str) -> bytes:
    """The bytes of ``static/<name>``, read from the installed package once."""
    return files(__package__).joinpath("static", name).read_bytes()
