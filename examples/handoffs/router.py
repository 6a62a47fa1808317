"""Tasks of ``config.yaml``: a cached answer skips the model and the judge; an out-of-scope
question ends its pipeline at once. Run it from this folder:

    PYTHONPATH=. pyattacker run -c config.yaml
"""

from __future__ import annotations

from typing import Any

from pyattacker import Handoff, task

#: answers already known (a real pipeline would read a cache keyed by the question)
CACHE = {0: "four", 2: "paris"}


@task
def fetch(seed: dict[str, int]) -> dict[str, Any]:
    return {"i": seed["i"], "question": f"question {seed['i']}"}


@task
def lookup(q: dict[str, Any]) -> Any:
    if q["i"] in CACHE:  # no model call and nothing to judge: straight to the report
        return Handoff.to("report", {**q, "answer": CACHE[q["i"]], "cached": True}, reason="cache hit")
    if q["i"] % 5 == 4:  # nothing to ask: this value is the pipeline's result
        return Handoff.end({**q, "answer": None, "skipped": True}, reason="out of scope")
    return q


@task
def ask(q: dict[str, Any]) -> dict[str, Any]:
    return {**q, "answer": f"answer {q['i']}", "cached": False}


@task
def judge(a: dict[str, Any]) -> dict[str, Any]:
    return {**a, "score": 1.0}


@task
def report(a: dict[str, Any]) -> dict[str, Any]:
    return {"i": a["i"], "answer": a["answer"], "cached": a["cached"], "score": a.get("score")}
