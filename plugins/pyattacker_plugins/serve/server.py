"""The viewer's HTTP server: stdlib ``ThreadingHTTPServer``, GET and HEAD only, every answer hardened.

Each connection gets a handler thread, at most ``MAX_CONNECTIONS`` at a time: a connection over
the cap is answered 503 from the accept loop and closed. Order of checks for each request:
query length (414), Host and Origin allow-lists (403), method (405) and body (413),
``/healthz`` (no auth), token exchange (303 + cookie), then authentication (401). Every
response, errors included, carries the security headers. HEAD runs exactly the GET path
(checks, auth, the body built for its Content-Length) and sends no body.
"""

from __future__ import annotations

import contextlib
import io
import json
import secrets
import signal
import socket
import sys
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import IO, Any
from urllib.parse import parse_qsl, urlsplit

from pyattacker import ConfigError
from pyattacker.views.common import read_only_store
from pyattacker.views.suite import suite_catalog

from .api import Api, ApiError
from .assets import STATIC, read_asset
from .drilldown import SSE_HOLD_S, log_stream
from .security import MAX_QUERY_BYTES, SECURITY_HEADERS, Guard
from .shared_answers import ANSWER_TTL_S

__all__ = [
    "IDLE_TIMEOUT_S",
    "MAX_CONNECTIONS",
    "REQUEST_DEADLINE_S",
    "DeadlineReader",
    "ViewerServer",
    "run_server",
    "url_host",
]

IDLE_TIMEOUT_S = 30.0
#: seconds a whole request (request line and headers) may take to arrive, however it trickles in
REQUEST_DEADLINE_S = 30.0
#: handler threads (open connections) at most; one more connection is answered 503 and closed
MAX_CONNECTIONS = 64

_PROM_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: values of ``/metrics?format=`` ("" = by the Accept header)
_FORMATS = ("", "json", "prometheus")
#: the methods the viewer answers (the ``Allow`` header of every 405)
_ALLOW = "GET, HEAD"
#: task logs as Server-Sent Events (answered by the handler itself: a response that streams)
STREAM_PATH = "/logs/stream"


class ViewerServer(ThreadingHTTPServer):
    """Threading server holding the API and the guard its handlers use.

    Each connection holds a thread until it ends or idles out (``IDLE_TIMEOUT_S``), so the
    threads are capped at ``max_connections``: a local client that opens connections and never
    closes them cannot make the process start threads without end.
    """

    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self,
        location: str,
        host: str,
        port: int,
        token: str,
        run_id: str | None,
        *,
        max_connections: int = MAX_CONNECTIONS,
        answer_ttl_s: float = ANSWER_TTL_S,
        request_deadline_s: float = REQUEST_DEADLINE_S,
        sse_hold_s: float = SSE_HOLD_S,
        experiments: tuple[str, ...] = (),
    ) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, not {max_connections}")
        self.max_connections = max_connections
        self.request_deadline_s = request_deadline_s
        #: how long one ``/logs/stream`` response stays open before the browser reconnects
        self.sse_hold_s = sse_hold_s
        self._busy = _busy_answer(max_connections)
        self._active = 0
        self._slots_lock = threading.Lock()
        self.address_family = socket.AF_INET6 if ":" in host else socket.AF_INET
        try:
            super().__init__((host.strip("[]"), port), _Handler)
        except OSError as exc:
            raise ConfigError(f"serve: cannot bind {host}:{port}: {exc}") from exc
        self.api = Api(location, run_id, answer_ttl_s=answer_ttl_s, experiments=experiments)
        self.bound_port = int(self.server_address[1])
        self.guard = Guard(token, host.strip("[]"), self.bound_port)
        self.url = f"http://{url_host(host)}:{self.bound_port}/"

    @property
    def active_connections(self) -> int:
        """Connections that hold a handler thread right now."""
        return self._active

    def _take_slot(self) -> bool:
        with self._slots_lock:
            if self._active >= self.max_connections:
                return False
            self._active += 1
            return True

    def _free_slot(self) -> None:
        with self._slots_lock:
            self._active -= 1

    def process_request(self, request: Any, client_address: Any) -> None:
        """Runs on the accept loop: a free slot starts a handler thread; none left, the
        connection is refused at once (the loop never waits for a slot)."""
        if not self._take_slot():
            _refuse_busy(request, self._busy)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:  # the thread did not start: nobody else will free the slot
            self._free_slot()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        """The handler thread: its slot is freed however the connection ends (done, idle
        timeout, hang-up, an error in the handler)."""
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._free_slot()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up or went idle is its own business: no traceback on stderr."""
        if isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)


def _busy_answer(cap: int) -> bytes:
    """The whole 503 a connection over the cap gets: JSON like every other error, with the
    security headers, ``Retry-After: 1`` and ``Connection: close``."""
    body = json.dumps(
        {"error": f"too many open connections (at most {cap}); retry in a second"},
        separators=(",", ":"),
    ).encode()
    headers = {
        "Server": _Handler.server_version,
        **SECURITY_HEADERS,
        "Retry-After": "1",
        "Content-Type": "application/json; charset=utf-8",
        "Content-Length": str(len(body)),
        "Connection": "close",
    }
    head = "HTTP/1.1 503 Service Unavailable\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return head.encode("latin-1") + b"\r\n" + body


def _refuse_busy(request: socket.socket, answer: bytes) -> None:
    """Answer a connection over the cap without blocking the accept loop: the socket goes
    non-blocking, the bytes already received are read (closing a socket with unread input
    resets the connection, which can cost the client the answer), and the small answer fits a
    fresh socket's send buffer. Any failure just drops the connection."""
    try:
        request.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            request.recv(65536)
        request.send(answer)
    except OSError:
        pass


def url_host(host: str) -> str:
    """The host part of the printed URL. Bound to every interface (``0.0.0.0``, ``::`` or
    ""), the URL names loopback: the wildcard itself is no address a browser can open, and the
    Host allow-list would refuse it."""
    bare = host.strip("[]")
    if bare in ("", "0.0.0.0", "::"):
        return "[::1]" if bare == "::" else "127.0.0.1"
    return f"[{bare}]" if ":" in bare else bare


class DeadlineReader(io.RawIOBase):
    """The socket's input, each read bounded by the idle timeout and by what is left until
    ``deadline`` (``time.monotonic``); past it, a read raises ``TimeoutError``, which ends the
    connection as an idle timeout does."""

    def __init__(self, sock: socket.socket, idle_s: float | None) -> None:
        self.sock = sock
        self.idle_s = idle_s
        self.deadline = float("inf")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("request deadline passed")
        self.sock.settimeout(left if self.idle_s is None else min(self.idle_s, left))
        return self.sock.recv_into(buffer)


class _Handler(BaseHTTPRequestHandler):
    server: ViewerServer
    server_version = "pyattacker-serve"
    sys_version = ""
    protocol_version = "HTTP/1.1"
    #: a request line too broken to name its version is still answered with a status line
    #: and headers (HTTP/0.9 has neither, and the viewer does not speak it)
    default_request_version = "HTTP/1.1"
    #: seconds a connection may sit idle or half-sent before it is closed (each holds a thread)
    timeout = IDLE_TIMEOUT_S

    # -- plumbing ---------------------------------------------------------------------------
    def setup(self) -> None:
        """Read the request through a deadline: a client that sends a byte now and then (each
        read within the idle timeout) still loses its connection, and its slot, once the
        request has taken ``request_deadline_s``."""
        super().setup()
        self.rfile.close()  # (the socket's own reader: an open one would keep the socket open)
        self.reader = DeadlineReader(self.connection, self.timeout)
        self.rfile = io.BufferedReader(self.reader)

    def handle_one_request(self) -> None:
        self.reader.deadline = time.monotonic() + self.server.request_deadline_s
        super().handle_one_request()

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False
        if len(self.headers.get_all("Host") or []) > 1:  # RFC 9112 3.2: which one would be meant?
            self.close_connection = True
            self._json(400, {"error": "more than one Host header"})
            return False
        return True

    def log_message(self, format: str, *args: Any) -> None:  # quiet: URLs may carry the token
        return

    def _send(self, status: int, body: bytes, content_type: str, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in SECURITY_HEADERS.items():
            self.send_header(name, value)
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, doc: Any, extra: dict[str, str] | None = None) -> None:
        body = json.dumps(
            doc, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=str
        ).encode()
        self._send(status, body, "application/json; charset=utf-8", extra)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Errors the standard library detects (a malformed request line, an unknown method,
        oversized headers) answer like every other error: JSON with the security headers. An
        unknown method is a 405, as for the methods the viewer knows and refuses."""
        self.close_connection = True
        if code == HTTPStatus.NOT_IMPLEMENTED:
            self._json(405, {"error": "method not allowed; the viewer is read-only"}, {"Allow": _ALLOW})
            return
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = "error"
        self._json(code, {"error": message or explain or phrase})

    def _refuse_early(self) -> bool:
        """Checks common to every method; True when an answer was already sent."""
        parts = urlsplit(self.path)
        if len(parts.query.encode()) > MAX_QUERY_BYTES or len(self.path) > 8192:
            self.close_connection = True
            self._json(414, {"error": f"query string longer than {MAX_QUERY_BYTES} bytes"})
            return True
        guard = self.server.guard
        if not guard.host_ok(self.headers.get("Host")):
            self.close_connection = True
            self._json(403, {"error": "forbidden host"})
            return True
        if not guard.origin_ok(self.headers.get("Origin")):
            self.close_connection = True
            self._json(403, {"error": "forbidden origin"})
            return True
        return False

    def _refuse_method(self) -> None:
        if self._refuse_early():
            return
        self.close_connection = True  # never read a body we refuse
        self._json(
            405, {"error": f"method {self.command} not allowed; the viewer is read-only"}, {"Allow": _ALLOW}
        )

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _refuse_method

    # -- GET and HEAD ---------------------------------------------------------------------------
    def do_GET(self) -> None:
        """Answer a GET, or a HEAD: ``_send`` leaves the body out for HEAD, so both get the same
        status and headers (Content-Length included) through the same checks."""
        if self._refuse_early():
            return
        length = self.headers.get("Content-Length")
        if (length and length.strip() != "0") or self.headers.get("Transfer-Encoding"):
            self.close_connection = True
            self._json(413, {"error": "request bodies are not accepted"})
            return
        parts = urlsplit(self.path)
        path = parts.path or "/"
        if path in ("/healthz", "/health"):
            self._json(200, {"ok": True})
            return
        pairs = parse_qsl(parts.query, keep_blank_values=True)
        guard = self.server.guard
        tokens = [v for k, v in pairs if k == "token"]
        if tokens:
            if len(tokens) == 1 and guard.token_ok(tokens[0]):
                target = guard.strip_token(path, parts.query)
                self._send(
                    303,
                    b"",
                    "text/plain; charset=utf-8",
                    {"Location": target, "Set-Cookie": guard.set_cookie()},
                )
            else:
                self._json(401, {"error": "invalid token"}, {"WWW-Authenticate": "Bearer"})
            return
        if not guard.authenticated(self.headers.get_all("Cookie") or [], self.headers.get("Authorization")):
            self._json(
                401,
                {
                    "error": "authentication required: open the URL printed by `pyattacker serve`"
                    " or send Authorization: Bearer <token>"
                },
                {"WWW-Authenticate": "Bearer"},
            )
            return
        if path in STATIC:
            content_type, name = STATIC[path]
            self._send(200, read_asset(name), content_type)
            return
        if path == STREAM_PATH:
            self._stream_logs(pairs)
            return
        try:
            params = self.server.api.params(path, pairs)
            if path == "/metrics" and self._wants_prometheus(params):
                self._send(200, self.server.api.prometheus(params).encode(), _PROM_TYPE)
                return
            self._json(200, self.server.api.call(path, params))
        except ApiError as exc:
            self._json(exc.status, exc.body)
        except Exception as exc:  # one bad request must not kill the server
            self._json(500, {"error": f"{type(exc).__name__}: {exc}"})

    do_HEAD = do_GET

    def _stream_logs(self, pairs: list[tuple[str, str]]) -> None:
        """``/logs/stream``: task logs as Server-Sent Events, resumed after ``Last-Event-ID``.
        The response ends after ``sse_hold_s`` (the browser reconnects); the connection closes
        with it. Bad parameters are a 400 and an unreadable store a 503, before any event."""
        api = self.server.api
        try:
            filters, after = api.stream_filters(pairs, self.headers.get("Last-Event-ID"))
            with api.store_for_stream() as store:
                self.close_connection = True
                self.send_response(200)
                for name, value in SECURITY_HEADERS.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "text/event-stream; charset=utf-8")
                self.send_header("Connection", "close")
                self.end_headers()
                if self.command == "HEAD":
                    return
                for chunk in log_stream(store, filters, after or None, hold_s=self.server.sse_hold_s):
                    self.wfile.write(chunk)
                    self.wfile.flush()
        except ApiError as exc:
            self._json(exc.status, exc.body)
        except (ConnectionError, TimeoutError):  # the client went away: the stream just ends
            return

    def _wants_prometheus(self, params: dict[str, str]) -> bool:
        """``format=prometheus``, or a Prometheus scraper's Accept header when no format is
        given; any other ``format`` than ``json`` would be silently ignored: a 400."""
        fmt = params.get("format") or ""
        if fmt not in _FORMATS:
            raise ApiError(400, "parameter 'format' must be json or prometheus")
        if fmt:
            return fmt == "prometheus"
        accept = self.headers.get("Accept") or ""
        return "text/plain" in accept and "version=0.0.4" in accept


def run_server(
    location: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8787,
    run_id: str | None = None,
    token: str | None = None,
    out: IO[str] = sys.stdout,
    experiments: tuple[str, ...] = (),
) -> None:
    """Check the store, bind, print the tokenised URL and serve until Ctrl+C / SIGTERM."""
    with read_only_store(suite_catalog(location)):  # missing or foreign store: ConfigError before binding
        pass
    server = ViewerServer(
        location, host, port, token or secrets.token_urlsafe(32), run_id, experiments=experiments
    )
    if host.strip("[]") not in ("127.0.0.1", "localhost", "::1"):
        print(
            f"warning: serving on {host or 'every interface'}, not loopback; anyone who can reach it"
            " and has the token can read"
            " the store (put an authenticating proxy in front)",
            file=sys.stderr,
        )
    print(f"pyattacker serve: {server.url}?token={server.guard.token}", file=out, flush=True)
    # the first page load of a large run would wait for its catch-up: do it while the user opens it
    threading.Thread(target=server.api.warm, name="pyattacker-serve-warm", daemon=True).start()

    def stop(*_: Any) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        server.server_close()
