"""``RunReport``: what one run did, as returned by ``Runner.run`` and printed by the CLI."""

from __future__ import annotations

from typing import Any

import msgspec

from pyattacker.errors import ExitCode
from pyattacker.flow.visits import handoffs_label

__all__ = ["RunReport", "handoff_operations"]


class RunReport(msgspec.Struct, kw_only=True):
    run_id: str
    status: str
    started_at: float
    ended_at: float
    duration_ms: float
    counters: dict[str, int]
    stop_reason: str | None = None
    store: str | None = None
    producer_error: str | None = None
    pools: dict[str, Any] = {}

    @property
    def succeeded(self) -> int:
        return self.counters.get("pipelines_succeeded", 0)

    @property
    def failed(self) -> int:
        return self.counters.get("pipelines_failed", 0)

    @property
    def interrupted(self) -> int:
        return self.counters.get("pipelines_interrupted", 0)

    @property
    def skipped(self) -> int:
        return self.counters.get("skipped", 0)

    @property
    def leases_leaked(self) -> int:
        return self.counters.get("leases_leaked", 0)

    @property
    def repair_failures(self) -> int:
        return self.counters.get("repair_failures", 0)

    @property
    def exit_code(self) -> ExitCode:
        """OK all done, FAILED some failed (or a repair failed), INTERRUPTED and resumable,
        INTERNAL_ERROR when the framework stopped the run."""
        if self.status == "interrupted" and self.stop_reason in ("signal", "cancelled"):
            return ExitCode.INTERRUPTED
        if self.stop_reason in (
            "producer_error",
            "identity_conflict",
            "store_feature_unsupported",
            "store_unavailable",
            "worker_crashed",
        ):
            return ExitCode.INTERNAL_ERROR
        if self.failed or self.repair_failures:
            return ExitCode.FAILED
        if self.status == "interrupted" and self.stop_reason not in ("stop_after_failures",):
            return ExitCode.INTERRUPTED
        if self.interrupted:  # a run that completed around a worker cancelled from outside
            return ExitCode.INTERRUPTED
        return ExitCode.OK

    def to_dict(self) -> dict[str, Any]:
        out = msgspec.structs.asdict(self)
        out["exit_code"] = int(self.exit_code)  # plain data, as every other field
        return out

    def summary(self) -> str:
        c = self.counters
        parts = [
            f"run {self.run_id}: {self.status}" + (f" ({self.stop_reason})" if self.stop_reason else ""),
            f"pipelines: succeeded={c.get('pipelines_succeeded', 0)} failed={c.get('pipelines_failed', 0)}"
            f" interrupted={c.get('pipelines_interrupted', 0)} skipped={c.get('skipped', 0)}",
            f"attempts: total={c.get('attempts', 0)} retries={c.get('retries', 0)}"
            + handoffs_label(c.get("handoffs", 0), handoff_operations(c)),
            f"duration: {self.duration_ms / 1000:.2f}s",
        ]
        if c.get("leases_leaked"):
            parts.append(f"leases leaked: {c['leases_leaked']}")
        if c.get("repair_failures"):
            parts.append(f"repair failures: {c['repair_failures']}")
        if self.producer_error:
            parts.append(f"source error: {self.producer_error}")
        if self.store:
            parts.append(f"store: {self.store}")
        return "\n".join(parts)


def handoff_operations(counters: dict[str, int]) -> dict[str, int]:
    """The run's handoffs by operation (from its counters)."""
    backward = counters.get("rewinds", 0) + counters.get("retry_alls", 0)
    ops = {"forward": counters.get("handoffs", 0) - backward}
    ops.update(rewind=counters.get("rewinds", 0), retry_all=counters.get("retry_alls", 0))
    return {op: n for op, n in ops.items() if n}
