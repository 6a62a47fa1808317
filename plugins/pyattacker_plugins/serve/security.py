"""Who may talk to the viewer: token/cookie/Bearer auth, Host and Origin allow-lists, headers.

The token is per start (random unless given). The first request carrying ``?token=`` gets a
303 to the same URL without it plus an HttpOnly, SameSite=Strict session cookie, so the token
does not stay in the address bar, history or Referer. The Host check defeats DNS rebinding;
the Origin check refuses cross-site pages. Secrets are compared in constant time.
"""

from __future__ import annotations

import hmac
import secrets

__all__ = ["LOOPBACK_HOSTS", "MAX_QUERY_BYTES", "SECURITY_HEADERS", "Guard"]

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")
#: query strings longer than this are refused with 414
MAX_QUERY_BYTES = 2048
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode("utf-8", "surrogateescape"), b.encode("utf-8", "surrogateescape"))


class Guard:
    """Auth and origin decisions of one server instance (bound host and port known)."""

    def __init__(self, token: str, host: str, port: int) -> None:
        self.token = token
        self.session = secrets.token_urlsafe(32)
        self.cookie_name = f"pyattacker_session_{port}"
        bound = f"[{host}]" if ":" in host and not host.startswith("[") else host
        names = set(LOOPBACK_HOSTS)
        if bound not in ("0.0.0.0", "[::]"):
            names.add(bound)
        self.hosts = frozenset(f"{h}:{port}".lower() for h in names)
        self.origins = frozenset(f"http://{h}" for h in self.hosts)

    def host_ok(self, host_header: str | None) -> bool:
        return host_header is not None and host_header.strip().lower() in self.hosts

    def origin_ok(self, origin: str | None) -> bool:
        return origin is None or origin.strip().lower() in self.origins

    def token_ok(self, candidate: str) -> bool:
        return _same(candidate, self.token)

    def authenticated(self, cookie_headers: list[str], authorization: str | None) -> bool:
        """A Bearer token, or our session cookie in any ``Cookie`` header.

        Cookies are split by hand: every local web app shares the host's cookie jar, and one
        cookie that ``http.cookies`` cannot parse (a space or a brace in its value) must not
        hide ours.
        """
        if authorization:
            scheme, _, value = authorization.partition(" ")
            if scheme.lower() == "bearer" and value.strip() and self.token_ok(value.strip()):
                return True
        for header in cookie_headers:
            for part in header.split(";"):
                name, sep, value = part.strip().partition("=")
                if sep and name == self.cookie_name and _same(value.strip().strip('"'), self.session):
                    return True
        return False

    def set_cookie(self) -> str:
        return f"{self.cookie_name}={self.session}; HttpOnly; SameSite=Strict; Path=/"

    @staticmethod
    def strip_token(path: str, query: str) -> str:
        """The same URL without any ``token`` parameter (the 303 target).

        Always a path on this server: leading slashes and backslashes collapse to one slash,
        so ``//host/`` or ``/\\host/`` cannot turn the redirect into another site. The other
        parameters keep their exact bytes.
        """
        local = "/" + path.lstrip("/\\")
        kept = [part for part in query.split("&") if part and part.partition("=")[0] != "token"]
        return local + ("?" + "&".join(kept) if kept else "")
