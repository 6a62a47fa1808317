"""A loopback HTTP server that answers one request with 429 and ``Retry-After``.

Run as a script: ``python retry_after_server.py PORT_FILE LOG_FILE CLIENTS SECONDS``. It binds
127.0.0.1 on a free port, writes the port to PORT_FILE, and logs each request's arrival
(``time.monotonic()``, one clock for every process of the machine), its client (the path,
``/shard-0``) and its answer to LOG_FILE, one ``<at> <status> <client>`` line each, flushed at
once. Answers wait until CLIENTS different clients have asked (so that every client is
running, whatever their start-up took); the first request that arrives after that gets ``429``
with ``Retry-After: SECONDS``; every other one gets ``200``. A test stops it by its PID.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["main"]


def main(port_file: str, log_file: str, clients: int, seconds: str) -> None:
    lock = threading.Lock()
    seen: set[str] = set()
    answered = [False]
    everyone = threading.Event()
    log = open(log_file, "a", buffering=1)  # noqa: SIM115 (open for the server's life)

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            at = time.monotonic()
            client = self.path.strip("/") or "-"
            with lock:
                status = 429 if len(seen) >= clients and not answered[0] else 200
                answered[0] = answered[0] or status == 429
                seen.add(client)
                log.write(f"{at!r} {status} {client}\n")
                if len(seen) >= clients:
                    everyone.set()
            everyone.wait(300)
            self.send_response(status)
            if status == 429:
                self.send_header("Retry-After", seconds)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(port_file + ".tmp", "w") as fh:
        fh.write(str(server.server_address[1]))
    os.replace(port_file + ".tmp", port_file)
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
