"""The text of a report of one or more stores, as ``report`` prints it and as ``run --shards``
prints the merged report of its shard stores.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pyattacker.flow.visits import handoffs_label
from pyattacker.views.failures import last_frame_text, with_tracebacks

if TYPE_CHECKING:
    from pyattacker.views.fold import MergedReport

__all__ = ["report_text"]


def _line(value: Any) -> str:
    return " ".join(str(value).split())


def _empty_run_note(source: Any) -> str | None:
    """Why the latest run shows nothing, when it ended owning no pipeline row.

    A resume that was refused (a damaged row, a changed identity) or that found everything
    finished still becomes the latest run, and a report of it alone looks like lost results;
    the rows are those of earlier runs."""
    if source.rows or source.run_selected != "latest" or source.run_status in (None, "running"):
        return None
    why = (
        f"it stopped: {source.stop_reason}"
        if source.stop_reason
        else "its pipelines were all finished already, or none was admitted"
    )
    return (
        f"  note: this run owns no pipeline rows ({why}); rows finished by earlier runs stay"
        " theirs: --run-id all shows every run, `pyattacker runs` lists them"
    )


def _where(traceback: str | None, whole: bool) -> list[str]:
    """Where a listed failure was raised: the traceback's last frame, or all of it."""
    if whole and traceback:
        return ["      " + line for line in traceback.rstrip().splitlines()]
    where = last_frame_text(traceback)
    return [f"      at {where}"] if where else []


def _share(rep: MergedReport) -> str:
    """Whose share of the dataset the counts are: the latest run's, or the one asked for."""
    if all(s.run_selected == "latest" for s in rep.sources):
        return "latest run's share"
    return "this run's share" if len(set(rep.run_ids)) <= 1 else "these runs' share"


def _states(total: int, by_state: dict[str, int]) -> str:
    return f"total={total} " + " ".join(f"{k}={v}" for k, v in by_state.items())


def report_text(
    rep: MergedReport,
    errors: int,
    *,
    tracebacks: bool = False,
    dataset: dict[str, Any] | None = None,
) -> list[str]:
    """The lines of ``report`` (and of the merged report of ``run --shards``): the stores, the
    counts, and the first ``errors`` failures, each with where it was raised (the whole
    traceback with ``tracebacks``). ``dataset``: every pipeline's state across all runs, shown
    on its own line; counts of one run that differ from it are labelled as that run's share."""
    out: list[str] = []
    for s in rep.sources:
        out.append(f"store {s.store}: {s.description}; {s.rows} pipeline row(s)")
        note = _empty_run_note(s)
        if note:
            out.append(note)
    st = rep.stats()
    p = st["pipelines"]
    label = "pipelines"
    if dataset is not None and (dataset["total"], dataset["by_state"]) != (p["total"], p["by_state"]):
        label = f"pipelines ({_share(rep)})"
    out.append(f"{label}: {_states(p['total'], p['by_state'])}".rstrip())
    if dataset is not None:
        out.append(f"dataset (all runs): {_states(dataset['total'], dataset['by_state'])}".rstrip())
    if len(rep.sources) > 1 or rep.duplicates:
        out.append(f"merged: {len(rep.sources)} store(s), folded {rep.duplicates} duplicate row(s)")
    d = p["duration_ms"]
    out.append(f"duration_ms: p50={d['p50']} p95={d['p95']} max={d['max']}")
    for name, states_ in st["tasks"]["by_name"].items():
        out.append(f"  task {name}: " + " ".join(f"{k}={v}" for k, v in states_.items()))
    handoffs = handoffs_label(st.get("handoffs_total", 0), st.get("handoffs_by_operation"))
    out.append(f"attempts: total={st['attempts_total']}{handoffs}  source_events={st['source_events_total']}")
    if rep.repair_failures:
        out.append(f"Terminal repair failures: {len(rep.repair_failures)} pipeline(s)")
        for pid in sorted(rep.repair_failures):
            r = rep.repair_failures[pid]
            out.append(f"  - {pid} phase={r['phase']}: {_line(r['error'])}")
    failed = rep.failed_rows()
    if errors and failed:
        shown = with_tracebacks(rep.errors(errors))
        out.append(f"Errors (newest first, {len(shown)} of {len(failed)}):")
        for e in shown:
            seed = f" seed_key={e['seed_key']}" if e["seed_key"] and e["seed_key"] != e["key"] else ""
            out.append(
                f"  - pipeline {e['key']}{seed} task={e['failed_task']} class={e['error_class']}"
                f" {e['error_type']}: {_line(e['error_message'] or '')}"
            )
            out.extend(_where(e["traceback"], tracebacks))
    elif failed:
        out.append(f"{len(failed)} failed pipeline(s); --errors N lists them")
    return out
