"""``runs``, ``compare`` and ``note``: the runs a store holds, two of them side by side, and the
notes kept on each.

``runs`` and ``compare`` open stores read-only (safe beside a live run) and exit 0. ``note``
writes: it opens the store as a writer, so it waits for no one and is refused (exit 2) while a
run holds the store. A note written against a revision that is no longer the latest is
refused (exit 2) naming who wrote the latest and when; nothing is overwritten.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
import time
from typing import Any

import rich_click as click

from pyattacker.cli.common import out
from pyattacker.errors import ConfigError
from pyattacker.views.common import encode_json, expand_locations
from pyattacker.views.shard_report import find_shard_stores

__all__ = ["compare_command", "note_command", "runs_command"]


def _when(ts: float | None) -> str:
    return "-" if not ts else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 60:
        return f"{value:.1f}s"
    minutes, seconds = divmod(int(value), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{seconds:02d}s"


def _counts(pipelines: dict[str, Any]) -> str:
    states = pipelines["by_state"]
    parts = [f"{state}={n}" for state, n in states.items()]
    return f"{pipelines['total']}" + (f" ({' '.join(parts)})" if parts else "")


def _single_line(text: str) -> str:
    """Stored text on one line of a table (control characters shown, never obeyed)."""
    return "".join(ch if ch.isprintable() else " " for ch in text)


@click.command("runs")
@click.argument("stores", nargs=-1, required=True, metavar="STORE [STORE ...]")
@click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON document on stdout.")
def runs_command(stores: tuple[str, ...], as_json: bool) -> None:
    """List the runs of each store: id, label, status, start, duration, pipeline counts, notes.

    Counts are the pipeline rows each run owns (a resume owns what it ran again). STORE may be
    a glob pattern, or the base name of a sharded run's stores. `report --run-id ID` shows one
    run in detail; `compare` two of them. Exit 0, or 2 for a missing or foreign store.
    """
    from pyattacker.views.runs import list_runs  # start-up: `--help` imports this module

    doc = list_runs(find_shard_stores(expand_locations(stores)))
    if as_json:
        sys.stdout.write(encode_json(doc).decode() + "\n")
        return
    for entry in doc["stores"]:
        out(f"store {entry['store']}: {len(entry['runs'])} run(s)")
        for r in entry["runs"]:
            label = f" [{_single_line(r['label'])}]" if r["label"] else ""
            out(
                f"  {r['run_id']}{label}  {r['status']}  started {_when(r['started_at'])}"
                f"  took {_seconds(r['duration_s'])}  pipelines {_counts(r['pipelines'])}"
            )
            if r["notes"]:
                out(f"      notes (rev {r['notes_revision']}): {_single_line(r['notes'])}")


def _compare_sides(args: tuple[str, ...]) -> list[tuple[str, str | None]]:
    """``STORE RUN_A RUN_B`` (two runs of one store) or ``STORE_A STORE_B`` (each one's latest)."""
    if len(args) == 3:
        store, run_a, run_b = args
        return [(store, run_a), (store, run_b)]
    if len(args) == 2:
        return [(args[0], None), (args[1], None)]
    raise click.UsageError(
        f"compare takes STORE RUN_A RUN_B, or STORE_A STORE_B; got {len(args)} argument(s)"
    )


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.6g}"
    return _single_line(str(value))


def _compare_text(doc: dict[str, Any]) -> list[str]:
    lines = []
    for key in ("a", "b"):
        side = doc[key]
        label = f", label {_single_line(side['label'])}" if side["label"] else ""
        lines.append(f"{key.upper()}: run {side['run_id']} (store {side['store']}, {side['status']}{label})")
    changes = doc["config_changes"]
    lines.append(f"config: {'the same' if not changes else f'{len(changes)} change(s)'}")
    lines += [f"  {c['key']}: {_fmt(c['a'])} -> {_fmt(c['b'])}" for c in changes]
    same = "the same" if doc["same_identities"] else "different (the chains or their tasks changed)"
    lines.append(f"task identities: {same}")
    width = max((len(r["name"]) for r in doc["rows"]), default=4)
    lines.append(f"{'':{width}}  {'A':>12}  {'B':>12}  {'B - A':>12}")
    for r in doc["rows"]:
        lines.append(f"{r['name']:{width}}  {_fmt(r['a']):>12}  {_fmt(r['b']):>12}  {_fmt(r['delta']):>12}")
    return lines


@click.command("compare")
@click.argument("args", nargs=-1, required=True, metavar="STORE RUN_A RUN_B | STORE_A STORE_B")
@click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON document on stdout.")
def compare_command(args: tuple[str, ...], as_json: bool) -> None:
    """What differs between two runs: config, task identities, pipeline counts, per-task latency
    percentiles, attempts and retries, usage (tokens) and every application metric, with B - A.

    `compare STORE RUN_A RUN_B` compares two runs of one store; `compare STORE_A STORE_B` the
    latest run of each. Read from the stores' aggregates, read-only. Exit 0, or 2 for a missing
    store or run.
    """
    from pyattacker.views.compare import compare_runs  # start-up: `--help` imports this module

    doc = compare_runs(_compare_sides(args))
    if as_json:
        sys.stdout.write(encode_json(doc).decode() + "\n")
        return
    for line in _compare_text(doc):
        out(line)


def _read_note(location: str, run_ref: str) -> tuple[str, Any]:
    """``(run_id, latest note or None)`` read through a read-only view (``latest``: the run
    that started last); a missing store or run is a ``ConfigError``."""
    from pyattacker.views.common import choose_run, read_only_store  # start-up

    with read_only_store(location) as store:
        choice = choose_run(store, None if run_ref == "latest" else run_ref)
        if choice.run_id is None:
            raise ConfigError(f"store {location}: no run recorded yet")
        return choice.run_id, store.run_note(choice.run_id)


def _edit(text: str) -> str:
    """``text`` after the user's ``$VISUAL``/``$EDITOR`` (default ``vi``) edited it in a temp file."""
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    fd, path = tempfile.mkstemp(prefix="pyattacker-note-", suffix=".md")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        try:
            code = subprocess.call([*shlex.split(editor), path])
        except OSError as exc:
            raise ConfigError(f"cannot start the editor {editor!r} ($EDITOR): {exc}") from exc
        if code != 0:
            raise ConfigError(f"the editor {editor!r} exited with {code}; nothing was written")
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    finally:
        os.unlink(path)


def _write_note(location: str, run_id: str, text: str, expected: int | None) -> Any:
    from pyattacker.plugins.run_notes import note_author  # start-up
    from pyattacker.store.location import open_store

    store = open_store(location)
    try:
        return store.write_note(
            run_id, text, expected_revision=expected, author=note_author(), now=time.time()
        )
    finally:
        store.close()


def _show_note(run_id: str, note: Any, as_json: bool) -> None:
    if as_json:
        sys.stdout.write(encode_json({"schema_version": 1, "run_id": run_id, "note": note}).decode() + "\n")
    elif note is None:
        out(f"run {run_id}: no notes (revision 0)")
    else:
        out(f"run {run_id}: notes revision {note.revision} by {note.author} at {_when(note.written_at)}")
        click.echo(note.text)


@click.command("note")
@click.argument("store")
@click.argument("run")
@click.argument("text", required=False)
@click.option(
    "--edit", is_flag=True, help="Edit the latest notes in $EDITOR (then written as the next revision)."
)
@click.option(
    "--revision",
    type=click.IntRange(min=0),
    default=None,
    help="The revision this text replaces; refused if another is the latest (default: the one read now).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the notes (or the new revision) as JSON.")
def note_command(
    store: str, run: str, text: str | None, edit: bool, revision: int | None, as_json: bool
) -> None:
    """Show or write the notes of RUN (a run id, or `latest`).

    Without TEXT or --edit it prints the latest notes. With either it keeps a new revision
    (every earlier one is kept; the config's `run.notes` is revision 1). A write based on a
    revision that is no longer the latest is refused with exit 2, naming who wrote the latest.
    """
    if text is not None and edit:
        raise click.UsageError("give TEXT or --edit, not both")
    run_id, current = _read_note(store, run)
    if text is None and not edit:
        _show_note(run_id, current, as_json)
        return
    read_revision = current.revision if current is not None else 0
    expected = read_revision if revision is None else revision
    if edit:
        text = _edit(current.text if current is not None else "")
        if current is not None and text == current.text:
            click.echo(f"run {run_id}: notes unchanged; nothing written", err=True)
            return
    assert text is not None
    note = _write_note(store, run_id, text.rstrip("\n") if edit else text, expected)
    if as_json:
        _show_note(run_id, note, True)
    else:
        out(f"run {run_id}: notes revision {note.revision} written")
