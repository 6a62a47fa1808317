"""The one-writer rule on S3: a lease object created and renewed with conditional writes.

``<prefix>/writer.lease`` holds who writes the store (pid, host, a random token) and until when
(``expires_at``, wall-clock seconds). A writer:

* creates it with ``If-None-Match: *`` (exactly one of two racing writers succeeds);
* finding one, takes it over only when it is stale: expired, or held by a process of this host
  that is gone (a SIGKILLed writer leaves its lease behind). The takeover is a PUT with
  ``If-Match: <the stale lease's ETag>``, so two writers taking over one stale lease cannot
  both win. Otherwise it is refused, naming the holder;
* renews it from a thread every ``ttl / 3`` seconds with ``If-Match: <its own ETag>``; a renewal
  refused means another writer took the store over, and every later commit fails;
* deletes it on close (``If-Match`` again: never someone else's lease).

The lease is advisory for timing; what makes a late writer harmless is that every segment is
written with ``If-None-Match: *`` too (``store.py``): a writer that lost its lease cannot
overwrite what the new writer wrote.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import threading
import time
from typing import Any

from pyattacker.errors import StoreUnavailable
from pyattacker_store_s3.client import is_missing, is_precondition_failed

__all__ = ["DEFAULT_TTL", "S3Lease"]

DEFAULT_TTL = 30.0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, someone else's
        return True
    return True


class S3Lease:
    """A held writer lease (see the module docstring); ``release`` ends it."""

    def __init__(self, client: Any, bucket: str, key: str, location: str, ttl: float = DEFAULT_TTL) -> None:
        self.client, self.bucket, self.key, self.location, self.ttl = client, bucket, key, location, ttl
        self.token = secrets.token_hex(8)
        self.etag = ""
        self.lost: str | None = None  # why the lease is gone, once it is
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the lease object ---------------------------------------------------------------------------
    def _body(self) -> bytes:
        return json.dumps(
            {
                "pid": os.getpid(),
                "host": socket.gethostname(),
                "token": self.token,
                "expires_at": time.time() + self.ttl,
                "ttl": self.ttl,
            }
        ).encode()

    def _put(self, **condition: str) -> None:
        out = self.client.put_object(Bucket=self.bucket, Key=self.key, Body=self._body(), **condition)
        self.etag = out["ETag"]

    @classmethod
    def acquire(cls, client: Any, bucket: str, key: str, location: str, ttl: float = DEFAULT_TTL) -> S3Lease:
        """Hold the lease, taking over a stale one; ``StoreUnavailable`` naming the holder otherwise."""
        lease = cls(client, bucket, key, location, ttl)
        try:
            lease._put(IfNoneMatch="*")
        except Exception as exc:
            if not is_precondition_failed(exc):
                raise
            lease._take_over()
        lease._thread = threading.Thread(target=lease._renew_loop, name="s3-lease", daemon=True)
        lease._thread.start()
        return lease

    def _take_over(self) -> None:
        try:
            found = self.client.get_object(Bucket=self.bucket, Key=self.key)
        except Exception as exc:
            if is_missing(exc):  # released meanwhile: create it again
                self._put(IfNoneMatch="*")
                return
            raise
        etag = found["ETag"]
        try:
            holder = json.loads(found["Body"].read())
        except ValueError:
            holder = {}
        stale = float(holder.get("expires_at", 0)) < time.time() or (
            holder.get("host") == socket.gethostname() and not _pid_alive(int(holder.get("pid", 0)))
        )
        if not stale:
            raise StoreUnavailable(
                f"store {self.location} is being written by pid {holder.get('pid')} on"
                f" {holder.get('host')} (its lease s3://{self.bucket}/{self.key} is renewed until"
                f" {time.strftime('%H:%M:%S', time.localtime(float(holder.get('expires_at', 0))))});"
                " one writer per store"
            )
        try:
            self._put(IfMatch=etag)
        except Exception as exc:
            if is_precondition_failed(exc) or is_missing(exc):
                raise StoreUnavailable(
                    f"store {self.location}: another writer took over the stale lease first"
                ) from exc
            raise

    # -- renewal -------------------------------------------------------------------------------------
    def _renew_loop(self) -> None:
        while not self._stop.wait(self.ttl / 3):
            try:
                self._put(IfMatch=self.etag)
            except Exception as exc:
                if is_precondition_failed(exc) or is_missing(exc):
                    self.lost = "another writer took the store over (the lease was renewed by someone else)"
                    return
                # the server unreachable for a moment: try again at the next tick (the lease is
                # valid for three ticks)

    def check(self) -> None:
        """Raise when the lease is known to be gone (a commit must not go on)."""
        if self.lost is not None:
            raise StoreUnavailable(f"store {self.location}: {self.lost}")

    def release(self) -> None:
        """Stop renewing and delete the lease, if it is still ours (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self.lost is None and self.etag:
            try:
                self.client.delete_object(Bucket=self.bucket, Key=self.key, IfMatch=self.etag)
            except Exception:  # it expires on its own; a close must not fail for it
                pass
            self.etag = ""
