"""The exception vocabulary, the exit codes they map to, and the pure error classifier.

Failure is an exception (invariant 4). Every error a user can act on derives from
``PyAttackerError``; ``ConfigError`` and its children map to ``ExitCode.USAGE_ERROR`` in the
CLI. ``error_class_of`` is pure so that retry decisions can be replayed and tested as a table.
"""

from __future__ import annotations

import asyncio
from enum import IntEnum
from typing import Any

__all__ = [
    "type_name",
    "RETRYABLE_CLASSES",
    "AcquireTimeout",
    "ArtifactBackendUnavailable",
    "ArtifactCodecError",
    "BudgetExceeded",
    "ConfigError",
    "CorruptCheckpoint",
    "CorruptRow",
    "ExitCode",
    "FatalError",
    "LeaseLeakError",
    "NoteConflict",
    "PipelineBuildError",
    "PipelineIdentityConflict",
    "PluginError",
    "PoolNotFound",
    "PyAttackerError",
    "ResourceUnavailable",
    "RetryableError",
    "RunInterrupted",
    "StoreFeatureUnsupported",
    "StoreUnavailable",
    "WorkerCrashed",
    "error_class_of",
    "retry_after_of",
    "safe_str",
]


class ExitCode(IntEnum):
    """The exit code of every ``pyattacker`` command, shard included (docs/cli.md)."""

    #: every pipeline succeeded (or was already done); a view or a check did its job
    OK = 0
    #: the run ended, but some pipelines failed (or a torn pipeline could not be repaired)
    FAILED = 1
    #: bad input (a config, a flag, a dataset, a store location): nothing ran
    USAGE_ERROR = 2
    #: a framework error (a crashed worker, a store that fails); the same code as USAGE_ERROR
    INTERNAL_ERROR = 2
    #: interrupted (a signal, a cancelled worker): every unfinished pipeline is resumable
    INTERRUPTED = 130


class PyAttackerError(Exception):
    """Base of every error raised by pyattacker itself."""


class ConfigError(PyAttackerError):
    """Bad input from the user: a config field, a flag, a spec. CLI exit code 2."""


class PipelineBuildError(ConfigError):
    """A pipeline template cannot be built (empty chain, non-task member, bad signature)."""


class PipelineIdentityConflict(ConfigError):
    """A stored pipeline id now maps to a different seed or chain; the old rows are kept."""


class PluginError(PyAttackerError):
    """A plugin could not be loaded, or provided something that breaks its kind's contract."""


class ArtifactCodecError(PyAttackerError):
    """A value cannot be encoded, or stored bytes cannot be decoded."""


class CorruptCheckpoint(PyAttackerError):
    """A stored checkpoint contradicts itself (for example a cursor past the chain's end)."""


class StoreUnavailable(PyAttackerError):
    """The store cannot be opened or written; nothing further can be recorded. Exit code 2."""


class ArtifactBackendUnavailable(StoreUnavailable):
    """The artifact backend could not store a task's output (a folder that became unwritable,
    a full disk). Not the task's failure: its attempt is recorded, its pipeline left resumable
    (that task runs again on resume) and the run stops. Exit code 2, like a store that fails."""


class CorruptRow(StoreUnavailable):
    """A stored row cannot be read as its record: JSON that does not parse or has the wrong
    shape, a value of the wrong type, a NULL where a value is required.

    A ``StoreUnavailable`` (exit code 2, a 503 in ``serve``) because the store cannot be read
    as it is; the message names the store, the table, the row and the column, so the row can
    be found and fixed by hand. Readers raise it and change nothing.
    """

    def __init__(self, detail: str, store: str | None = None) -> None:
        self.detail = detail
        self.store = store
        super().__init__(f"store {store}: {detail}" if store is not None else detail)

    def at(self, store: str) -> CorruptRow:
        """The same error naming ``store`` (rows are decoded where the store is not known)."""
        return self if self.store is not None else CorruptRow(self.detail, store)


class StoreFeatureUnsupported(ConfigError):
    """The store lacks an optional capability a run needs (the control ledger of pipelines
    that hand off): the store chosen is the configuration's problem, and nothing runs."""


class NoteConflict(PyAttackerError):
    """A note written against a revision that is no longer the latest (someone else wrote since):
    refused, nothing overwritten. Exit code 2; ``current`` is the revision that won."""

    def __init__(self, message: str, current: Any = None) -> None:
        super().__init__(message)
        self.current = current


class ResourceUnavailable(PyAttackerError):
    """No resource could be leased (nothing free under ``immediate``, factory failures, ...)."""


class AcquireTimeout(ResourceUnavailable):
    """Waiting for a lease took longer than the caller's limit."""


class PoolNotFound(ConfigError):
    """A task or a call names a pool that the runner does not have."""


class LeaseLeakError(PyAttackerError):
    """Under ``strict_leases`` a task ended while still holding a lease."""


class BudgetExceeded(PyAttackerError):
    """A run-level budget (failures, time) was exhausted."""


class RunInterrupted(PyAttackerError):
    """The run stopped before every admitted pipeline finished; everything is resumable."""


class WorkerCrashed(PyAttackerError):
    """A worker died outside task code. The held pipeline is recorded and the run closed."""

    def __init__(self, pipeline_id: str | None, cause: BaseException | None = None) -> None:
        self.pipeline_id = pipeline_id
        detail = f"{type(cause).__name__}: {safe_str(cause)}" if cause is not None else "unknown error"
        super().__init__(f"worker for pipeline {pipeline_id} died with {detail}")


def safe_str(exc: BaseException) -> str:
    """``str(exc)``, or a placeholder when the exception's own ``__str__`` fails (task code)."""
    try:
        return str(exc)
    except BaseException as err:
        return f"<{type(exc).__name__}.__str__ failed: {type(err).__name__}>"


class RetryableError(PyAttackerError):
    """Raise from a task to ask for a retry; ``retry_after`` (seconds) overrides the backoff."""

    def __init__(
        self, msg: str = "", error_class: str = "retryable", retry_after: float | None = None
    ) -> None:
        super().__init__(msg)
        self.error_class = error_class
        self.retry_after = retry_after


class FatalError(PyAttackerError):
    """Raise from a task to fail the pipeline without any retry."""

    error_class = "fatal"


#: Error classes that ``Retrying(retry_classified=True)`` retries.
RETRYABLE_CLASSES = frozenset({"retryable", "rate_limit", "timeout", "connection", "upstream"})

_STATUS_ATTRS = ("status", "status_code", "http_status", "code")


def _http_status(exc: BaseException) -> int | None:
    for attr in _STATUS_ATTRS:
        value = getattr(exc, attr, None)
        if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
            return value
    response = getattr(exc, "response", None)
    value = getattr(response, "status_code", None)
    if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
        return value
    return None


def error_class_of(exc: BaseException) -> str:
    """Classify an exception into one short class name; pure, order documented in docs/retries.md."""
    explicit = getattr(exc, "error_class", None)
    if isinstance(explicit, str) and explicit:
        return explicit
    if isinstance(exc, asyncio.CancelledError):
        return "cancelled"
    if isinstance(exc, FatalError):
        return "fatal"
    if isinstance(exc, TimeoutError):
        return "timeout"
    if isinstance(exc, ConnectionError):
        return "connection"
    status = _http_status(exc)
    if status is not None:
        if status in (408, 504):
            return "timeout"
        if status in (425, 429):
            return "rate_limit"
        if status >= 500:
            return "upstream"
        if status >= 400:
            return "fatal"
    if isinstance(exc, ValueError | TypeError | KeyError | AttributeError | ArithmeticError):
        return "invalid"
    return "unknown"


def retry_after_of(exc: BaseException) -> float | None:
    """A server's requested delay: ``exc.retry_after`` or the response's Retry-After header."""
    value: Any = getattr(exc, "retry_after", None)
    if value is None:
        response = getattr(exc, "response", None)
        headers = getattr(response, "headers", None)
        if headers is not None:
            try:
                value = headers.get("Retry-After") or headers.get("retry-after")
            except Exception:
                value = None
    if value is None or isinstance(value, bool):
        return None
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return None
    if seconds != seconds or seconds < 0 or seconds == float("inf"):
        return None
    return seconds


def type_name(value: Any) -> str:
    """How an error message names the type of ``value`` (the words a config author knows)."""
    if value is None:
        return "null"
    return {
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
        list: "list",
        dict: "mapping",
    }.get(type(value), type(value).__name__)
