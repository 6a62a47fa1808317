"""The exclusive writer lock that file-backed stores take beside their data.

One process writes a store. The lock is an ``fcntl.flock`` on a sidecar file that also holds the
owner's pid and host, so a second writer gets a message naming who holds it. Because the kernel
drops a flock when its process dies, holding the lock also proves that any ``running`` rows left
in the store belong to a dead process (``Store.interrupt_running`` relies on that).
"""

from __future__ import annotations

import fcntl
import os
import socket

from pyattacker.errors import StoreUnavailable

__all__ = ["WriterLock"]


class WriterLock:
    """An acquired lock; ``release()`` (or process death) frees it."""

    def __init__(self, lock_path: str, fd: int) -> None:
        self.path = lock_path
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, lock_path: str, store_path: str) -> WriterLock:
        """Take the lock or raise ``StoreUnavailable`` naming the holder (never blocks)."""
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreUnavailable(
                f"store {store_path}: cannot create writer lock {lock_path}: {exc.strerror or exc}"
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = _read_holder(fd)
            os.close(fd)
            raise StoreUnavailable(f"store {store_path} is being written by {holder}") from exc
        _write_holder(fd)
        return cls(lock_path, fd)

    def release(self) -> None:
        """Free the lock (idempotent). The sidecar file stays: deleting it would race."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    @property
    def held(self) -> bool:
        return self._fd is not None


def _write_holder(fd: int) -> None:
    text = f"{os.getpid()} {socket.gethostname()}\n".encode()
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, text, 0)
    except OSError:
        pass  # the lock itself is what matters; the text is only for the message


def _read_holder(fd: int) -> str:
    try:
        raw = os.pread(fd, 512, 0).decode("utf-8", "replace").split()
    except OSError:
        raw = []
    if len(raw) >= 2:
        return f"pid {raw[0]} on host {raw[1]}"
    return "another process"
