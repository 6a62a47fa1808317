"""Pool rate limits against a provider that counts requests per minute and answers 429.

A simulated provider per key counts the requests it admitted in a sliding 60 s window; a request
over its rpm gets a 429 with Retry-After (when the oldest admitted request leaves the window).
Workers lease a key from one pool and call it; a 429 is retried after the server's delay. The
same workload runs twice on the virtual clock: with capacity caps alone, and with each key's
``limits: {rpm: ...}`` declared on its resource. Prints ONE JSON line: per mode, the requests
answered ok per minute against the keys' combined limit, and the 429s.

    python benchmarks/rate_limits.py --minutes 10 --workers 48
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections import deque
from typing import Any

from pyattacker import Pool, Resource, RetryableError, VirtualClock

#: the keys: (id, rpm the provider allows)
KEYS = (("key-a", 120.0), ("key-b", 60.0), ("key-c", 30.0))
#: how long one call takes (simulated seconds)
CALL_S = 0.5


class _Provider:
    """One key's server side: at most ``rpm`` admitted requests in any 60 s window."""

    def __init__(self, rpm: float) -> None:
        self.rpm = rpm
        self.admitted: deque[float] = deque()
        self.refused = 0

    def admit(self, now: float) -> float | None:
        """None when admitted, else the Retry-After in seconds."""
        while self.admitted and self.admitted[0] + 60.0 <= now:
            self.admitted.popleft()
        if len(self.admitted) < self.rpm:
            self.admitted.append(now)
            return None
        self.refused += 1
        return self.admitted[0] + 60.0 - now


async def _workload(clock: VirtualClock, limited: bool, minutes: float, workers: int) -> dict[str, Any]:
    providers = {rid: _Provider(rpm) for rid, rpm in KEYS}
    pool = Pool(
        "llm",
        [Resource("llm", id=rid, capacity=16, limits={"rpm": rpm} if limited else None) for rid, rpm in KEYS],
        clock=clock,
    )
    ok = 0
    end = minutes * 60.0

    async def worker() -> None:
        nonlocal ok
        while clock.now() < end:
            try:
                async with await pool.acquire(algorithm="least_busy") as lease:
                    after = providers[lease.resource.id].admit(clock.now())
                    if after is not None:
                        raise RetryableError("429", error_class="rate_limit", retry_after=after)
                    await clock.sleep(CALL_S)
                    if clock.now() <= end:
                        ok += 1
            except RetryableError:
                continue

    await asyncio.gather(*(worker() for _ in range(workers)))
    combined = sum(rpm for _, rpm in KEYS)
    per_minute = ok / minutes
    return {
        "ok_per_minute": round(per_minute, 2),
        "of_combined_limit": round(per_minute / combined, 4),
        "refused_429": sum(p.refused for p in providers.values()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=48)
    args = parser.parse_args()
    out: dict[str, Any] = {"keys": dict(KEYS), "minutes": args.minutes, "workers": args.workers}
    for mode, limited in (("capacity_only", False), ("rate_limits", True)):
        clock = VirtualClock()
        with asyncio.Runner(loop_factory=clock.new_event_loop) as runner:
            out[mode] = runner.run(_workload(clock, limited, args.minutes, args.workers))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
