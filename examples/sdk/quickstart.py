"""Quick start with the Python SDK: a three-step pipeline against a pool of two endpoints.

Run it twice: the second run skips everything (every answer is already in the store).
    python examples/sdk/quickstart.py /tmp/quickstart.db
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from pyattacker import Pool, Resource, RetryableError, Runner, pipeline, task


@task
def prepare(row: dict[str, Any]) -> str:
    return f"What is {row['a']} + {row['b']}?"


@task(resource="llm", retry={"max_attempts": 3, "base": 0.01})
async def ask(prompt: str, ctx: Any) -> dict[str, Any]:
    async with ctx.acquire() as lease:  # one slot of one endpoint; always returned
        await asyncio.sleep(0.001)  # your HTTP call goes here
        if ctx.rng.random() < 0.2:  # a seeded, reproducible "flaky endpoint"
            lease.report(ok=False)
            raise RetryableError("503 from upstream")
        lease.report(ok=True, latency_ms=1, usage={"tokens": 12})
        ctx.record(tokens=12)
        return {"prompt": prompt, "answer": prompt.count("1")}


@task
def judge(reply: dict[str, Any]) -> dict[str, Any]:
    return {**reply, "ok": reply["answer"] >= 0}


def main(store: str) -> int:
    pools = [Pool("llm", [Resource.create("llm", id=f"endpoint-{i}", capacity=4) for i in range(2)])]
    qa = pipeline("qa", prepare, ask, judge)
    seeds = ({"a": i, "b": i + 1} for i in range(200))
    with Runner(store=store, pools=pools, concurrency=8) as runner:
        report = runner.run(qa.map(seeds))
    print(report.summary())
    return report.exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "quickstart.db"))
