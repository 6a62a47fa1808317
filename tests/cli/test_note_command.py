"""``pyattacker note``: notes on a run, kept as revisions; a stale write is refused (exit 2)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from pyattacker.plugins.run_notes import CONFIG_AUTHOR
from pyattacker.store.location import open_store
from pyattacker.testing.rows import commit, run


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pyattacker", *args],
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, **env},
    )


@pytest.fixture(params=["sqlite", "jsonl"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A real store with run ``r1`` (its config said ``run.notes``) and run ``r2`` (none)."""
    location = str(tmp_path / ("s.db" if request.param == "sqlite" else "s.jsonl"))
    opened = open_store(location)
    try:
        commit(opened, runs=[run("r1", notes="baseline"), run("r2", started_at=2.0)])
    finally:
        opened.close()
    return location


def _note(store: str, run_id: str) -> dict[str, object]:
    proc = _cli("note", store, run_id, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["note"]  # type: ignore[no-any-return]


def test_config_notes_are_revision_1_and_writes_add_revisions(store: str) -> None:
    first = _note(store, "r1")
    assert (first["revision"], first["text"], first["author"]) == (1, "baseline", CONFIG_AUTHOR)
    shown = _cli("note", store, "r1")
    assert shown.returncode == 0 and "notes revision 1 by config (run.notes)" in shown.stdout
    assert "baseline" in shown.stdout
    wrote = _cli("note", store, "r1", "tried a bigger pool")
    assert wrote.returncode == 0 and "notes revision 2 written" in wrote.stdout
    second = _note(store, "r1")
    assert (second["revision"], second["text"]) == (2, "tried a bigger pool")
    assert "@" in str(second["author"])  # user@host
    assert _cli("note", store, "r2").stdout.startswith("run r2: no notes (revision 0)")
    assert _cli("note", store, "latest", "on the latest run").returncode == 0
    assert _note(store, "r2")["text"] == "on the latest run"


def test_a_write_against_a_stale_revision_is_refused_naming_who_wrote(store: str) -> None:
    assert _cli("note", store, "r1", "mine", "--revision", "1").returncode == 0
    stale = _cli("note", store, "r1", "theirs", "--revision", "1")
    assert stale.returncode == 2
    assert "NoteConflict" in stale.stderr and "revision 2 was written by" in stale.stderr
    assert "nothing was written" in stale.stderr
    assert _note(store, "r1")["text"] == "mine"


def _editor(tmp_path: Path, body: str) -> str:
    script = tmp_path / "editor.py"
    script.write_text(body, encoding="utf-8")
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"


def test_edit_opens_the_editor_on_the_latest_notes(store: str, tmp_path: Path) -> None:
    editor = _editor(
        tmp_path,
        "import sys\npath = sys.argv[1]\ntext = open(path).read()\n"
        "open(path, 'w').write(text.upper() + '\\n')\n",
    )
    proc = _cli("note", store, "r1", "--edit", EDITOR=editor, VISUAL="")
    assert proc.returncode == 0, proc.stderr
    assert _note(store, "r1")["text"] == "BASELINE"  # the editor's trailing newline dropped
    unchanged = _cli("note", store, "r1", "--edit", EDITOR="true", VISUAL="")
    assert unchanged.returncode == 0 and "unchanged; nothing written" in unchanged.stderr
    failing = _cli("note", store, "r1", "--edit", EDITOR="false", VISUAL="")
    assert failing.returncode == 2 and "exited with 1; nothing was written" in failing.stderr
    assert _note(store, "r1")["revision"] == 2


def test_an_edit_that_someone_else_overtook_is_refused(store: str, tmp_path: Path) -> None:
    """While the editor is open another writer keeps revision 2: the edit (of revision 1) is refused."""
    editor = _editor(
        tmp_path,
        "import subprocess, sys\n"
        f"argv = ['note', {store!r}, 'r1', 'overtook']\n"
        "subprocess.run([sys.executable, '-m', 'pyattacker', *argv], check=True)\n"
        "open(sys.argv[1], 'w').write('my slow edit')\n",
    )
    proc = _cli("note", store, "r1", "--edit", EDITOR=editor, VISUAL="")
    assert proc.returncode == 2 and "changed since revision 1 was read" in proc.stderr
    assert _note(store, "r1")["text"] == "overtook"


def test_bad_store_run_and_arguments_exit_2(store: str, tmp_path: Path) -> None:
    missing = _cli("note", str(tmp_path / "missing.db"), "r1", "x")
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    assert not (tmp_path / "missing.db").exists()  # never created by a note
    unknown = _cli("note", store, "nope", "x")
    assert unknown.returncode == 2 and "no run 'nope'" in unknown.stderr
    both = _cli("note", store, "r1", "x", "--edit")
    assert both.returncode == 2 and "not both" in both.stderr


def test_a_note_is_refused_while_a_run_holds_the_store(store: str) -> None:
    writer = open_store(store)  # as a live run holds it
    try:
        proc = _cli("note", store, "r1", "x")
    finally:
        writer.close()
    assert proc.returncode == 2 and "is being written by pid" in proc.stderr
