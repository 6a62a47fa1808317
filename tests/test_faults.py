"""CI mode of the fault-injection harness: a representative matrix of crashes, stops and drift.

Each scenario crashes or stops a real child process against a real store (sqlite / jsonl,
inline / file artifacts), resumes it, and judges the promises with evidence read outside the
library (see ``tests/faults``). A breached criterion fails the test; an undetermined one is
reported with ``warnings.warn`` (shown in pytest's warnings summary), never counted as a pass.
The long randomized soak is ``python -m tests.faults --soak N`` (see docs/reliability.md).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

from tests.faults import criteria as C
from tests.faults.harness import Scenario, ci_matrix, run_scenario


class UndeterminedCriterion(UserWarning):
    """A criterion that examined nothing (shown in the summary, not a failure)."""


@pytest.mark.parametrize("scenario", ci_matrix(), ids=lambda sc: sc.name)
def test_fault_scenario(scenario: Scenario, tmp_path_factory: pytest.TempPathFactory) -> None:
    # a shared parent directory lets calibration runs be reused across scenarios, and across the
    # parallel workers of this session (each has its own basetemp in the session's, which a
    # --basetemp given again keeps: the folder is named after this session's run id)
    base = tmp_path_factory.getbasetemp()
    run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    root = base.parent / f"faults-{run_id}" if run_id else base / "faults"
    outcome = run_scenario(
        scenario, root / scenario.name.replace("/", "_").replace(":", "_").replace("@", "_")
    )
    for verdict in outcome.undetermined:
        warnings.warn(f"{scenario.name}: {verdict.describe()}", UndeterminedCriterion, stacklevel=1)
    assert outcome.verdicts, "the scenario produced no verdict at all"
    assert not outcome.breaches, outcome.render()


def test_fault_fires_in_every_crash_kind(tmp_path: Path) -> None:
    """The crash matrix really crashed: a harness whose faults never fire proves nothing."""
    outcome = run_scenario(
        Scenario("crash", "sqlite", "inline", kind="checkpoint", occurrence=3, pipelines=40), tmp_path / "s"
    )
    fired = [v for v in outcome.verdicts if v.name == "fault_fired"]
    assert fired and fired[0].status == C.PASSED, outcome.render()
    assert outcome.crashes == 1 and outcome.resumes == 1


def test_verdict_requires_evidence() -> None:
    with pytest.raises(ValueError):
        C.Verdict("x", C.PASSED, "  ")
    with pytest.raises(ValueError):
        C.Verdict("x", "green", "because")


def test_criteria_catch_what_they_guard() -> None:
    """Each criterion breaches on a fabricated violation and is undetermined on empty input."""
    assert C.committed_prefix_preserved("h", b"a\n", b"b\nc\n").status == C.BREACHED
    assert C.committed_prefix_preserved("h", b"", b"x").status == C.UNDETERMINED
    assert C.committed_prefix_preserved("h", b"a\n", b"a\nb\n").status == C.PASSED
    assert C.rows_preserved("r", {1: ("a",)}, {1: ("b",)}, "attempt").status == C.BREACHED
    assert C.rows_preserved("r", {1: ("a",)}, {}, "attempt").status == C.BREACHED
    assert C.rows_preserved("r", {}, {1: ("a",)}, "attempt").status == C.UNDETERMINED
    assert C.artifacts_preserved("a", {"p:0": ("d", "d")}, {"p:0": ("e", "e")}).status == C.BREACHED
    assert C.no_replay("n", {("p", 0)}, [("p", 0, 1)], 10).status == C.BREACHED
    assert C.no_replay("n", {("p", 0)}, [("p", 1, 1)], 10).status == C.PASSED
    assert C.no_replay("n", set(), [("p", 1, 1)], 10).status == C.UNDETERMINED
    assert C.all_terminal("t", {"p": "running"}, 1).status == C.BREACHED
    assert C.all_terminal("t", {"p": "failed"}, 2).status == C.BREACHED
    assert C.no_lease_held("l", 1, 0).status == C.BREACHED
    assert C.no_lease_held("l", None, None).status == C.UNDETERMINED
    assert C.at_most_one_lost("o", {"p": 2}).status == C.BREACHED
    assert C.equals("e", "signal", "signal", "x").status == C.PASSED
    assert C.equals("e", None, "signal", "x").status == C.UNDETERMINED


def test_stop_limit_judged_on_the_report() -> None:
    """A stop that fired passes; a run that completed before its time limit has no stop to judge
    (undetermined, with the duration as evidence, never a breach or a default pass); a run that
    ran on long past the limit without stopping is a breach."""
    stopped = {"status": "interrupted", "stop_reason": "stop_after_s", "duration_ms": 310.0}
    early = {
        "status": "completed",
        "stop_reason": None,
        "duration_ms": 120.0,
        "counters": {"pipelines_succeeded": 20},
    }
    overran = {"status": "completed", "stop_reason": None, "duration_ms": 9000.0, "counters": {}}
    assert C.stop_fired("s", stopped, "stop_after_s", 300.0).status == C.PASSED
    verdict = C.stop_fired("s", early, "stop_after_s", 300.0)
    assert verdict.status == C.UNDETERMINED
    assert "120 ms" in verdict.evidence and "succeeded=20" in verdict.evidence
    assert C.stop_fired("s", overran, "stop_after_s", 300.0).status == C.BREACHED
    wrong = {"status": "interrupted", "stop_reason": "signal", "duration_ms": 10.0}
    assert C.stop_fired("s", wrong, "stop_after_s", 300.0).status == C.BREACHED
    assert C.stop_fired("s", {}, "stop_after_s", 300.0).status == C.UNDETERMINED


def test_short_run_that_beats_its_stop_limit_is_not_breached(tmp_path: Path) -> None:
    """A `stop_time` scenario whose run finishes before `stop_after_s` fires (one pipeline) leaves
    the run row `completed`: the stop criteria are undetermined, the resume is still judged."""
    outcome = run_scenario(Scenario("stop_time", "sqlite", "inline", seed=5, pipelines=1), tmp_path / "s")
    assert not outcome.breaches, outcome.render()
    names = {v.name: v.status for v in outcome.verdicts}
    if names["stop_reason"] == C.UNDETERMINED:  # the usual case: 3 short tasks beat a 300 ms timer
        assert names["run_record_status"] == C.UNDETERMINED and outcome.stops == 0
    assert names["resume_exit_code"] == C.PASSED


def test_backward_criteria_catch_what_they_guard() -> None:
    """The backward scenarios' own verdicts: visits replayed from the ledger, a move over the
    budget or a move committed twice breaches, an empty ledger is undetermined."""
    from tests.faults.backward import _budget, _no_replay, visits_of

    assert visits_of([("rewind", 2, 1), ("rewind", 2, 1)], 3) == [0, 2, 2]
    assert visits_of([("retry_all", 2, 0), ("forward", 0, 2)], 3) == [1, 1, 1]
    assert _no_replay({("p", 1, 1)}, [("p", 1, 1)], [("p", 1, 1)], 5).status == C.BREACHED
    assert _no_replay({("p", 1, 1)}, [("p", 1, 2)], [], 5).status == C.PASSED
    assert _no_replay(set(), [], [], 5).status == C.UNDETERMINED
    twice = [("rewind", 2, 1)] * 2
    assert _budget({"p00000": twice}, 1, "rewind").status == C.PASSED
    assert _budget({"p00000": twice * 2}, 1, "rewind").status == C.BREACHED  # over the budget
    assert _budget({"p00003": twice}, 4, "rewind").status == C.BREACHED  # a move nobody asked for
    assert _budget({}, 1, "rewind").status == C.UNDETERMINED
