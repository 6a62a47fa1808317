"""The public face: ``from pyattacker import task, pipeline, Runner, ...`` resolves lazily, and
``import pyattacker`` alone stays cheap."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import pytest

import pyattacker


def test_import_alone_loads_no_engine_no_event_loop_no_database_no_terminal_library() -> None:
    probe = (
        "import sys, pyattacker\n"
        "heavy = ('asyncio', 'sqlite3', 'rich', 'rich_click', 'msgspec', 'pluggy')\n"
        "print(sorted(m for m in sys.modules if m in heavy or m.startswith('pyattacker.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_every_face_name_resolves_to_the_object_its_module_defines() -> None:
    assert set(pyattacker.__all__) == {"__version__", *pyattacker._FACE}
    for name, module in pyattacker._FACE.items():
        assert getattr(pyattacker, name) is getattr(importlib.import_module(module), name), name
    assert set(pyattacker.__all__) <= set(dir(pyattacker))


def test_the_task_decorator_from_the_face_decorates() -> None:
    from pyattacker import TaskSpec, pipeline, task

    @task
    def double(x: int) -> int:
        return 2 * x

    assert isinstance(double, TaskSpec)
    assert pipeline("p", double).tasks == (double,)


def test_an_unknown_name_is_an_attribute_error_naming_it() -> None:
    with pytest.raises(AttributeError, match="'no_such_thing'"):
        pyattacker.no_such_thing  # noqa: B018
    with pytest.raises(ImportError, match="no_such_thing"):
        exec("from pyattacker import no_such_thing", {})


def test_no_module_of_the_package_shares_a_name_with_a_face_name() -> None:
    """``from pyattacker import task`` must never hand back a module (a submodule named like a
    face name would win once imported)."""
    names = {
        info.name.rpartition(".")[2] for info in pkgutil.walk_packages(pyattacker.__path__, "pyattacker.")
    }
    assert not names & set(pyattacker._FACE)
