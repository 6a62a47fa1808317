"""Forward handoffs: a task that skips ahead in its own pipeline, declared, checked, resumable.

A task returns ``Handoff.to(target)`` or ``Handoff.end()`` instead of a value. The pipeline's
``control`` declaration says which jumps are allowed; anything else fails the task (never a
silent jump). The declaration is resolved once, at build, into a ``ControlPlan`` of sequence
numbers: the runner checks a directive against it with one dict lookup, and the plan's
fingerprint joins the chain's identity, so changing the allowed jumps is a different pipeline.

Forward jumps go strictly later. The backward tier (``Handoff.rewind`` to a strictly earlier
task, ``Handoff.retry_all`` from the seed; ``pyattacker.flow.backward``) re-enters tasks, so a
pipeline that declares it needs a budget (``max_handoffs``) and counts visits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from pyattacker.errors import FatalError, PipelineBuildError
from pyattacker.flow.backward import BACKWARD_KEYS, BackwardPlan, check_backward

__all__ = ["END", "UNSET", "ControlPlan", "Handoff", "check_control", "resolve_control"]

#: the destination that finishes the pipeline (its value becomes the final artifact)
END: Final = "end"
#: the operations a ``Handoff`` carries
OPERATIONS = ("forward", "rewind", "retry_all")


class _Unset:
    """``value`` not given: the destination receives the input the source task received."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Final = _Unset()


class Handoff:
    """What a task returns to continue its pipeline elsewhere (``to``) or finish it (``end``).

    Returned, never raised. The repr never shows the payload (it may be large or private).
    Final: the runner recognises a directive by its exact type (one test per task's return).
    """

    __slots__ = ("op", "reason", "target", "value")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        raise TypeError("Handoff cannot be subclassed: the runner recognises it by its exact type")

    def __init__(self, target: str | int, value: Any = UNSET, reason: str = "", op: str = "forward") -> None:
        # a task name, the usual target, costs one test (a task may hand off once per seed)
        if type(target) is not str:
            if isinstance(target, bool) or not isinstance(target, str | int):
                raise FatalError(f"Handoff target must be a task name, a seq or 'end', got {target!r}")
            if isinstance(target, int) and target < 0:
                raise FatalError(f"Handoff target seq must be >= 0, got {target}")
        if not target and isinstance(target, str):
            raise FatalError("Handoff target must not be empty")
        if type(reason) is not str and not isinstance(reason, str):
            raise FatalError(f"Handoff reason must be a string, got {type(reason).__name__}")
        if op not in OPERATIONS:
            raise FatalError(f"Handoff operation must be one of {OPERATIONS}, got {op!r}")
        self.target = target
        self.value = value
        self.reason = reason
        self.op = op

    @classmethod
    def to(cls, target: str | int, value: Any = UNSET, reason: str = "") -> Handoff:
        """Continue at ``target`` (a task name, its seq, or ``"end"``) with ``value``, or with
        this task's own input when ``value`` is not given."""
        return cls(target, value, reason)

    @classmethod
    def end(cls, value: Any = UNSET, reason: str = "") -> Handoff:
        """Finish the pipeline now; ``value`` (or this task's input) is its final artifact."""
        return cls(END, value, reason)

    @classmethod
    def rewind(cls, target: str | int, value: Any, reason: str = "") -> Handoff:
        """Go back to ``target``, a strictly earlier task, which runs again (a new visit) with
        ``value`` (explicit: ``None`` is a value); it and its successors rerun."""
        if target == END:
            raise FatalError("Handoff.rewind target must be an earlier task, not 'end'")
        return cls(target, value, reason, "rewind")

    @classmethod
    def retry_all(cls, reason: str = "") -> Handoff:
        """Start the pipeline again at its first task, from the seed decoded afresh."""
        return cls(0, UNSET, reason, "retry_all")

    @property
    def operation(self) -> str:
        return self.op

    @property
    def is_end(self) -> bool:
        return self.target == END

    @property
    def reuses_input(self) -> bool:
        return self.value is UNSET

    def __repr__(self) -> str:
        why = f", reason={self.reason!r}" if self.reason else ""
        if self.op == "retry_all":
            return f"Handoff.retry_all({why[2:]})"
        what = "input" if self.reuses_input else "value"
        name = "to" if self.op == "forward" else self.op
        return f"Handoff.{name}({self.target!r}, <{what}>{why})"


class ControlPlan:
    """The allowed jumps of one chain, by seq: ``edges[source] = destinations`` (``n`` = END)."""

    __slots__ = ("_routes", "back", "edges", "n", "names")

    def __init__(
        self, edges: Mapping[int, Sequence[int]], names: Sequence[str], back: BackwardPlan | None = None
    ) -> None:
        #: the backward declarations (None: forward only)
        self.back = back
        self.n = len(names)
        self.names = tuple(names)
        self.edges: dict[int, frozenset[int]] = {s: frozenset(d) for s, d in sorted(edges.items())}
        #: ``(source, target as a task returns it) -> seq`` of every declared jump, spelled every
        #: way ``destination`` accepts it (a unique name, the seq, "end"): one lookup per jump
        self._routes: dict[tuple[int, str | int], int] = {}
        for source, dests in self.edges.items():
            for seq in dests:
                if seq == self.n:
                    self._routes[source, END] = seq
                    continue
                self._routes[source, seq] = seq
                name = self.names[seq]
                if name != END and self.names.count(name) == 1:
                    self._routes[source, name] = seq

    @property
    def backward(self) -> bool:
        """Whether tasks may re-enter earlier ones (visits and a budget are kept)."""
        return self.back is not None and self.back.any_backward

    @property
    def max_handoffs(self) -> int | None:
        return None if self.back is None else self.back.max_handoffs

    def fingerprint(self) -> list[list[Any]]:
        """Resolved seqs, sorted: how the edges were spelled does not change the identity."""
        out: list[list[Any]] = [[s, sorted(d)] for s, d in self.edges.items()]
        back = self.back
        if back is not None and (back.any_backward or back.max_handoffs is not None):
            out.append(
                [
                    "backward",
                    [[s, sorted(t)] for s, t in back.rewind.items()],
                    sorted(back.retry_all),
                    back.max_handoffs,
                ]
            )
        return out

    def describe(self) -> dict[str, Any]:
        """The effective declaration: names where they are unique, seqs for repeated or reserved ones."""
        out: dict[str, Any] = {}
        if self.edges:
            out["edges"] = {
                self._label(s): [END if d == self.n else self._label(d) for d in sorted(ds)]
                for s, ds in self.edges.items()
            }
        back = self.back
        if back is not None:
            if back.rewind:
                out["rewind"] = {
                    self._label(s): [self._label(t) for t in sorted(ts)] for s, ts in back.rewind.items()
                }
            if back.retry_all:
                out["retry_all"] = [self._label(s) for s in sorted(back.retry_all)]
            if back.max_handoffs is not None:
                out["max_handoffs"] = back.max_handoffs
        return out

    def _label(self, seq: int) -> str | int:
        name = self.names[seq]
        return seq if name == END or self.names.count(name) > 1 else name

    def destination(self, source: int, handoff: Handoff) -> int:
        """The seq ``handoff`` leads to from task ``source`` (``n`` for END), or ``FatalError``
        when the target is unknown, ambiguous or not a declared edge (or backward move)."""
        target = handoff.target
        if handoff.op != "forward":
            return self._backward(source, handoff)
        seq = self._routes.get((source, target))
        if seq is not None:
            return seq
        here = f"task {self.names[source]!r} (seq {source})"
        if target == END:
            seq = self.n
        elif isinstance(target, int):
            if target >= self.n:
                raise FatalError(f"{here} handed off to seq {target}, outside the chain's {self.n} tasks")
            seq = target
        else:
            seqs = [i for i, name in enumerate(self.names) if name == target]
            if not seqs:
                raise FatalError(f"{here} handed off to {target!r}, which is no task of the pipeline")
            if len(seqs) > 1:
                raise FatalError(f"{here} handed off to {target!r}, a name the chain repeats (seqs {seqs})")
            seq = seqs[0]
        allowed = self.edges.get(source)
        if allowed is None or seq not in allowed:
            declared = self.describe()["edges"].get(self._label(source), [])
            to = "end" if seq == self.n else f"{self.names[seq]!r} (seq {seq})"
            raise FatalError(
                f"{here} handed off to {to}, which pipeline.control.edges does not declare"
                f" (declared from it: {declared or 'nothing'})"
            )
        return seq

    def _backward(self, source: int, handoff: Handoff) -> int:
        """The target of a rewind or retry-all from ``source``, or ``FatalError`` naming the
        undeclared move."""
        here = f"task {self.names[source]!r} (seq {source})"
        back = self.back
        if handoff.op == "retry_all":
            if back is None or source not in back.retry_all:
                raise FatalError(
                    f"{here} returned Handoff.retry_all(), which pipeline.control.retry_all does not"
                    " declare for it"
                )
            return 0
        target = handoff.target
        if isinstance(target, int):
            if target >= self.n:
                raise FatalError(f"{here} rewound to seq {target}, outside the chain's {self.n} tasks")
            seq = target
        else:
            seqs = [i for i, name in enumerate(self.names) if name == target]
            if len(seqs) != 1:
                why = (
                    "which is no task of the pipeline"
                    if not seqs
                    else f"a name the chain repeats (seqs {seqs})"
                )
                raise FatalError(f"{here} rewound to {target!r}, {why}")
            seq = seqs[0]
        allowed = None if back is None else back.rewind.get(source)
        if allowed is None or seq not in allowed:
            declared = [self._label(t) for t in sorted(allowed or ())]
            raise FatalError(
                f"{here} rewound to {self.names[seq]!r} (seq {seq}), which pipeline.control.rewind"
                f" does not declare (declared from it: {declared or 'nothing'})"
            )
        return seq


def check_control(data: Any, names: Sequence[str], path: str, errors: list[str]) -> ControlPlan | None:
    """Validate a ``control`` declaration against the chain's task ``names``; every problem is
    appended to ``errors`` with its field path (``pipeline.control.edges['judge'][0]``)."""
    if not isinstance(data, Mapping):
        errors.append(f"{path}: must be a mapping with an 'edges' key, got {type(data).__name__}")
        return None
    start = len(errors)
    for key in data:
        if key != "edges" and key not in BACKWARD_KEYS:
            errors.append(f"{path}.{key}: unknown field (expected: edges, rewind, retry_all, max_handoffs)")
    back = check_backward(data, names, path, errors, _source_seq)
    edges = data.get("edges")
    if edges is None and (back.any_backward or "max_handoffs" in data):
        edges = {}
    elif not isinstance(edges, Mapping) or not edges:
        errors.append(f"{path}.edges: must be a non-empty mapping of source task -> [destinations]")
        return None
    resolved: dict[int, list[int]] = {}
    spelled: dict[int, Any] = {}
    for raw_source, raw_dests in edges.items():
        where = f"{path}.edges[{raw_source!r}]"
        source = _source_seq(raw_source, names, where, errors)
        if source is None:
            continue
        if source in resolved:
            errors.append(
                f"{where}: declares seq {source} ({names[source]!r}) again, already declared as"
                f" {spelled[source]!r}; give each source once"
            )
            continue
        spelled[source] = raw_source
        resolved[source] = _destinations(raw_dests, source, names, where, errors)
    if len(errors) > start:
        return None
    has_back = back.any_backward or back.max_handoffs is not None
    return ControlPlan(resolved, names, back if has_back else None)


def resolve_control(data: Any, names: Sequence[str], path: str = "control") -> ControlPlan:
    """``check_control`` for Python callers: raises ``PipelineBuildError`` listing every problem."""
    errors: list[str] = []
    plan = check_control(data, names, path, errors)
    if plan is None:
        raise PipelineBuildError("invalid control declaration:\n  " + "\n  ".join(errors))
    return plan


def _seqs_named(name: str, names: Sequence[str]) -> list[int]:
    return [i for i, n in enumerate(names) if n == name]


def _source_seq(raw: Any, names: Sequence[str], where: str, errors: list[str]) -> int | None:
    """A source key: an exact task name first, then a seq (an int, or digits: JSON and TOML keys
    are strings)."""
    n = len(names)
    if isinstance(raw, str):
        seqs = _seqs_named(raw, names)
        if len(seqs) == 1 and raw != END:
            return seqs[0]
        if len(seqs) > 1:
            errors.append(f"{where}: task name {raw!r} is repeated in the chain (seqs {seqs}); give the seq")
            return None
        if raw.isascii() and raw.isdigit():  # not str.isdigit alone: "²" and "٣" are digits too
            if len(raw.lstrip("0")) > len(str(n)):  # int() of thousands of digits raises
                errors.append(f"{where}: seq {raw} is outside the chain's {n} tasks (0..{n - 1})")
                return None
            raw = int(raw)
        elif raw == END:
            errors.append(f"{where}: 'end' is the reserved destination, not a source; name a task by its seq")
            return None
        else:
            errors.append(f"{where}: no task is named {raw!r} (tasks: {', '.join(names)})")
            return None
    if isinstance(raw, bool) or not isinstance(raw, int):
        errors.append(f"{where}: a source is a task name or a seq, got {type(raw).__name__}")
        return None
    if not 0 <= raw < n:
        errors.append(f"{where}: seq {raw} is outside the chain's {n} tasks (0..{n - 1})")
        return None
    return raw


def _destinations(raw: Any, source: int, names: Sequence[str], where: str, errors: list[str]) -> list[int]:
    n = len(names)
    if not isinstance(raw, list | tuple) or not raw:
        errors.append(f"{where}: must be a non-empty list of destinations (task names, seqs or 'end')")
        return []
    out: list[int] = []
    for i, dest in enumerate(raw):
        at = f"{where}[{i}]"
        seq: int | None
        if dest == END:
            if source == n - 1:
                errors.append(
                    f"{at}: 'end' from the last task {names[source]!r} means nothing (it ends anyway)"
                )
                continue
            seq = n
        elif isinstance(dest, str):
            seqs = _seqs_named(dest, names)
            if len(seqs) != 1:
                why = f"is repeated in the chain (seqs {seqs}); give the seq" if seqs else "names no task"
                errors.append(f"{at}: destination {dest!r} {why}")
                continue
            seq = seqs[0]
        elif isinstance(dest, int) and not isinstance(dest, bool):
            if not 0 <= dest < n:
                errors.append(f"{at}: seq {dest} is outside the chain's {n} tasks (0..{n - 1})")
                continue
            seq = dest
        else:
            errors.append(f"{at}: a destination is a task name, a seq or 'end', got {type(dest).__name__}")
            continue
        if seq <= source:
            errors.append(
                f"{at}: destination {names[seq]!r} (seq {seq}) is not later than the source"
                f" {names[source]!r} (seq {source}); v1 handoffs are forward-only"
            )
            continue
        if seq not in out:
            out.append(seq)
    return out
