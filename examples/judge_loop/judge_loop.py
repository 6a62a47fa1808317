"""Tasks of ``config.yaml``: a judge that sends a weak answer back to be asked again, with its
feedback, at most ``max_handoffs`` times. Run it from this folder:

    PYTHONPATH=. pyattacker run -c config.yaml
"""

from __future__ import annotations

from typing import Any

from pyattacker import Handoff, task


@task
def fetch(seed: dict[str, int]) -> dict[str, Any]:
    return {"i": seed["i"], "question": f"question {seed['i']}"}


@task
def ask(q: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """A stand-in for a model call: each visit (a new try after the judge's feedback) answers
    better; ``ctx.history()`` holds the answers of the earlier tries."""
    tries = len(ctx.history())
    return {**q, "answer": f"answer {q['i']} (try {ctx.visit})", "quality": tries, "feedback": None}


@task
def judge(a: dict[str, Any], ctx: Any) -> Any:
    """Good enough once the quality reaches ``i % 3``; else back to ``ask`` with feedback."""
    if a["quality"] < a["i"] % 3:
        feedback = {**a, "feedback": f"try {ctx.visit} was too vague"}
        return Handoff.rewind("ask", feedback, reason="answer too weak")
    return {**a, "score": 1.0}


@task
def report(a: dict[str, Any]) -> dict[str, Any]:
    return {"question": a["question"], "answer": a["answer"], "tries": a["quality"] + 1}
