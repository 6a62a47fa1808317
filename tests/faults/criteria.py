"""The criteria: structural invariants judged on evidence gathered outside the library.

Each returns a ``Verdict`` with one of three statuses. The third one is not a polite "passed":
a criterion that had nothing to examine (no committed history, nothing durable at crash time,
a fault that never fired) says so as ``undetermined``, because a vacuous pass is exactly the
green that hides a harness which tested nothing. Evidence is mandatory, for passes too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

PASSED = "passed"
BREACHED = "breached"
UNDETERMINED = "undetermined"
STATUSES = (PASSED, BREACHED, UNDETERMINED)


@dataclass(frozen=True, slots=True)
class Verdict:
    """One criterion's verdict and the evidence it rests on (never empty)."""

    name: str
    status: str
    evidence: str

    def __post_init__(self) -> None:
        if not self.name.strip():
            raise ValueError("a verdict needs a name")
        if self.status not in STATUSES:
            raise ValueError(f"verdict {self.name!r}: status must be one of {STATUSES}, got {self.status!r}")
        if not self.evidence.strip():
            raise ValueError(f"verdict {self.name!r} has no evidence")

    def describe(self) -> str:
        return f"[{self.status}] {self.name}: {self.evidence}"


def passed(name: str, evidence: str) -> Verdict:
    return Verdict(name, PASSED, evidence)


def breached(name: str, evidence: str) -> Verdict:
    return Verdict(name, BREACHED, evidence)


def undetermined(name: str, evidence: str) -> Verdict:
    return Verdict(name, UNDETERMINED, evidence)


def _sample(items: Iterable[Any], k: int = 5) -> str:
    items = list(items)
    head = ", ".join(str(x) for x in items[:k])
    return head + (f" (+{len(items) - k} more)" if len(items) > k else "")


# -- committed history -------------------------------------------------------------------------------
def committed_prefix_preserved(name: str, crashed_prefix: bytes, final: bytes) -> Verdict:
    """JSONL: the bytes up to the last commit marker at crash time start the final file.

    Bytes, not parsed rows: the promise is that history is never rewritten, reformatted or
    back-filled, and only a byte comparison sees all three. The uncommitted tail is excluded:
    it was never acknowledged, and the writer truncates it before appending.
    """
    if not crashed_prefix:
        return undetermined(
            name, "no commit marker in the journal at crash time: no committed bytes to compare"
        )
    if len(final) < len(crashed_prefix):
        return breached(
            name,
            f"final journal has {len(final)} bytes, fewer than the {len(crashed_prefix)} committed "
            "at crash time",
        )
    head = final[: len(crashed_prefix)]
    if head != crashed_prefix:
        offset = next(i for i, (a, b) in enumerate(zip(crashed_prefix, head, strict=True)) if a != b)
        return breached(
            name,
            f"committed byte {offset} of {len(crashed_prefix)} differs after resume "
            f"(crash: {crashed_prefix[offset : offset + 60]!r}, final: {head[offset : offset + 60]!r})",
        )
    return passed(
        name, f"{len(crashed_prefix)} committed bytes identical after resume (final file {len(final)} bytes)"
    )


def rows_preserved(
    name: str, crashed: Mapping[Any, tuple[Any, ...]], final: Mapping[Any, tuple[Any, ...]], what: str
) -> Verdict:
    """SQLite: every appended row present at crash time is present, unchanged, after resume."""
    if not crashed:
        return undetermined(name, f"no {what} rows were committed at crash time: nothing to compare")
    missing = [k for k in crashed if k not in final]
    changed = [k for k in crashed if k in final and final[k] != crashed[k]]
    if missing or changed:
        return breached(
            name,
            f"of {len(crashed)} {what} rows committed at crash time, {len(missing)} are gone "
            f"(ids {_sample(missing)}) and {len(changed)} changed (ids {_sample(changed)})",
        )
    return passed(
        name,
        f"{len(crashed)} {what} rows committed at crash time are identical after resume "
        f"(ids {min(crashed)}..{max(crashed)}; {len(final)} rows now)",
    )


def artifacts_preserved(
    name: str, crashed: Mapping[str, tuple[str, str | None]], final: Mapping[str, tuple[str, str | None]]
) -> Verdict:
    """Artifacts present at crash time keep their digest and their bytes (hashed by us).

    The values are ``(recorded digest, digest of the bytes we read ourselves)``; a file-backed
    artifact whose blob vanished reads as ``None`` and counts as changed.
    """
    if not crashed:
        return undetermined(name, "no artifact was committed at crash time: nothing to compare")
    missing = [k for k in crashed if k not in final]
    changed = [k for k in crashed if k in final and final[k] != crashed[k]]
    unreadable = [k for k, (_, actual) in crashed.items() if actual is None]
    wrong = [k for k, (recorded, actual) in final.items() if k in crashed and actual != recorded]
    if missing or changed or wrong:
        return breached(
            name,
            f"of {len(crashed)} artifacts committed at crash time: {len(missing)} missing "
            f"({_sample(missing)}), {len(changed)} changed ({_sample(changed)}), "
            f"{len(wrong)} whose bytes no longer match their digest ({_sample(wrong)})",
        )
    note = f"; {len(unreadable)} had no readable bytes at crash time" if unreadable else ""
    return passed(
        name, f"{len(crashed)} artifacts committed at crash time keep digest and bytes after resume{note}"
    )


# -- the audit ledger ----------------------------------------------------------------------------------
def no_replay(
    name: str, durable: set[tuple[str, int]], after_crash: Sequence[tuple[str, int, int]], crash_mark: int
) -> Verdict:
    """No task whose artifact was durable at crash time appears in the ledger after the crash."""
    if not durable:
        return undetermined(
            name, "no task artifact was durable at crash time: a replay is impossible to observe"
        )
    replays = [(pid, seq, att) for pid, seq, att in after_crash if (pid, seq) in durable]
    if replays:
        return breached(
            name,
            f"{len(replays)} execution(s) after the crash (ledger line > {crash_mark}) of tasks "
            f"whose artifact was durable at crash time: {_sample(replays)}",
        )
    return passed(
        name,
        f"{len(durable)} durable tasks at crash time; {len(after_crash)} executions after ledger "
        f"line {crash_mark}, none of them a durable task",
    )


def at_most_one_lost(name: str, lost: Mapping[str, int]) -> Verdict:
    """A crash costs at most one task per pipeline: re-executed non-durable work is bounded.

    ``lost`` maps a pipeline to the number of its tasks that were executed before the crash,
    were not durable, and had to run again. More than one means work past the in-flight task
    was thrown away.
    """
    if not lost:
        return undetermined(name, "no pipeline re-executed a task it had started before the crash")
    worst = max(lost.values())
    if worst > 1:
        bad = sorted(k for k, v in lost.items() if v > 1)
        return breached(name, f"{len(bad)} pipeline(s) lost more than one task: {_sample(bad)} (max {worst})")
    return passed(name, f"{len(lost)} pipeline(s) re-ran their in-flight task; none lost more than one task")


# -- final state ---------------------------------------------------------------------------------------
def all_terminal(name: str, states: Mapping[str, str], expected: int) -> Verdict:
    """After resume every pipeline is succeeded or failed and their number is the dataset size."""
    if not states:
        return breached(name, f"no pipeline rows at all (expected {expected})")
    open_ = {k: v for k, v in states.items() if v not in ("succeeded", "failed")}
    by_state: dict[str, int] = {}
    for v in states.values():
        by_state[v] = by_state.get(v, 0) + 1
    if open_ or len(states) != expected:
        return breached(
            name,
            f"{len(states)} pipeline rows (expected {expected}), by state {by_state}; "
            f"not terminal: {_sample(sorted(open_.items()))}",
        )
    return passed(name, f"{expected} pipeline rows, all terminal: {by_state}")


def finals_complete(
    name: str, succeeded: Iterable[str], artifacts: Mapping[str, set[int]], n_tasks: int
) -> Verdict:
    """Every succeeded pipeline holds an artifact for each of its tasks (the checkpoint chain)."""
    succeeded = list(succeeded)
    if not succeeded:
        return undetermined(name, "no succeeded pipeline to check")
    want = set(range(n_tasks))
    short = [pid for pid in succeeded if not want <= artifacts.get(pid, set())]
    if short:
        return breached(name, f"{len(short)} succeeded pipeline(s) miss task artifacts: {_sample(short)}")
    return passed(name, f"{len(succeeded)} succeeded pipelines each hold artifacts for seq 0..{n_tasks - 1}")


def no_lease_held(name: str, active: int | None, leaked: int | None) -> Verdict:
    """At the end of the run the pool has no active lease (and none was reclaimed as leaked)."""
    if active is None:
        return undetermined(name, "the child reported no pool statistics")
    if active != 0 or leaked:
        return breached(name, f"pool active leases {active}, leaked {leaked}")
    return passed(name, f"pool active leases 0, leaked {leaked or 0}")


def equals(name: str, observed: Any, expected: Any, source: str) -> Verdict:
    """A value read from ``source`` is the one expected (stop reason, status, exit code...)."""
    if observed is None and expected is not None:
        return undetermined(name, f"{source} gave no value (expected {expected!r})")
    if observed != expected:
        return breached(name, f"{source} says {observed!r}, expected {expected!r}")
    return passed(name, f"{source} says {observed!r}")


def rows_untouched(name: str, before: Mapping[str, Any], after: Mapping[str, Any], what: str) -> Verdict:
    """Rows of a refused pipeline are unchanged (a running row may only become interrupted)."""
    if not before:
        return undetermined(name, f"no {what} rows existed before the refused run")
    diffs = [k for k in before if after.get(k) != before[k]]
    if diffs:
        return breached(
            name,
            f"{len(diffs)} of {len(before)} {what} rows changed by the refused run: "
            f"{_sample((k, before[k], after.get(k)) for k in diffs)}",
        )
    return passed(name, f"{len(before)} {what} rows identical before and after the refused run")


#: how long past ``stop_after_s`` a run may still end without stopping (the timer runs on a busy
#: event loop, and the run's final flush follows its last pipeline) before it counts as a breach
STOP_SLACK_MS = 2000.0


def stop_fired(name: str, report: Mapping[str, Any], want: str, limit_ms: float | None = None) -> Verdict:
    """A ``stop_after_*`` limit ended the run, judged on the ``RunReport``.

    A run that completed every pipeline before the limit was reached had nothing to stop: that is
    ``undetermined`` (the stop criteria examined nothing), with the run's duration and counts as
    evidence. A run that went on well past a time limit without stopping is a breach.
    """
    if not report:
        return undetermined(name, "the child returned no RunReport")
    reason, status = report.get("stop_reason"), report.get("status")
    if reason == want:
        return passed(name, f"RunReport.stop_reason says {reason!r} (status {status!r})")
    if reason is not None or status != "completed":
        return breached(name, f"RunReport says status {status!r}, stop_reason {reason!r}; expected {want!r}")
    counters = report.get("counters") or {}
    done = f"succeeded={counters.get('pipelines_succeeded', 0)} failed={counters.get('pipelines_failed', 0)}"
    duration = float(report.get("duration_ms") or 0.0)
    if limit_ms is not None and duration > limit_ms + STOP_SLACK_MS:
        return breached(
            name,
            f"the run lasted {duration:.0f} ms, past the {limit_ms:.0f} ms limit, and never stopped ({done})",
        )
    limit = f"the {limit_ms:.0f} ms limit" if limit_ms is not None else "its limit"
    return undetermined(
        name, f"the run completed ({done}) in {duration:.0f} ms, before {limit} fired: no stop to judge"
    )


def fault_fired(name: str, fired: bool, evidence: str) -> Verdict:
    """The fault was actually injected (else every crash criterion examined a clean run)."""
    return (passed if fired else undetermined)(name, evidence)


__all__ = [
    "BREACHED",
    "PASSED",
    "STATUSES",
    "UNDETERMINED",
    "Verdict",
    "all_terminal",
    "artifacts_preserved",
    "at_most_one_lost",
    "breached",
    "committed_prefix_preserved",
    "equals",
    "fault_fired",
    "finals_complete",
    "no_lease_held",
    "no_replay",
    "passed",
    "rows_preserved",
    "rows_untouched",
    "stop_fired",
    "undetermined",
]
