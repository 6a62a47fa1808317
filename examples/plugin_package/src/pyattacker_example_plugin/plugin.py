"""A task (``reverse_text``) and an acquisition algorithm (``random_pick``) for pyattacker.

Use them from a config::

    pipeline:
      tasks:
        - use: reverse_text
        - { use: word_count }
    pools:
      apis: { algorithm: random_pick, resources: [{id: a}, {id: b}] }
"""

from __future__ import annotations

import random
from typing import Any

from pyattacker import hookimpl, task


@task(name="reverse_text")
def reverse_text(value: Any) -> str:
    return str(value)[::-1]


@task(name="word_count")
def word_count(value: Any) -> int:
    return len(str(value).split())


class RandomPick:
    """Lease a random free resource; wait (the built-in way) when none is free."""

    name = "random_pick"

    def __init__(self, seed: int | None = None) -> None:
        self.seed = seed

    async def acquire(self, pool: Any, *, ctx: Any, where: Any, timeout: Any, selector: Any) -> Any:
        rng = getattr(ctx, "rng", None) or random.Random(self.seed)
        lease = pool.try_acquire(ctx, where=where, score=lambda r: rng.random(), **(selector or {}))
        if lease is not None:
            return lease
        return await pool.acquire(ctx, algorithm="wait", timeout=timeout, where=where, **(selector or {}))

    def fingerprint(self) -> dict[str, Any]:
        return {"name": self.name, "seed": self.seed}


@hookimpl
def pyattacker_tasks(register: Any) -> None:
    register("reverse_text", reverse_text)


@hookimpl
def pyattacker_algorithms(register: Any) -> None:
    register("random_pick", RandomPick)
