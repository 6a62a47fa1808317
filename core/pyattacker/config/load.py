"""Reading a config file: the parser chosen by suffix, syntax errors with line and column,
and ``${VAR}`` / ``${VAR:-default}`` expansion from the environment.

Nothing here knows what the sections mean (that is ``schema`` and ``build``); this
module only turns bytes into a plain mapping, or into one ``ConfigError`` that says where the
file is broken, never a traceback.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pyattacker.errors import ConfigError

__all__ = ["SUFFIXES", "expand_env", "read_document"]

#: suffix -> format name
SUFFIXES = {".toml": "toml", ".json": "json", ".yaml": "yaml", ".yml": "yaml"}

_VAR = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*?))?\}")
_TOML_AT = re.compile(r"\(at line (\d+), column (\d+)\)")


def read_document(path: Path) -> dict[Any, Any]:
    """Parse ``path`` by its suffix into a mapping (the top level must be one)."""
    fmt = SUFFIXES.get(path.suffix.lower())
    if fmt is None:
        raise ConfigError(
            f"{path}: unsupported config suffix {path.suffix!r}; use .toml, .json, .yaml or .yml"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read config file: {exc}") from None
    data = {"toml": _parse_toml, "json": _parse_json, "yaml": _parse_yaml}[fmt](path, text)
    if data is None:
        raise ConfigError(f"{path}: the config file is empty")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections, got {type(data).__name__}")
    return data


def _parse_toml(path: Path, text: str) -> Any:
    import tomllib  # start-up: only for .toml configs

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        at = _TOML_AT.search(message)
        where = f"{path}:{at.group(1)}:{at.group(2)}" if at else str(path)
        raise ConfigError(f"{where}: invalid TOML: {_TOML_AT.sub('', message).strip()}") from None


class _DuplicateKey(Exception):
    pass


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """JSON objects with a key given twice are refused, as TOML refuses them: the last value
    silently winning (or a whole pool silently dropped) is a surprise, never an intent."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKey(key)
        out[key] = value
    return out


def _parse_json(path: Path, text: str) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_unique_pairs)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None
    except _DuplicateKey as exc:
        raise ConfigError(
            f"{path}: invalid JSON: the key {exc.args[0]!r} is given twice in one object"
        ) from None


def _unique_key_loader(yaml: Any) -> Any:
    """A SafeLoader that refuses a mapping key given twice (PyYAML keeps the last one)."""

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=deep)
                try:
                    duplicate = key in seen
                except TypeError:  # an unhashable key: the base class reports it
                    break
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"the key {key!r} is given twice",
                        key_node.start_mark,
                    )
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader


def _parse_yaml(path: Path, text: str) -> Any:
    try:
        import yaml  # a dependency of the default install, loaded only for .yaml configs
    except ImportError:
        raise ConfigError(
            f"{path}: YAML configs need PyYAML, which is missing from this environment:"
            " pip install pyyaml, or write the config as .toml or .json"
        ) from None
    try:
        return yaml.load(text, Loader=_unique_key_loader(yaml))  # a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = " ".join(filter(None, [exc.context, exc.problem]))
        raise ConfigError(f"{where}: invalid YAML: {problem or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: invalid YAML: {exc}") from None


#: values a config may hold once YAML aliases are expanded (a real one holds thousands)
MAX_NODES = 1_000_000


def expand_env(data: Any, environ: Mapping[str, str] | None = None, path: str = "") -> tuple[Any, list[str]]:
    """Expand ``${VAR}`` and ``${VAR:-default}`` in every string value (``$$`` is a literal ``$``).

    Returns the new data and one message per unset variable without a default (expanded to
    ""); the caller decides whether that is a warning or, under ``--strict-env``, an error.
    Values stay strings: ``concurrency: "${N}"`` is still a string and fails type checking.
    """
    env = os.environ if environ is None else environ
    unset: list[str] = []

    def sub(text: str, where: str) -> str:
        def one(match: re.Match[str]) -> str:
            if match.group(0) == "$$":
                return "$"
            name, default = match.group(1), match.group(2)
            value = env.get(name)
            if value is not None and (value != "" or default is None):
                return value
            if default is not None:
                return default
            unset.append(f'{where or "<top>"}: environment variable {name} is not set (expanded to "")')
            return ""

        return _VAR.sub(one, text)

    nodes = 0

    def walk(value: Any, where: str) -> Any:
        nonlocal nodes
        nodes += 1
        if nodes > MAX_NODES:  # YAML aliases can expand a small file into billions of nodes
            raise ConfigError(f"more than {MAX_NODES:,} values after expanding YAML aliases (an alias bomb?)")
        if isinstance(value, str):
            return sub(value, where) if "$" in value else value
        if isinstance(value, dict):
            return {k: walk(v, f"{where}.{k}" if where else str(k)) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return value

    return walk(data, path), unset
