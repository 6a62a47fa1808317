"""Why a benchmark produced no table: all are ``PyAttackerError`` (the CLI exits 2).

A benchmark that cannot finish never returns partial metrics: numbers from a run cut short
would sit under the right heading and mean something else.
"""

from __future__ import annotations

from pyattacker import PyAttackerError

__all__ = ["AlgorithmFault", "BenchmarkError", "BenchmarkStalled", "BenchmarkTimeout"]


class BenchmarkError(PyAttackerError):
    """Base of the errors that end a benchmark without a report."""


class BenchmarkTimeout(BenchmarkError):
    """A run used up its wall-clock budget (the message says whether it stalled or was slow)."""


class BenchmarkStalled(BenchmarkError):
    """A run can never finish: every endpoint is beyond recovery, or jobs never drain."""


class AlgorithmFault(BenchmarkError):
    """The algorithm under test broke its contract: it raised something other than an
    acquisition failure, or returned no lease, a lease of a foreign pool or a released one.
    Counting that as failed jobs would report a bug as a property of the world."""
