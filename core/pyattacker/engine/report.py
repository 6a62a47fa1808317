"""``RunReport``: what one run did, as returned by ``Runner.run`` and printed by the CLI."""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = ["RunReport"]


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
    def exit_code(self) -> int:
        """0 all done, 1 some failed (or a repair failed), 130 interrupted and resumable."""
        if self.status == "interrupted" and self.stop_reason in ("signal", "cancelled"):
            return 130
        if self.stop_reason in (
            "producer_error",
            "identity_conflict",
            "store_feature_unsupported",
            "store_unavailable",
            "worker_crashed",
        ):
            return 2
        if self.failed or self.repair_failures:
            return 1
        if self.status == "interrupted" and self.stop_reason not in ("stop_after_failures",):
            return 130
        if self.interrupted:  # a run that completed around a worker cancelled from outside
            return 130
        return 0

    def to_dict(self) -> dict[str, Any]:
        out = msgspec.structs.asdict(self)
        out["exit_code"] = self.exit_code
        return out

    def summary(self) -> str:
        c = self.counters
        parts = [
            f"run {self.run_id}: {self.status}" + (f" ({self.stop_reason})" if self.stop_reason else ""),
            f"pipelines: succeeded={c.get('pipelines_succeeded', 0)} failed={c.get('pipelines_failed', 0)}"
            f" interrupted={c.get('pipelines_interrupted', 0)} skipped={c.get('skipped', 0)}",
            f"attempts: total={c.get('attempts', 0)} retries={c.get('retries', 0)}"
            + (f" handoffs={c['handoffs']}" if c.get("handoffs") else ""),
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
