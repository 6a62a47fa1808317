"""Code in the docs cannot rot: every Python block compiles, and blocks marked
``<!-- example: run -->`` run to completion."""

from __future__ import annotations

import ast
import re

import pytest

from tests.support import REPO

ROOT = REPO
BLOCK = re.compile(r"(<!-- example: run -->\s*)?```python\n(.*?)```", re.S)


def _blocks() -> list[tuple[str, bool, str]]:
    found = []
    for doc in sorted([*ROOT.joinpath("docs").glob("*.md"), ROOT / "README.md"]):
        for i, m in enumerate(BLOCK.finditer(doc.read_text())):
            found.append((f"{doc.name}#{i}", bool(m.group(1)), m.group(2)))
    return found


BLOCKS = _blocks()


@pytest.mark.parametrize(("where", "runnable", "code"), BLOCKS, ids=[b[0] for b in BLOCKS])
def test_python_blocks_compile(where: str, runnable: bool, code: str) -> None:
    compile(code, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


@pytest.mark.parametrize(
    ("where", "code"), [(w, c) for w, r, c in BLOCKS if r], ids=[w for w, r, _ in BLOCKS if r]
)
def test_runnable_blocks_run(where: str, code: str) -> None:
    exec(compile(code, where, "exec"), {"__name__": "docs_example"})


def test_at_least_one_runnable_block_exists() -> None:
    assert any(r for _, r, _ in BLOCKS)
