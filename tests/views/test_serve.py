"""``serve``: a real server process on a loopback port — endpoints, auth matrix, XSS, Prometheus."""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.views import XSS, serving

TOKEN = "test-token-123"


class Server:
    def __init__(self, port: int) -> None:
        self.port = port

    def request(
        self,
        path: str,
        *,
        headers: dict[str, str] | None = None,
        method: str = "GET",
        body: bytes | None = None,
        auth: bool = True,
    ) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            h = {"Host": f"127.0.0.1:{self.port}"}
            if auth:
                h["Authorization"] = f"Bearer {TOKEN}"
            h.update(headers or {})
            conn.request(method, path, body=body, headers=h)
            resp = conn.getresponse()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        finally:
            conn.close()

    def json(self, path: str, **kw: Any) -> Any:
        status, _, body = self.request(path, **kw)
        assert status == 200, (path, status, body)
        return json.loads(body)


@pytest.fixture(scope="module")
def server(view_store: str) -> Iterator[Server]:
    with serving(view_store, TOKEN) as (port, _url):
        yield Server(port)


def test_healthz_needs_no_auth(server: Server) -> None:
    status, headers, body = server.request("/healthz", auth=False)
    assert status == 200 and json.loads(body) == {"ok": True}
    assert headers["cache-control"] == "no-store"


def test_security_headers_everywhere(server: Server) -> None:
    for path, auth in (("/", True), ("/stats", True), ("/stats", False), ("/nope", True)):
        _, h, _ = server.request(path, auth=auth)
        assert h["content-security-policy"].startswith("default-src 'self'")
        assert "frame-ancestors 'none'" in h["content-security-policy"]
        assert h["x-frame-options"] == "DENY"
        assert h["x-content-type-options"] == "nosniff"
        assert h["cache-control"] == "no-store"
        assert h["referrer-policy"] == "no-referrer"


def test_auth_matrix(server: Server) -> None:
    status, _, body = server.request("/stats", auth=False)
    assert status == 401 and "error" in json.loads(body)
    assert server.request("/stats", auth=False, headers={"Authorization": "Bearer wrong"})[0] == 401
    assert server.request("/?token=wrong", auth=False)[0] == 401
    status, h, _ = server.request("/?token=" + TOKEN + "&run_id=all", auth=False)
    assert status == 303
    assert h["location"] == "/?run_id=all"
    cookie = h["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    assert TOKEN not in cookie
    pair = cookie.split(";", 1)[0]
    assert server.request("/stats", auth=False, headers={"Cookie": pair})[0] == 200
    assert server.request("/stats", auth=False, headers={"Cookie": pair.split("=")[0] + "=forged"})[0] == 401
    assert server.request("/stats")[0] == 200  # Bearer


def test_host_origin_and_limits(server: Server) -> None:
    assert server.request("/stats", headers={"Host": "evil.example:80"})[0] == 403
    assert server.request("/healthz", headers={"Host": f"attacker.test:{server.port}"})[0] == 403
    assert server.request("/stats", headers={"Host": f"localhost:{server.port}"})[0] == 200
    assert server.request("/stats", headers={"Origin": "http://evil.example"})[0] == 403
    assert server.request("/stats", headers={"Origin": f"http://127.0.0.1:{server.port}"})[0] == 200
    assert server.request("/stats?x=" + "a" * 3000)[0] in (413, 414)
    assert server.request("/stats", method="POST", body=b"{}")[0] == 405
    assert server.request("/stats", method="DELETE")[0] == 405
    assert server.request("/stats", body=b"x", headers={"Content-Length": "1"})[0] == 413


def test_unknown_path_lists_paths(server: Server) -> None:
    status, _, body = server.request("/nope")
    assert status == 404
    assert "/stats" in json.loads(body)["paths"]


def test_endpoint_shapes(server: Server) -> None:
    stats = server.json("/stats")
    for key in (
        "run_id",
        "pipelines",
        "latency_ms",
        "throughput",
        "pools",
        "recent_errors",
        "reported_metrics",
        "latency_histogram",
        "throughput_series",
        "recent_events",
    ):
        assert key in stats
    assert stats["pipelines"]["total"] == 20
    assert stats["reported_metrics"]["run"]["accuracy"] == 0.75
    metrics = server.json("/metrics?pipeline_id=")
    assert {m["name"] for m in metrics["rows"]} == {"accuracy", "finished"}
    events = server.json("/events?limit=10")
    assert len(events["rows"]) == 10 and events["next"]
    more = server.json("/events?limit=10&after=" + events["next"])
    assert more["rows"][0]["event_id"] > events["rows"][-1]["event_id"]
    pipes = server.json("/pipelines?limit=1000")
    assert len(pipes["rows"]) == 20 and pipes["next"] is None
    assert all("reported_metrics" in p for p in pipes["rows"])
    page1 = server.json("/pipelines?limit=7")
    page2 = server.json("/pipelines?limit=7&after=" + page1["next"])
    assert not {p["pipeline_id"] for p in page1["rows"]} & {p["pipeline_id"] for p in page2["rows"]}
    res = server.json("/resources")
    assert res["rows"][0]["pool"] == "api"
    errors = server.json("/errors")
    assert len(errors["rows"]) == 2
    keys = server.json("/curves?pipeline_id=k1")
    assert keys["keys"] == ["loss"]
    curve = server.json("/curves?pipeline_id=k1&key=loss")
    assert [p["step"] for p in curve["rows"]] == [0, 1, 2]
    assert server.json("/stats?run_id=all")["reported_metrics"] is None
    assert server.request("/stats?run_id=nope")[0] == 404
    assert server.request("/pipelines?limit=abc")[0] == 400
    assert len(server.json("/events?limit=5000")["rows"]) <= 1000


def test_stored_markup_stays_data(server: Server) -> None:
    errors = server.json("/errors")
    assert errors["rows"][0]["error_message"] == XSS  # JSON keeps the raw text
    status, h, page = server.request("/")
    assert status == 200 and h["content-type"].startswith("text/html")
    html = page.decode()
    assert "<script>alert" not in html and "k6" not in html  # no stored text in the page
    assert '<script src="/app.js"' in html and "<script>" not in html  # no inline script
    _, h, js = server.request("/app.js")
    assert h["content-type"].startswith("text/javascript")
    assert b"innerHTML" not in js and b"outerHTML" not in js and b"insertAdjacentHTML" not in js
    assert b"document.write" not in js and b"textContent" in js


def test_prometheus_parses_line_by_line(server: Server) -> None:
    sample = re.compile(
        r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})? -?[0-9.e+-]+$'
    )
    for path, headers in (
        ("/metrics?format=prometheus", {}),
        ("/metrics", {"Accept": "text/plain; version=0.0.4"}),
    ):
        status, h, body = server.request(path, headers=headers)
        assert status == 200 and h["content-type"].startswith("text/plain; version=0.0.4")
        lines = body.decode().splitlines()
        assert lines
        for line in lines:
            if line.startswith("# HELP ") or line.startswith("# TYPE "):
                continue
            assert sample.match(line), line
        assert any(line.startswith("pyattacker_app_metric{") and "accuracy" in line for line in lines)


def test_missing_store_refused(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pyattacker", "serve", str(tmp_path / "none.db"), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2


def test_warm_catches_up_with_the_default_run_before_any_request(view_store: str, tmp_path: Path) -> None:
    """``serve`` warms its view of the default run at start-up (on a thread), so the first page
    load of a large run does not wait for the catch-up; a warm-up that fails raises nothing."""
    from pyattacker.views.common import choose_run, read_only_store
    from pyattacker_plugins.serve.api import Api

    api = Api(view_store)
    assert api._digests == {}
    api.warm()
    with read_only_store(view_store) as s:
        run_id = choose_run(s, None).run_id
        attempts = s.stats(run_id)["attempts_total"]
    assert list(api._digests) == [run_id] and api._digests[run_id].attempts_seen == attempts > 0
    Api(view_store, run_id="no-such-run").warm()
    Api(str(tmp_path / "missing.db")).warm()


# -- hostile requests (found by fuzzing the server) -------------------------------------------------


def _b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "path",
    [
        "/events?after=99999999999999999999",
        "/curves?pipeline_id=&key=k&after=-99999999999999999999",
        "/pipelines?after=" + _b64("[{}, []]"),
        "/errors?after=" + _b64('[11805916207174113034240, "x"]'),
        "/metrics?after=" + _b64("[1, 2]"),
        "/resources?after=" + _b64("[1, 2, 3]"),
        "/pipelines?after=" + _b64("[" * 1100),
    ],
)
def test_a_bad_after_parameter_is_a_400_naming_it(server: Server, path: str) -> None:
    """Numbers SQLite cannot bind, cursors of the wrong shape or types, and nesting deep enough
    to exhaust the JSON decoder are the client's mistakes: 400 naming ``after``, never a 500."""
    status, _, body = server.request(path)
    assert status == 400, (path, status, body)
    assert "after" in json.loads(body)["error"]


def test_errors_the_http_layer_detects_are_json_with_the_security_headers(server: Server) -> None:
    """An unknown method is a 405 like the refused ones; a malformed request line is a JSON 400
    that carries the same headers as every other answer."""
    status, headers, body = server.request("/stats", method="TRACE")
    assert status == 405 and headers["allow"] == "GET, HEAD"
    assert headers["content-type"].startswith("application/json") and "error" in json.loads(body)
    assert headers["x-content-type-options"] == "nosniff"
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(b"GARBAGE\r\n\r\n")
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    head, _, payload = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400")
    assert b"application/json" in head and b"Content-Security-Policy" in head
    assert "error" in json.loads(payload)


def test_the_token_redirect_stays_on_this_server_and_keeps_the_other_parameters(server: Server) -> None:
    for path, location in (
        ("//evil.example/?token=" + TOKEN, "/evil.example/"),
        ("/\\evil.example/?token=" + TOKEN, "/evil.example/"),
        ("/?a=%ZZ&token=" + TOKEN + "&b=%FF&z", "/?a=%ZZ&b=%FF&z"),
    ):
        status, headers, _ = server.request(path, auth=False)
        assert status == 303 and headers["location"] == location, (path, headers.get("location"))


def test_the_session_cookie_is_found_beside_cookies_of_other_local_apps(server: Server) -> None:
    status, headers, _ = server.request("/?token=" + TOKEN, auth=False)
    assert status == 303
    pair = headers["set-cookie"].split(";", 1)[0]
    for cookie in ('prefs={"theme":"dark"}; ' + pair, "note=hello world; " + pair, pair + "; x=1"):
        assert server.request("/stats", auth=False, headers={"Cookie": cookie})[0] == 200, cookie
    assert server.request("/stats", auth=False, headers={"Cookie": "x=1; " + pair + "x"})[0] == 401


@pytest.mark.timeout(60)
def test_an_idle_or_half_sent_connection_is_closed(view_store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each connection holds a thread; one that never finishes its request (or idles after
    one) is closed after the idle timeout instead of being held for ever."""
    import threading

    from pyattacker_plugins.serve import server as server_module

    monkeypatch.setattr(server_module._Handler, "timeout", 0.5)
    srv = server_module.ViewerServer(view_store, "127.0.0.1", 0, TOKEN, None)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        with socket.create_connection(("127.0.0.1", srv.bound_port), timeout=30) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0")  # never finished
            assert sock.recv(65536) == b""  # the server closed it (no answer to a half request)
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(10)


def test_the_printed_url_of_a_wildcard_bind_names_loopback() -> None:
    """``--host 0.0.0.0`` printed ``http://0.0.0.0:P/``, which the Host allow-list refuses (403)."""
    from pyattacker_plugins.serve.server import url_host

    assert [url_host(h) for h in ("0.0.0.0", "", "::", "[::]")] == [
        "127.0.0.1",
        "127.0.0.1",
        "[::1]",
        "[::1]",
    ]
    assert [url_host(h) for h in ("127.0.0.1", "::1", "box.lan")] == ["127.0.0.1", "[::1]", "box.lan"]


def test_a_client_that_hangs_up_leaves_no_traceback(
    view_store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A disconnect is the client's business (each one printed about 1.6 KB of traceback);
    any other error in a handler still reaches stderr."""
    from pyattacker_plugins.serve.server import ViewerServer

    srv = ViewerServer(view_store, "127.0.0.1", 0, TOKEN, None)
    try:
        for exc in (BrokenPipeError(), ConnectionResetError(), TimeoutError(), RuntimeError("handler bug")):
            try:
                raise exc
            except Exception:
                srv.handle_error(None, ("127.0.0.1", 1))
    finally:
        srv.server_close()
    err = capsys.readouterr().err
    assert "handler bug" in err
    assert "BrokenPipeError" not in err and "ConnectionResetError" not in err and "TimeoutError" not in err


# -- connection cap, HEAD, the token variable, a vanished store, strict parameters ------------------


@contextlib.contextmanager
def _in_process(store: str, **kw: Any) -> Iterator[Any]:
    """A ``ViewerServer`` on a free loopback port, served on a thread; always stopped and closed.
    Clients must be closed before it exits (``server_close`` joins the handler threads)."""
    from pyattacker_plugins.serve.server import ViewerServer

    srv = ViewerServer(store, "127.0.0.1", 0, TOKEN, None, **kw)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(10)


def _held(port: int) -> http.client.HTTPConnection:
    """A keep-alive connection that has had one answer: its handler thread is running and holds
    a slot until the connection closes."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/healthz", headers={"Host": f"127.0.0.1:{port}"})
    resp = conn.getresponse()
    assert resp.status == 200 and resp.getheader("connection") != "close"
    resp.read()
    return conn


def _until_idle(srv: Any) -> None:
    """Wait (hang guard only, no timing claim) until every handler thread has given its slot back."""
    deadline = time.monotonic() + 20
    while srv.active_connections and time.monotonic() < deadline:
        time.sleep(0.01)
    assert srv.active_connections == 0


@pytest.mark.timeout(60)
def test_connections_over_the_cap_get_a_503_and_a_hung_up_one_frees_its_slot(view_store: str) -> None:
    """Each connection holds a thread until it ends or idles out: over the cap, a new one is
    answered at once with 503 + Retry-After (JSON, security headers) and closed, instead of
    getting a thread of its own. A client that hangs up gives its slot back."""
    with _in_process(view_store, max_connections=2) as srv:
        port = srv.bound_port
        held = [_held(port), _held(port)]
        try:
            assert srv.active_connections == 2
            for _ in range(3):  # refused connections never take a slot
                status, headers, body = Server(port).request("/stats")
                assert status == 503, (status, body)
                assert headers["retry-after"] == "1" and headers["connection"] == "close"
                assert headers["content-type"].startswith("application/json")
                assert headers["x-content-type-options"] == "nosniff"
                assert headers["content-security-policy"].startswith("default-src 'self'")
                assert "error" in json.loads(body)
            with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
                reply = b""  # the refusal needs no request and is followed by the close
                while chunk := sock.recv(65536):
                    reply += chunk
            assert reply.startswith(b"HTTP/1.1 503 ")
        finally:
            for conn in held:
                conn.close()
        _until_idle(srv)
        assert Server(port).request("/stats")[0] == 200


@pytest.mark.timeout(60)
def test_a_connection_that_idles_out_or_whose_handler_fails_frees_its_slot(
    view_store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyattacker_plugins.serve import server as server_module

    monkeypatch.setattr(server_module._Handler, "timeout", 0.3)
    with _in_process(view_store, max_connections=1) as srv:
        port = srv.bound_port
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0")  # never finished
            assert sock.recv(65536) == b""  # closed by the idle timeout
        _until_idle(srv)
        assert Server(port).request("/stats")[0] == 200

        def broken(self: Any) -> None:
            raise RuntimeError("handler bug")

        monkeypatch.setattr(srv, "handle_error", lambda *a: None)  # keep stderr quiet
        monkeypatch.setattr(server_module._Handler, "do_GET", broken)
        _until_idle(srv)  # the last request's thread may still hold the only slot (a 503 then)
        with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
            Server(port).request("/stats")
        _until_idle(srv)
        monkeypatch.undo()
        assert Server(port).request("/stats")[0] == 200


def test_the_connection_cap_is_a_module_constant() -> None:
    from pyattacker_plugins.serve import server as server_module

    assert server_module.MAX_CONNECTIONS == 64
    with pytest.raises(ValueError):
        server_module.ViewerServer("unused.db", "127.0.0.1", 0, TOKEN, None, max_connections=0)


def test_the_token_can_come_from_the_environment_and_stays_out_of_ps(view_store: str) -> None:
    """``--token`` is on the command line every local user can read (``ps``);
    ``PYATTACKER_SERVE_TOKEN`` is not. ``--token`` wins when both are given."""
    secret = "env-token-456"
    with serving(view_store, None, env_token=secret, expect=secret) as (port, _url):
        server = Server(port)
        assert server.request("/stats", headers={"Authorization": f"Bearer {secret}"})[0] == 200
        assert server.request("/stats")[0] == 401  # TOKEN is not this server's token
        cmdlines = [_cmdline(p) for p in Path("/proc").glob("[0-9]*/cmdline")]
        assert any(b"serve" in c for c in cmdlines) and not any(secret.encode() in c for c in cmdlines)
    with serving(view_store, TOKEN, env_token=secret) as (port, _url):
        assert Server(port).request("/stats")[0] == 200


def _cmdline(path: Path) -> bytes:
    """A process's command line as ``ps`` shows it (empty if it ended meanwhile)."""
    try:
        return path.read_bytes()
    except OSError:
        return b""


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_token_variable_is_a_usage_error_naming_it(view_store: str, value: str) -> None:
    env = {**os.environ, "PYATTACKER_SERVE_TOKEN": value}
    proc = subprocess.run(
        [sys.executable, "-m", "pyattacker", "serve", view_store, "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "PYATTACKER_SERVE_TOKEN" in proc.stderr and "token=" not in proc.stdout


def test_an_empty_token_option_is_a_usage_error_naming_it(view_store: str) -> None:
    """`--token "$SECRET"` with SECRET unset: a random token would make every client fail with
    401s and no hint why."""
    proc = subprocess.run(
        [sys.executable, "-m", "pyattacker", "serve", view_store, "--port", "0", "--token", " "],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "--token" in proc.stderr and "token=" not in proc.stdout


def test_serve_help_names_the_token_variable() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pyattacker", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 0 and "PYATTACKER_SERVE_TOKEN" in proc.stdout


#: answers whose bytes do not change between two requests (``/stats`` carries the time)
_STABLE = [
    "/",
    "/app.js",
    "/healthz",
    "/events?limit=3",
    "/pipelines?limit=2",
    "/errors",
    "/curves?pipeline_id=k1&key=loss",
    "/nope",
    "/pipelines?limit=abc",
    "/curves?run_id=all",
    "/stats?run_id=nope",
]


def test_head_answers_every_get_route_without_a_body(server: Server) -> None:
    """Same status and headers as GET, Content-Length of the body GET sends, no body; auth,
    Host and Origin checks apply as for GET."""
    for path in _STABLE:
        get_status, get_headers, get_body = server.request(path)
        head_status, head_headers, head_body = server.request(path, method="HEAD")
        assert head_status == get_status, path
        get_headers.pop("date", None)
        head_headers.pop("date", None)
        assert head_headers == get_headers, path
        assert int(head_headers["content-length"]) == len(get_body) > 0 and head_body == b""
    for path in ("/stats", "/metrics", "/metrics?format=prometheus", "/resources"):
        status, headers, _ = server.request(path, method="HEAD")
        assert status == 200 and int(headers["content-length"]) > 0, path
    assert server.request("/stats", method="HEAD", auth=False)[0] == 401
    assert server.request("/healthz", method="HEAD", headers={"Host": "evil.example:80"})[0] == 403
    assert server.request("/stats", method="HEAD", headers={"Origin": "http://evil.example"})[0] == 403
    status, headers, _ = server.request("/?token=" + TOKEN, method="HEAD", auth=False)
    assert status == 303 and headers["location"] == "/" and "set-cookie" in headers
    # on the wire: the next answer on the same connection follows the HEAD's headers directly
    host = f"Host: 127.0.0.1:{server.port}\r\nAuthorization: Bearer {TOKEN}\r\n"
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        head = f"HEAD /errors HTTP/1.1\r\n{host}\r\n"
        sock.sendall(f"{head}GET /healthz HTTP/1.1\r\n{host}Connection: close\r\n\r\n".encode())
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    first, sep, rest = reply.partition(b"\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 200") and sep and rest.startswith(b"HTTP/1.1 200"), reply


def test_other_methods_are_refused_with_allow_naming_get_and_head(server: Server) -> None:
    for method in ("POST", "OPTIONS", "TRACE"):
        status, headers, _ = server.request("/stats", method=method)
        assert status == 405 and headers["allow"] == "GET, HEAD", method


@pytest.mark.timeout(120)
def test_a_store_deleted_or_corrupted_while_serving_answers_503_naming_it(tmp_path: Path) -> None:
    """Each request opens its own read-only connection: a store gone from under the viewer is a
    503 naming it, never a 500, and the viewer neither recreates nor touches the file."""
    from tests.support.views import build_store

    db = build_store(tmp_path / "gone.db", 3)
    paths = ["/stats", "/pipelines", "/events", "/errors", "/metrics", "/metrics?format=prometheus"]
    with _in_process(db) as srv:
        server = Server(srv.bound_port)
        for path in paths:
            assert server.request(path)[0] == 200, path
        os.remove(db)
        for method in ("GET", "HEAD"):
            for path in paths:
                status, headers, body = server.request(path, method=method)
                assert status == 503, (method, path, status, body)
                assert headers["content-type"].startswith("application/json")
                if method == "GET":
                    doc = json.loads(body)
                    assert db in doc["error"] and doc["store"] == db, doc
        assert not os.path.exists(db)
        for sibling in (db + "-wal", db + "-shm"):
            if os.path.exists(sibling):
                os.remove(sibling)
        garbage = b"this is not a SQLite database\n" * 200
        Path(db).write_bytes(garbage)
        for path in paths:
            status, _, body = server.request(path)
            assert status == 503 and db in json.loads(body)["error"], (path, status, body)
        assert server.request("/healthz")[0] == 200
    assert Path(db).read_bytes() == garbage
    assert not os.path.exists(db + "-wal")


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/stats?run_id=all&run_id=nope", "run_id"),
        ("/pipelines?limit=1&limit=2", "limit"),
        ("/events?after=1&after=2", "after"),
        ("/pipelines?state=failed&state=succeeded", "state"),
        ("/metrics?format=prometheus&format=json", "format"),
        ("/curves?pipeline_id=k1&key=loss&key=loss", "key"),
        ("/resources?pool=api&pool=api", "pool"),
    ],
)
def test_a_parameter_given_twice_is_a_400_naming_it(server: Server, path: str, name: str) -> None:
    status, _, body = server.request(path)
    assert status == 400, (path, status, body)
    assert f"'{name}'" in json.loads(body)["error"], body


def test_a_bad_state_or_format_is_a_400_naming_it(server: Server) -> None:
    from pyattacker.model import PIPELINE_STATES

    status, _, body = server.request("/pipelines?state=bogus")
    assert status == 400, body
    error = json.loads(body)["error"]
    assert "state" in error and all(s in error for s in PIPELINE_STATES), error
    for state, count in (("failed", 2), ("", 20)):
        rows = server.json(f"/pipelines?limit=1000&state={state}")["rows"]
        assert len(rows) == count and (not state or {r["state"] for r in rows} == {state})
    status, _, body = server.request("/metrics?format=xml")
    assert status == 400 and "format" in json.loads(body)["error"], body
    prometheus_accept = {"Accept": "text/plain; version=0.0.4"}
    status, headers, _ = server.request("/metrics?format=json", headers=prometheus_accept)
    assert status == 200 and headers["content-type"].startswith("application/json")


# -- identical requests share one read -------------------------------------------------------------


class _Ticks:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_identical_requests_share_one_answer_until_it_is_older_than_the_ttl(tmp_path: Path) -> None:
    from pyattacker_plugins.serve.shared_answers import SharedAnswers

    db = tmp_path / "s.db"
    db.write_bytes(b"x")
    ticks = _Ticks()
    answers = SharedAnswers(str(db), 1.0, clock=ticks)
    calls: list[str] = []

    def compute(tag: str) -> Callable[[], str]:
        def inner() -> str:
            calls.append(tag)
            return f"{tag}{len(calls)}"

        return inner

    assert answers.get("a", compute("a")) == "a1"
    ticks.now += 0.9
    assert answers.get("a", compute("a")) == "a1"  # reused: younger than the ttl
    assert answers.get("b", compute("b")) == "b2"  # another request is its own answer
    ticks.now += 0.2
    assert answers.get("a", compute("a")) == "a3"  # older than the ttl: read again
    assert calls == ["a", "b", "a"] and (answers.computed, answers.shared) == (3, 1)


def test_a_failure_is_never_reused_and_a_replaced_store_is_read_again(tmp_path: Path) -> None:
    from pyattacker_plugins.serve.shared_answers import SharedAnswers

    db = tmp_path / "s.db"
    db.write_bytes(b"x")
    answers = SharedAnswers(str(db), 60.0, clock=_Ticks())
    n = {"calls": 0}

    def flaky() -> int:
        n["calls"] += 1
        if n["calls"] == 1:
            raise RuntimeError("store busy")
        return n["calls"]

    with pytest.raises(RuntimeError):
        answers.get("k", flaky)
    assert answers.get("k", flaky) == 2
    assert answers.get("k", flaky) == 2
    other = tmp_path / "other.db"
    other.write_bytes(b"y")
    os.replace(other, db)  # a new file under the same name (a new inode while `other` lives on)
    assert answers.get("k", flaky) == 3
    db.unlink()
    assert answers.get("k", flaky) == 4  # gone: never answered from memory
    assert answers.get("k", flaky) == 5


def test_requests_that_arrive_while_one_is_answered_wait_for_its_answer(tmp_path: Path) -> None:
    from pyattacker_plugins.serve.shared_answers import SharedAnswers

    db = tmp_path / "s.db"
    db.write_bytes(b"x")
    answers = SharedAnswers(str(db), 1.0, clock=_Ticks())
    release = threading.Event()
    calls = {"n": 0}

    def slow() -> int:
        calls["n"] += 1
        assert release.wait(30)
        return 42

    got: list[Any] = []
    threads = [threading.Thread(target=lambda: got.append(answers.get("k", slow))) for _ in range(5)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30  # hang guard, not a timing assertion
    while answers.computed + answers.shared < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    release.set()
    for t in threads:
        t.join(30)
    assert got == [42] * 5 and calls["n"] == 1 and (answers.computed, answers.shared) == (1, 4)


def test_the_viewer_shares_answers_and_a_ttl_of_zero_reads_every_time(view_store: str) -> None:
    """Through the HTTP server: two identical /stats requests get one read (the same
    `generated_at`), a different request its own; with `answer_ttl_s=0` each request reads."""
    for ttl, same in ((60.0, True), (0.0, False)):
        with _in_process(view_store, answer_ttl_s=ttl) as srv:
            server = Server(srv.bound_port)
            first = json.loads(server.request("/stats")[2])
            second = json.loads(server.request("/stats")[2])
            assert (first["generated_at"] == second["generated_at"]) is same
            assert server.request("/stats?run_id=all")[0] == 200
            answers = srv.api.answers
            assert (answers.computed, answers.shared) == ((2, 1) if same else (3, 0))


@pytest.mark.timeout(120)
def test_a_row_damaged_by_hand_answers_503_naming_row_and_column(tmp_path: Path) -> None:
    """Bad JSON in a row, or text where a number belongs, is the store's state, not a bug of
    the viewer: a 503 naming store, table, row and column, never a 500 with a bare DecodeError."""
    import sqlite3

    from tests.support.views import build_store

    db = build_store(tmp_path / "hand.db", 3)
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("UPDATE runs SET stats_json = '\"not an object\"'")
    conn.execute("UPDATE pipelines SET tags_json = '{bad' WHERE pk = (SELECT min(pk) FROM pipelines)")
    conn.close()
    before = Path(db).read_bytes()
    with _in_process(db) as srv:
        server = Server(srv.bound_port)
        for path, needle in (("/stats", "table runs"), ("/pipelines?run_id=all", "column tags_json")):
            status, _, body = server.request(path)
            doc = json.loads(body)
            assert status == 503 and needle in doc["error"] and doc["store"] == db, (path, status, doc)
    assert Path(db).read_bytes() == before


def test_answers_older_than_the_ttl_are_dropped_not_kept_until_evicted(tmp_path: Path) -> None:
    """Paging through a large run makes a key per page; answers nobody can reuse are dropped at
    the next request instead of staying (up to a megabyte each) until 256 others push them out."""
    from pyattacker_plugins.serve.shared_answers import SharedAnswers

    db = tmp_path / "s.db"
    db.write_bytes(b"x")
    ticks = _Ticks()
    answers = SharedAnswers(str(db), 1.0, clock=ticks, entries=3)
    for page in range(3):
        answers.get(("/pipelines", page), lambda page=page: page)
    assert len(answers._entries) == 3
    answers.get(("/pipelines", 3), lambda: 3)  # over the bound: the least recently used goes
    assert list(answers._entries) == [("/pipelines", 1), ("/pipelines", 2), ("/pipelines", 3)]
    ticks.now += 5.0
    answers.get("/stats", lambda: "s")  # everything else is stale by now
    assert list(answers._entries) == ["/stats"]


def _trickle_until_closed(port: int, lines: int, pause_s: float) -> int:
    """Send a request's headers one line every ``pause_s`` (each read well within the idle
    timeout) and return how many lines went out before the server closed the connection
    (``lines`` if it never did)."""
    import select

    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode())
        for sent in range(lines):
            try:
                sock.sendall(f"X-Slow-{sent}: 1\r\n".encode())
            except OSError:  # reset by the server
                return sent
            ready, _, _ = select.select([sock], [], [], pause_s)
            if ready:
                try:
                    if sock.recv(65536) == b"":
                        return sent
                except OSError:
                    return sent
    return lines


@pytest.mark.timeout(120)
def test_a_slow_client_loses_its_slot_at_the_request_deadline(view_store: str) -> None:
    """The 30 s was a timeout per read: a client sending one header line every few seconds
    kept its slot for ever (70 such clients: every later request got 503). The whole request
    now has a deadline (made short here); its slot is then free for a normal request."""
    with _in_process(view_store, max_connections=2, request_deadline_s=0.5) as srv:
        port = srv.bound_port
        results: list[int] = []
        slow = [threading.Thread(target=lambda: results.append(_trickle_until_closed(port, 200, 0.1)))
                for _ in range(2)]  # fmt: skip
        for thread in slow:
            thread.start()
        for thread in slow:
            thread.join(60)
        assert len(results) == 2 and all(sent < 200 for sent in results), results  # closed early
        _until_idle(srv)
        assert Server(port).request("/stats")[0] == 200


def test_two_host_headers_are_a_400(server: Server) -> None:
    """RFC 9112: a request with more than one Host header is answered 400 (it was 200)."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        host = f"127.0.0.1:{server.port}"
        sock.sendall(f"GET /healthz HTTP/1.1\r\nHost: {host}\r\nHost: {host}\r\n\r\n".encode())
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 400 "), reply[:80]
    assert b"more than one Host header" in reply and b"nosniff" in reply
