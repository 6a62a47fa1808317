"""The backward tier of ``control``: which tasks may rewind or retry-all, and the budget.

``rewind: {source: [strictly earlier targets]}``, ``retry_all: [sources]`` and ``max_handoffs``
(a positive int, required once a backward move is declared: a loop without a bound could run
forever). Resolved into seqs next to the forward edges; every problem is reported with its field
path, in ``validate`` and ``run`` alike (both go through ``check_control``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["BACKWARD_KEYS", "BackwardPlan", "check_backward"]

#: keys of ``control`` that declare backward traversal
BACKWARD_KEYS = ("rewind", "retry_all", "max_handoffs")

SourceOf = Callable[[Any, Sequence[str], str, list[str]], "int | None"]


class BackwardPlan:
    """Resolved backward declarations: ``rewind[source]`` = allowed targets, ``retry_all`` =
    sources allowed to restart from the seed, ``max_handoffs`` = the pipeline's budget."""

    __slots__ = ("max_handoffs", "retry_all", "rewind")

    def __init__(
        self, rewind: Mapping[int, Sequence[int]], retry_all: Sequence[int], max_handoffs: int | None
    ) -> None:
        self.rewind: dict[int, frozenset[int]] = {s: frozenset(t) for s, t in sorted(rewind.items())}
        self.retry_all = frozenset(retry_all)
        self.max_handoffs = max_handoffs

    @property
    def any_backward(self) -> bool:
        return bool(self.rewind or self.retry_all)


def check_backward(
    data: Mapping[str, Any], names: Sequence[str], path: str, errors: list[str], source_of: SourceOf
) -> BackwardPlan:
    """Validate the backward keys of ``data`` (a ``control`` mapping); problems go to ``errors``."""
    rewind: dict[int, list[int]] = {}
    raw_rewind = data.get("rewind")
    if raw_rewind is not None:
        if not isinstance(raw_rewind, Mapping) or not raw_rewind:
            errors.append(f"{path}.rewind: must be a non-empty mapping of source task -> [earlier targets]")
        else:
            spelled: dict[int, Any] = {}
            for raw_source, raw_targets in raw_rewind.items():
                where = f"{path}.rewind[{raw_source!r}]"
                source = source_of(raw_source, names, where, errors)
                if source is None:
                    continue
                if source in rewind:
                    errors.append(
                        f"{where}: declares seq {source} ({names[source]!r}) again, already declared as"
                        f" {spelled[source]!r}; give each source once"
                    )
                    continue
                spelled[source] = raw_source
                rewind[source] = _targets(raw_targets, source, names, where, errors)
    retry: list[int] = []
    raw_retry = data.get("retry_all")
    if raw_retry is not None:
        if not isinstance(raw_retry, list | tuple) or not raw_retry:
            errors.append(f"{path}.retry_all: must be a non-empty list of source tasks")
        else:
            for i, raw_source in enumerate(raw_retry):
                where = f"{path}.retry_all[{i}]"
                source = source_of(raw_source, names, where, errors)
                if source is None:
                    continue
                if source in retry:
                    errors.append(f"{where}: seq {source} ({names[source]!r}) is listed twice")
                    continue
                retry.append(source)
    budget = _budget(data, path, errors, bool(raw_rewind is not None or raw_retry is not None))
    return BackwardPlan(rewind, retry, budget)


def _budget(data: Mapping[str, Any], path: str, errors: list[str], backward: bool) -> int | None:
    if "max_handoffs" not in data:
        if backward:
            errors.append(
                f"{path}.max_handoffs: required once rewind or retry_all is declared (a positive"
                " integer bounding the handoffs of one traversal)"
            )
        return None
    value = data["max_handoffs"]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        errors.append(f"{path}.max_handoffs: must be a positive integer, got {value!r}")
        return None
    return value


def _targets(raw: Any, source: int, names: Sequence[str], where: str, errors: list[str]) -> list[int]:
    n = len(names)
    if not isinstance(raw, list | tuple) or not raw:
        errors.append(f"{where}: must be a non-empty list of earlier targets (task names or seqs)")
        return []
    out: list[int] = []
    for i, target in enumerate(raw):
        at = f"{where}[{i}]"
        seq: int
        if isinstance(target, str):
            seqs = [k for k, name in enumerate(names) if name == target]
            if target == "end" and not seqs:
                errors.append(f"{at}: 'end' is no rewind target (rewind goes to an earlier task)")
                continue
            if len(seqs) != 1:
                why = f"is repeated in the chain (seqs {seqs}); give the seq" if seqs else "names no task"
                errors.append(f"{at}: target {target!r} {why}")
                continue
            seq = seqs[0]
        elif isinstance(target, int) and not isinstance(target, bool):
            if not 0 <= target < n:
                errors.append(f"{at}: seq {target} is outside the chain's {n} tasks (0..{n - 1})")
                continue
            seq = target
        else:
            errors.append(f"{at}: a rewind target is a task name or a seq, got {type(target).__name__}")
            continue
        if seq >= source:
            errors.append(
                f"{at}: target {names[seq]!r} (seq {seq}) is not earlier than the source"
                f" {names[source]!r} (seq {source}); rewind goes strictly backward"
            )
            continue
        if seq not in out:
            out.append(seq)
    return out
