"""Declarative configs: loading, validation (every error with its field path), use: resolution,
overrides, env expansion and path resolution; plus every config shipped in docs/ and examples/."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pyattacker import ConfigError
from pyattacker.config.build import build, check_config, effective_config, load_config
from tests.support import REPO

ROOT = REPO
GOOD_TAIL = "pipeline: {tasks: [{use: echo}]}\nsource: {kind: range, n: 3}\n"


def _write(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _errors(path: Path, **kw: object) -> str:
    with pytest.raises(ConfigError) as info:
        check_config(load_config(path, **kw))  # type: ignore[arg-type]
    return str(info.value)


# -- shipped configs ---------------------------------------------------------------------------
def _shipped_files() -> list[Path]:
    """Config files directly in docs/ and examples/ (sub-folders hold packages, not configs)."""
    files = []
    for folder in ("docs", "examples"):
        for suffix in ("*.yaml", "*.yml", "*.toml", "*.json"):
            files.extend(sorted((ROOT / folder).glob(suffix)))
    return [f for f in files if f.name != "pyproject.toml"]


_MARKED = re.compile(r"<!-- config: validate -->\s*```(yaml|toml|json)\n(.*?)```", re.S)


def _embedded() -> list[tuple[str, str, str]]:
    out = []
    for md in sorted((ROOT / "docs").glob("*.md")):
        for i, match in enumerate(_MARKED.finditer(md.read_text())):
            out.append((f"{md.name}#{i}", match.group(1), match.group(2)))
    return out


def test_reference_example_is_kept_and_valid() -> None:
    path = ROOT / "examples" / "cli_config_reference.yaml"
    assert (path.parent / "data.jsonl").is_file()
    checked = check_config(load_config(path))
    assert [t.name for t in checked.template.tasks] == ["echo", "simulate_llm"]


@pytest.mark.parametrize("path", _shipped_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_shipped_config_files_validate(path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pyattacker", "validate", "-c", str(path)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr


def test_docs_mark_complete_configs() -> None:
    assert len(_embedded()) >= 3


@pytest.mark.parametrize(("where", "fmt", "text"), _embedded(), ids=lambda v: v if "#" in str(v) else "")
def test_embedded_doc_configs_validate(tmp_path: Path, where: str, fmt: str, text: str) -> None:
    (tmp_path / "data.jsonl").write_text('{"id": 1, "question": "q"}\n')
    path = _write(tmp_path, text, f"doc.{fmt}")
    check_config(load_config(path))


# -- bad configs -------------------------------------------------------------------------------
BAD = [
    ("unknown_section", "runn: {}\n" + GOOD_TAIL, ["runn: unknown top-level section (did you mean run?)"]),
    (
        "concurency",
        "run: {concurency: 8}\n" + GOOD_TAIL,
        ["run.concurency: unknown field (did you mean run.concurrency?)"],
    ),
    (
        "capcity",
        "pools: {apis: {capcity: 3, resources: [{id: a}]}}\n" + GOOD_TAIL,
        ["pools.apis.capcity: unknown field", "capacity"],
    ),
    (
        "concurrency_str",
        'run: {concurrency: "8"}\n' + GOOD_TAIL,
        ["run.concurrency: Expected `int`, got `str`"],
    ),
    ("concurrency_zero", "run: {concurrency: 0}\n" + GOOD_TAIL, ["run.concurrency: Expected `int` >= 1"]),
    ("heartbeat_zero", "run: {heartbeat_s: 0}\n" + GOOD_TAIL, ["run.heartbeat_s"]),
    (
        "capacity_zero",
        "pools: {apis: {resources: [{id: a, capacity: 0}]}}\n" + GOOD_TAIL,
        ["pools.apis.resources[0].capacity"],
    ),
    (
        "use_int",
        "pipeline: {tasks: [{use: 5}]}\nsource: {kind: range, n: 1}\n",
        ["pipeline.tasks[0].use: Expected `str`"],
    ),
    (
        "use_unknown",
        "pipeline: {tasks: [{use: simulate_lm}]}\nsource: {kind: range, n: 1}\n",
        ["pipeline.tasks[0].use: unknown task 'simulate_lm' (did you mean simulate_llm?)"],
    ),
    (
        "use_module_attr_unknown",
        "pipeline: {tasks: [{use: 'pyattacker.errors:RetryableErr'}]}\nsource: {kind: range, n: 1}\n",
        ["pipeline.tasks[0].use:", "did you mean RetryableError"],
    ),
    (
        "pool_ref",
        "pools: {apis: {resources: [{id: a}]}}\npipeline: {tasks: [{use: echo, resource: apiz}]}\n"
        "source: {kind: range, n: 1}\n",
        ["pipeline.tasks[0].resource: no pool named 'apiz' (did you mean apis?)"],
    ),
    (
        "factory_declared_pool",
        "pipeline: {tasks: [{use: simulate_llm, kwargs: {resource: llm}}]}\nsource: {kind: range, n: 1}\n",
        ["pipeline.tasks[0].use (simulate_llm declares it): no pool named 'llm'"],
    ),
    (
        "pipeline_resource",
        "pipeline: {resource: nope, tasks: [{use: echo}]}\nsource: {kind: range, n: 1}\n",
        ["pipeline.resource: no pool named 'nope'"],
    ),
    (
        "algorithm_unknown",
        "pools: {apis: {algorithm: nosuchalgorithm, resources: [{id: a}]}}\n" + GOOD_TAIL,
        ["pools.apis.algorithm: unknown algorithm 'nosuchalgorithm'"],
    ),
    (
        "algorithm_param",
        "pools: {apis: {resources: [{id: a}]}}\n"
        "pipeline: {tasks: [{use: echo, resource: apis, algorithm: {name: backoff, bse: 1}}]}\n"
        "source: {kind: range, n: 1}\n",
        ["pipeline.tasks[0].algorithm.bse: ", "'bse'", "did you mean 'base'"],
    ),
    (
        "pool_algorithm_param",
        "pools: {apis: {algorithm: {name: backoff, bse: 1}, resources: [{id: a}]}}\n" + GOOD_TAIL,
        ["pools.apis.algorithm.bse: algorithm 'backoff': unknown parameter 'bse' (did you mean 'base'?)"],
    ),
    (
        "task_algorithm_value",
        "pools: {apis: {resources: [{id: a}]}}\n"
        "pipeline: {tasks: [{use: echo, resource: apis, algorithm: {name: backoff, base: x}}]}\n"
        "source: {kind: range, n: 1}\n",
        ["pipeline.tasks[0].algorithm.base: algorithm 'backoff': parameter 'base' must be a finite number"],
    ),
    (
        "algorithm_fallback_value",
        "pools: {apis: {algorithm: {name: sticky, fallback: {name: backoff, cap: -1}},"
        " resources: [{id: a}]}}\n" + GOOD_TAIL,
        ["pools.apis.algorithm.fallback.cap: algorithm 'backoff': parameter 'cap' must be >= 0"],
    ),
    (
        "algorithm_checked_by_the_factory",
        "pools:\n  apis: {algorithm: {name: backoff, jitter: sometimes}, resources: [{id: a}]}\n"
        "  b: {algorithm: {name: quota_aware, reserve: 2}, resources: [{id: a}]}\n"
        "  c: {algorithm: {name: failover, pools: 5}, resources: [{id: a}]}\n" + GOOD_TAIL,
        [
            "pools.apis.algorithm.jitter: algorithm 'backoff': parameter 'jitter' must be one of",
            "pools.b.algorithm.reserve: algorithm 'quota_aware': parameter 'reserve' must be between",
            "pools.c.algorithm.pools: algorithm 'failover': parameter 'pools' must be a list",
        ],
    ),
    (
        "kwargs_typo",
        "pipeline: {tasks: [{use: simulate_llm, kwargs: {latncy_ms: 5}}]}\nsource: {kind: range, n: 1}\n",
        ["pipeline.tasks[0].kwargs.latncy_ms: unknown argument (did you mean latency_ms?)"],
    ),
    (
        "kwargs_bad_value",
        "pipeline: {tasks: [{use: simulate_llm, kwargs: {fail_rate: 2}}]}\nsource: {kind: range, n: 1}\n",
        ["pipeline.tasks[0].kwargs:", "fail_rate"],
    ),
    (
        "kwargs_on_task",
        "pipeline: {tasks: [{use: echo, kwargs: {x: 1}}]}\nsource: {kind: range, n: 1}\n",
        ["pipeline.tasks[0].kwargs: echo is a task, not a factory"],
    ),
    (
        "backend_root",
        "run: {artifact_backend: {kind: file}}\n" + GOOD_TAIL,
        ["run.artifact_backend.root: required"],
    ),
    (
        "backend_kind",
        "run: {artifact_backend: {kind: s4}}\n" + GOOD_TAIL,
        ["run.artifact_backend.kind: unknown"],
    ),
    (
        "bare_on",
        "pipeline: {tasks: [{use: echo, retry: {max_attempts: 2, on: [TimeoutError]}}]}\n"
        "source: {kind: range, n: 1}\n",
        ["pipeline.tasks[0].retry: a bare YAML key `on` is read as the boolean true", 'quote it: "on"'],
    ),
    (
        "retry_zero",
        "pipeline: {tasks: [{use: echo, retry: {max_attempts: 0}}]}\nsource: {kind: range, n: 1}\n",
        ["pipeline.tasks[0].retry.max_attempts"],
    ),
    (
        "retry_on_name",
        "pipeline: {tasks: [{use: echo, retry: {'on': [NoSuchError]}}]}\nsource: {kind: range, n: 1}\n",
        ["pipeline.tasks[0].retry.on[0]: unknown exception name 'NoSuchError'"],
    ),
    (
        "clear_retry",
        "pipeline: {tasks: [{use: echo, retry: null}]}\nsource: {kind: range, n: 1}\n",
        ["pipeline.tasks[0].retry: cannot be cleared"],
    ),
    (
        "source_kind",
        "pipeline: {tasks: [{use: echo}]}\nsource: {kind: rnge}\n",
        ["source.kind: unknown source kind 'rnge' (did you mean range?)"],
    ),
    (
        "jsonl_no_path",
        "pipeline: {tasks: [{use: echo}]}\nsource: {kind: jsonl}\n",
        ["source.path: required field is missing"],
    ),
    (
        "repeats_zero",
        "pipeline: {tasks: [{use: echo}]}\nsource: {kind: range, n: 2, repeats: 0}\n",
        ["source.repeats"],
    ),
    (
        "source_typo",
        "pipeline: {tasks: [{use: echo}]}\nsource: {kind: jsonl, path: x, limt: 3}\n",
        ["source.limt: unknown field (did you mean source.limit?)"],
    ),
    (
        "scalar_pipeline",
        "pipeline: 3\nsource: {kind: range, n: 1}\n",
        ["pipeline: must be a mapping, got integer"],
    ),
    ("list_run", "run: [1, 2]\n" + GOOD_TAIL, ["run: must be a mapping, got list"]),
    (
        "empty_tasks",
        "pipeline: {tasks: []}\nsource: {kind: range, n: 1}\n",
        ["pipeline.tasks: must be a non-empty list"],
    ),
    # no source: section at all is the reference's default source (tests/cli/test_reference_forms.py)
    (
        "empty_source",
        "pipeline: {tasks: [{use: echo}]}\nsource: {}\n",
        ["source.kind: required field is missing"],
    ),
    (
        "control",
        "pipeline: {control: {edges: {}}, tasks: [{use: echo}]}\nsource: {kind: range, n: 1}\n",
        ["pipeline.control.edges: must be a non-empty mapping"],
    ),
    (
        "event_loop",
        "run: {event_loop: tokio}\n" + GOOD_TAIL,
        ["run.event_loop", "uvloop"],
    ),
    (
        "empty_pool",
        "pools: {apis: {resources: []}}\n" + GOOD_TAIL,
        ["pools.apis.resources: a pool needs at least one"],
    ),
    # found by fuzzing the config loader: each of these was a traceback, a silent surprise, or a
    # run that filled the machine's memory
    (
        "concurrency_huge",
        "run: {concurrency: 100000000000000000000}\n" + GOOD_TAIL,
        ["run.concurrency: Expected `int` <= 100000"],
    ),
    ("grace_inf", "run: {grace_s: .inf}\n" + GOOD_TAIL, ["run.grace_s: must be a finite number"]),
    (
        "cooldown_inf",
        "pools: {apis: {resources: [{id: a, cooldown_s: .inf}]}}\n" + GOOD_TAIL,
        ["pools.apis.resources[0].cooldown_s: must be a finite number"],
    ),
    (
        "kwargs_resource_int",
        "pools: {apis: {resources: [{id: a}]}}\n"
        "pipeline: {tasks: [{use: simulate_llm, kwargs: {resource: 5}}]}\nsource: {kind: range, n: 1}\n",
        ["pipeline.tasks[0]", "resource must be a pool name (a string), got integer"],
    ),
    (
        "pool_algorithm_value",
        "pools: {apis: {algorithm: {name: backoff, base: -1}, resources: [{id: a}]}}\n" + GOOD_TAIL,
        ["pools.apis.algorithm.base: algorithm 'backoff': parameter 'base' must be >= 0"],
    ),
    (
        "pool_empty_name",
        "pools: {'': {resources: [{id: a}]}}\n" + GOOD_TAIL,
        ["a pool name must be a non-empty"],
    ),
    ("recursive_alias", "meta: &m {x: *m}\n" + GOOD_TAIL, ["nested too deeply"]),
    (
        "alias_bomb",
        "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(
            f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
            for p, c in zip("abcdef", "bcdefg", strict=True)
        )
        + GOOD_TAIL,
        ["more than 1,000,000 values after expanding YAML aliases"],
    ),
]


@pytest.mark.parametrize(("case", "text", "needles"), BAD, ids=[b[0] for b in BAD])
def test_bad_config_names_the_field(tmp_path: Path, case: str, text: str, needles: list[str]) -> None:
    message = _errors(_write(tmp_path, text))
    for needle in needles:
        assert needle in message, message


def test_all_errors_are_reported_one_per_line(tmp_path: Path) -> None:
    text = (
        "run: {concurency: 8, concurrency: 0}\nbogus: 1\n"
        "pipeline: {tasks: [{use: simulate_llm, kwargs: {latncy_ms: 5}}, {use: nope}]}\n"
        "source: {kind: jsonl}\n"
    )
    lines = _errors(_write(tmp_path, text)).splitlines()[1:]
    paths = [line.strip().split(":")[0] for line in lines]
    assert paths == [
        "bogus",
        "run.concurency",
        "run.concurrency",
        "pipeline.tasks[0].kwargs.latncy_ms",
        "pipeline.tasks[1].use",
        "source.path",
    ]


@pytest.mark.parametrize(
    ("name", "text", "where"),
    [
        ("c.yaml", "run:\n  concurrency: 1\n  label: [\n", r"c\.yaml:\d+:\d+: invalid YAML"),
        ("c.json", '{\n  "run": {"concurrency": 1,}\n}', r"c\.json:2:\d+: invalid JSON"),
        ("c.toml", "[run]\nconcurrency = \n", r"c\.toml:2:\d+: invalid TOML"),
    ],
)
def test_syntax_errors_have_line_and_column(tmp_path: Path, name: str, text: str, where: str) -> None:
    with pytest.raises(ConfigError, match=where):
        load_config(_write(tmp_path, text, name))


def test_yaml_without_the_extra_names_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "yaml", None)
    with pytest.raises(ConfigError, match=r"pip install pyyaml"):
        load_config(_write(tmp_path, GOOD_TAIL))


def test_unsupported_suffix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unsupported config suffix"):
        load_config(_write(tmp_path, "x", "c.ini"))


# -- env ---------------------------------------------------------------------------------------
def test_env_expansion_and_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PA_LABEL", "nightly")
    monkeypatch.delenv("PA_MISSING", raising=False)
    text = 'run: {label: "${PA_LABEL}-${PA_MISSING:-x}", notes: "cost $$5 ${PA_MISSING}"}\n' + GOOD_TAIL
    loaded = load_config(_write(tmp_path, text))
    assert loaded.data["run"]["label"] == "nightly-x"
    assert loaded.data["run"]["notes"] == "cost $5 "
    assert (
        len(loaded.warnings) == 1 and "run.notes" in loaded.warnings[0] and "PA_MISSING" in loaded.warnings[0]
    )
    with pytest.raises(ConfigError, match="PA_MISSING is not set"):
        load_config(tmp_path / "c.yaml", strict_env=True)


# -- semantics ---------------------------------------------------------------------------------
def test_overrides_keep_and_clear(tmp_path: Path) -> None:
    text = (
        "pools: {apis: {resources: [{id: a}]}}\n"
        "pipeline:\n  resource: apis\n  tasks:\n"
        "    - {use: simulate_llm, kwargs: {resource: apis}, timeout_s: 3, version: v1}\n"
        "    - {use: simulate_llm, kwargs: {resource: apis}, resource: null, name: plain}\n"
        "    - {use: echo}\n"
        "source: {kind: range, n: 2}\n"
    )
    tasks = check_config(load_config(_write(tmp_path, text))).template.tasks
    assert (tasks[0].resource, tasks[0].timeout_s, tasks[0].version) == ("apis", 3.0, "v1")
    assert (tasks[1].resource, tasks[1].name) == (None, "plain")
    assert tasks[2].resource == "apis"  # pipeline.resource fills a task that declares none


def test_use_forms(tmp_path: Path) -> None:
    text = (
        "pipeline:\n  tasks:\n    - {use: 'pyattacker.tasks:echo'}\n    - {use: echo}\n"
        "    - {use: 'pyattacker.tasks:simulate_llm', kwargs: {tokens: 3}}\n"
        "source: {kind: range, n: 2}\n"
    )
    tasks = check_config(load_config(_write(tmp_path, text))).template.tasks
    assert [t.name for t in tasks] == ["echo", "echo", "simulate_llm"]
    assert tasks[2].factory["args"] == {"tokens": 3}


def test_relative_paths_resolve_from_the_config_folder(tmp_path: Path) -> None:
    sub = tmp_path / "cfg"
    sub.mkdir()
    (sub / "seeds.jsonl").write_text('{"id": 1}\n{"id": 2}\n')
    text = (
        "run: {store: runs/x.db, artifact_backend: 'file://blobs'}\n"
        "pipeline: {tasks: [{use: echo}]}\n"
        "source: {kind: jsonl, path: seeds.jsonl, key_field: id, repeats: 2}\n"
    )
    loaded = load_config(_write(sub, text))
    checked = check_config(loaded)
    assert not (sub / "runs").exists()  # validation creates nothing
    eff = effective_config(checked)
    assert eff["run"]["store"] == str(sub / "runs" / "x.db")
    assert eff["run"]["artifact_backend"]["root"] == str(sub / "blobs")
    built = build(checked, {"concurrency": 3})
    assert built.config.concurrency == 3 and built.config.store == str(sub / "runs" / "x.db")
    keys = [s.key for s in built.specs()]
    assert keys == ["1#0", "1#1", "2#0", "2#1"]


def test_a_config_binds_what_the_sdk_binds(tmp_path: Path) -> None:
    """A config's source is bound with one binder for the whole stream (not one per seed): the
    specs are the ones ``template.map`` gives, with and without keys and repeats."""
    (tmp_path / "seeds.jsonl").write_text('{"id": 1, "q": "a"}\n{"id": "b", "q": "c"}\n')

    def facts(specs: Any) -> list[tuple[Any, ...]]:
        return [(s.key, s.seed_key, s.repeat, s.seed_digest, s.seed) for s in specs]

    for source, key_of in (
        ("{kind: range, n: 4}", None),
        ("{kind: range, n: 3, repeats: 3}", None),
        ("{kind: jsonl, path: seeds.jsonl, key_field: id, repeats: 2}", lambda s: s["id"]),
        ("{kind: jsonl, path: seeds.jsonl, key_field: id}", lambda s: s["id"]),
    ):
        path = _write(tmp_path, f"pipeline: {{tasks: [{{use: echo}}]}}\nsource: {source}\n")
        built = build(load_config(path))
        src = built.checked.source
        seeds = [seed for _key, seed in src.source.open(src.options, tmp_path)]
        expected = built.checked.template.map(seeds, repeats=src.repeats, key_of=key_of)
        got = facts(built.specs())
        assert got == facts(expected) and len(got) == len(seeds) * src.repeats, source


def test_built_pools_are_handed_their_algorithm_resolved(tmp_path: Path) -> None:
    text = (
        "pools:\n"
        "  apis: {algorithm: {name: backoff, cap: 3}, resources: [{id: a}]}\n"
        "  plain: {resources: [{id: b}]}\n"
    )
    built = build(load_config(_write(tmp_path, text + GOOD_TAIL)))
    apis, plain = built.pools
    assert (apis.algorithm.name, apis.algorithm.cap) == ("backoff", 3.0)
    assert plain.algorithm.name == "wait" and plain.resolver is apis.resolver


def test_precedence_flag_over_run_block_over_default(tmp_path: Path) -> None:
    path = _write(tmp_path, "run: {concurrency: 4, label: file}\n" + GOOD_TAIL)
    built = build(load_config(path), {"label": "flag"})
    assert (built.config.concurrency, built.config.label, built.config.grace_s) == (4, "flag", 5.0)


def test_default_store_under_pyattacker_home(tmp_path: Path, _isolated_home: Path) -> None:
    built = build(load_config(_write(tmp_path, GOOD_TAIL)))
    assert built.config.store == str(_isolated_home / "runs" / "default.db")


def test_missing_jsonl_is_a_build_error_not_a_validate_error(tmp_path: Path) -> None:
    path = _write(tmp_path, "pipeline: {tasks: [{use: echo}]}\nsource: {kind: jsonl, path: nope.jsonl}\n")
    checked = check_config(load_config(path))
    with pytest.raises(ConfigError, match=r"source.path: file not found: .*nope\.jsonl"):
        build(checked)


def test_limit_and_total(tmp_path: Path) -> None:
    path = _write(tmp_path, "pipeline: {tasks: [{use: echo}]}\nsource: {kind: range, n: 10, repeats: 3}\n")
    built = build(load_config(path), limit=7)
    assert built.total == 7 and len(list(built.specs())) == 7
    assert build(load_config(path)).total == 30


def test_event_sinks_and_events_in_the_run_block(tmp_path: Path) -> None:
    from pyattacker import ConfigError
    from pyattacker.config.build import build, check_config, load_config

    good = tmp_path / "good.toml"
    good.write_text(
        'pipeline = {tasks = [{use = "echo"}]}\nsource = {kind = "range", n = 2}\n'
        '[run]\nevents = "all"\nevent_sinks = ["console", {name = "jsonl", path = "ev.jsonl"}]\n'
    )
    built = build(check_config(load_config(good)))
    assert built.config.events == "all" and built.config.event_sinks[0] == "console"
    bad = tmp_path / "bad.toml"
    bad.write_text(
        'pipeline = {tasks = [{use = "echo"}]}\nsource = {kind = "range", n = 2}\n'
        '[run]\nevents = "some"\nevent_sinks = ["consol"]\n'
    )
    with pytest.raises(ConfigError) as info:
        check_config(load_config(bad))
    text = str(info.value)
    assert "run.events" in text and "run.event_sinks[0]" in text and "console" in text
    assert built.config.event_sinks[1] == {"name": "jsonl", "path": str(tmp_path / "ev.jsonl")}


@pytest.mark.parametrize(
    ("sinks", "needle"),
    [
        ('["jsonl"]', "run.event_sinks[0]: event sink 'jsonl': missing a required argument: 'path'"),
        ('[{name = "jsonl", path = "e.jsonl", bogus = 1}]', "unexpected keyword argument 'bogus'"),
    ],
)
def test_event_sink_options_are_checked_by_validate(tmp_path: Path, sinks: str, needle: str) -> None:
    """They used to pass ``validate`` and fail the run (one with a traceback)."""
    path = tmp_path / "c.toml"
    path.write_text(
        'pipeline = {tasks = [{use = "echo"}]}\nsource = {kind = "range", n = 1}\n'
        f"[run]\nevent_sinks = {sinks}\n"
    )
    assert needle in _errors(path)


def test_deeply_nested_json_is_a_config_error(tmp_path: Path) -> None:
    text = '{"run": {}, "x": ' + "[" * 5000 + "]" * 5000 + "}"
    assert "nested too deeply" in _errors(_write(tmp_path, text, "c.json"))


def test_a_module_that_exits_while_imported_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sys.exit()`` in a task or exception module used to end ``validate``/``run`` with that
    module's exit code and no message; it is the module's failure, named at its field."""
    (tmp_path / "exiting_mod.py").write_text("import sys\nsys.exit(3)\n")
    (tmp_path / "raising_mod.py").write_text("raise RuntimeError('boom at import')\n")
    (tmp_path / "exiting_factory.py").write_text("import sys\n\ndef make():\n    sys.exit(5)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    message = _errors(
        _write(tmp_path, "pipeline: {tasks: [{use: 'exiting_mod:x'}]}\nsource: {kind: range, n: 1}\n")
    )
    assert "pipeline.tasks[0].use: importing module 'exiting_mod' failed: SystemExit: 3" in message
    factory = "pipeline: {tasks: [{use: 'exiting_factory:make'}]}\nsource: {kind: range, n: 1}\n"
    assert "factory exiting_factory:make failed: SystemExit: 5" in _errors(_write(tmp_path, factory))
    text = "pipeline: {tasks: [{use: echo, retry: {'on': ['raising_mod:X']}}]}\nsource: {kind: range, n: 1}\n"
    assert "pipeline.tasks[0].retry.on[0]" in _errors(_write(tmp_path, text))


def test_default_resource_ids_never_replace_an_explicit_one(tmp_path: Path) -> None:
    """``{id: llm-1}`` beside a resource without an id: the second used to get ``llm-1`` from a
    process-wide counter and silently replace the first. Ids are now counted within the pool,
    skipping explicit ones; two resources with one id in the SDK are an error."""
    from pyattacker import Pool, Resource

    text = (
        "pools: {llm: {kind: llm, resources: [{id: llm-1, options: {m: a}}, {options: {m: b}}, {}]}}\n"
        + GOOD_TAIL
    )
    checked = check_config(load_config(_write(tmp_path, text)))
    assert [r["id"] for r in checked.pools["llm"].resources] == ["llm-1", "llm-2", "llm-3"]
    with pytest.raises(ConfigError, match="two resources have the id 'x'"):
        Pool("p", [Resource.create("api", id="x"), Resource.create("api", id="x")])


@pytest.mark.parametrize(
    ("name", "text", "needle"),
    [
        (
            "c.json",
            '{"run": {"concurrency": 8, "concurrency": 64}, "pipeline": {"tasks": [{"use": "echo"}]}, '
            '"source": {"kind": "range", "n": 1}}',
            "the key 'concurrency' is given twice",
        ),
        (
            "c.yaml",
            "pools:\n  sim: {resources: [{id: a}]}\n  sim: {resources: [{id: b}]}\n" + GOOD_TAIL,
            "c.yaml:3:3: invalid YAML: while constructing a mapping the key 'sim' is given twice",
        ),
    ],
)
def test_a_key_given_twice_is_refused_in_every_format(
    tmp_path: Path, name: str, text: str, needle: str
) -> None:
    """TOML refused duplicate keys; JSON and YAML kept the last value, so a second pool of the same
    name silently replaced the first. All three formats accept the same content again."""
    assert needle in _errors(_write(tmp_path, text, name))


def test_the_sdk_run_config_has_the_same_bounds() -> None:
    """``Runner(concurrency=...)`` and friends take the same values a config file does."""
    from pyattacker import RunConfig
    from pyattacker.engine.settings import MAX_CONCURRENCY

    RunConfig(concurrency=MAX_CONCURRENCY)
    with pytest.raises(ConfigError, match=r"run\.concurrency: must be at most 100,000"):
        RunConfig(concurrency=MAX_CONCURRENCY + 1)
    with pytest.raises(ConfigError, match=r"run\.grace_s: must be a finite non-negative number"):
        RunConfig(grace_s=float("inf"))


def test_local_file_of_a_store_location() -> None:
    from pyattacker.store.location import local_file

    assert local_file("runs/x.db") == "runs/x.db"
    assert local_file("sqlite:///tmp/x.db?synchronous=full") == "/tmp/x.db"
    assert local_file("jsonl://runs/x") == "runs/x"
    assert local_file(":memory:") is None and local_file("s3://bucket/x.db") is None


def test_run_store_scheme_is_checked_against_the_installed_store_plugins(tmp_path: Path) -> None:
    """An unknown scheme used to pass ``validate`` and fail only once ``run`` had started."""
    message = _errors(_write(tmp_path, 'run: {store: "s3://bucket/x"}\n' + GOOD_TAIL))
    assert (
        "run.store: no store plugin handles the scheme 's3' in 's3://bucket/x'"
        " (installed schemes: file, jsonl, memory, sqlite)"
    ) in message
    for store in ("jsonl://runs/x", ":memory:", "sqlite:runs/x.db", "runs/x.db", "file://runs/x.db"):
        check_config(load_config(_write(tmp_path, f'run: {{store: "{store}"}}\n' + GOOD_TAIL)))


@pytest.mark.parametrize("store", ["jsonl://", "sqlite:", "file://", "sqlite:?synchronous=full"])
def test_run_store_with_nothing_after_the_scheme_is_refused(tmp_path: Path, store: str) -> None:
    """``jsonl://`` passed ``validate`` and wrote a store into the current folder; ``sqlite:`` went
    to a nameless temporary file; ``file://`` became the config's folder."""
    message = _errors(_write(tmp_path, f'run: {{store: "{store}"}}\n' + GOOD_TAIL))
    (line,) = message.splitlines()[1:]
    assert line.strip().startswith(f"run.store: {store!r} names no store: nothing follows "), message


def test_a_file_url_run_store_resolves_like_a_plain_path(tmp_path: Path) -> None:
    """``file://runs/x.db`` is the path ``runs/x.db`` (from the config's folder), not ``file:/...``."""
    checked = check_config(load_config(_write(tmp_path, 'run: {store: "file://runs/x.db"}\n' + GOOD_TAIL)))
    assert effective_config(checked)["run"]["store"] == str(tmp_path / "runs" / "x.db")
    absolute = f"file://{tmp_path}/y.db"
    checked = check_config(load_config(_write(tmp_path, f'run: {{store: "{absolute}"}}\n' + GOOD_TAIL)))
    assert effective_config(checked)["run"]["store"] == str(tmp_path / "y.db")


def test_a_scheme_spelled_run_store_resolves_from_the_config_folder_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sqlite:runs/x.db`` and ``jsonl:out/j`` name a path relative to the config's folder, as
    ``runs/x.db`` does (they were taken from the current folder); options and an absolute path
    are kept, and ``build`` creates the folder."""
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    cfg = tmp_path / "cfg"
    cfg.mkdir()
    cases = [
        ("sqlite:runs/x.db", f"sqlite:{cfg}/runs/x.db"),
        ("sqlite://runs/x.db?synchronous=full", f"sqlite:{cfg}/runs/x.db?synchronous=full"),
        ("jsonl:out/j", f"jsonl:{cfg}/out/j"),
        (f"sqlite:{tmp_path}/abs.db", f"sqlite:{tmp_path}/abs.db"),
        (":memory:", ":memory:"),
    ]
    for given, expected in cases:
        checked = check_config(load_config(_write(cfg, f'run: {{store: "{given}"}}\n' + GOOD_TAIL)))
        assert effective_config(checked)["run"]["store"] == expected, given
    checked = check_config(load_config(_write(cfg, 'run: {store: "sqlite:deep/er/x.db"}\n' + GOOD_TAIL)))
    build(checked)
    assert (cfg / "deep" / "er").is_dir() and not (elsewhere / "deep").exists()


# -- every problem is reported at the field the user wrote -----------------------------------
ONE_TASK = "pipeline: {tasks: [{use: echo, %s}]}\nsource: {kind: range, n: 1}\n"
FACTORY = "pipeline: {tasks: [{use: simulate_llm, kwargs: {%s}}]}\nsource: {kind: range, n: 1}\n"
POOL_USER = "pipeline: {resource: apis, tasks: [{use: echo, resource: apis}]}\nsource: {kind: range, n: 1}\n"

FIELD_PATHS = [
    # non-finite numbers in a task entry were reported as "pipeline: task 'echo' fingerprint.<x>"
    ("timeout_inf", ONE_TASK % "timeout_s: .inf", "pipeline.tasks[0].timeout_s", "must be a finite number"),
    ("timeout_nan", ONE_TASK % "timeout_s: .nan", "pipeline.tasks[0].timeout_s", "nan"),
    ("timeout_zero", ONE_TASK % "timeout_s: 0", "pipeline.tasks[0].timeout_s", "> 0"),
    ("timeout_str", ONE_TASK % "timeout_s: soon", "pipeline.tasks[0].timeout_s", "Expected `float"),
    ("retry_base_inf", ONE_TASK % "retry: {base: .inf}", "pipeline.tasks[0].retry.base", "finite"),
    ("retry_factor_inf", ONE_TASK % "retry: {factor: .inf}", "pipeline.tasks[0].retry.factor", "finite"),
    ("retry_cap_inf", ONE_TASK % "retry: {cap: .inf}", "pipeline.tasks[0].retry.cap", "finite"),
    (
        "retry_total_inf",
        ONE_TASK % "retry: {max_total_s: .inf}",
        "pipeline.tasks[0].retry.max_total_s",
        "must be a finite number, got inf",
    ),
    ("retry_base_nan", ONE_TASK % "retry: {base: .nan}", "pipeline.tasks[0].retry.base", "nan"),
    ("retry_cap_neg", ONE_TASK % "retry: {cap: -1}", "pipeline.tasks[0].retry.cap", ">= 0"),
    ("retry_jitter", ONE_TASK % "retry: {jitter: ''}", "pipeline.tasks[0].retry.jitter", "must be one of"),
    ("config_inf", ONE_TASK % "config: {t: .inf}", "pipeline.tasks[0].config.t", "must be a finite number"),
    (
        "config_nested_nan",
        ONE_TASK % "config: {m: [1, {x: .nan}]}",
        "pipeline.tasks[0].config.m[1].x",
        "must be a finite number, got nan",
    ),
    ("version_int", ONE_TASK % "version: 2", "pipeline.tasks[0].version", "Expected `str"),
    ("name_empty", ONE_TASK % "name: ''", "pipeline.tasks[0].name", "length >= 1"),
    ("resource_empty", ONE_TASK % "resource: ''", "pipeline.tasks[0].resource", "length >= 1"),
    # a factory's arguments are part of the identity: "task factory ... arguments.x" named neither
    (
        "kwargs_inf",
        FACTORY % "latency_ms: .inf",
        "pipeline.tasks[0].kwargs.latency_ms",
        "must be a finite number, got inf",
    ),
    ("kwargs_nan", FACTORY % "fail_rate: .nan", "pipeline.tasks[0].kwargs.fail_rate", "got nan"),
    # a broken pool also reported every reference to it as "no pool named ... (no pools are declared)"
    ("pool_resources_str", "pools: {apis: {resources: x}}\n" + POOL_USER, "pools.apis.resources", "a list"),
    ("pool_resources_null", "pools: {apis: {resources: null}}\n" + POOL_USER, "pools.apis.resources", "null"),
    ("pool_scalar", "pools: {apis: 3}\n" + POOL_USER, "pools.apis", "must be a mapping"),
    ("pools_list", "pools: [apis]\n" + POOL_USER, "pools", "must be a mapping"),
    (
        "pool_bad_resource",
        "pools: {apis: {resources: [7]}}\n" + POOL_USER,
        "pools.apis.resources[0]",
        "mapping",
    ),
    # run settings and resources (these were right; kept so they stay right)
    ("stop_after_s_inf", "run: {stop_after_s: .inf}\n" + GOOD_TAIL, "run.stop_after_s", "finite"),
    ("heartbeat_nan", "run: {heartbeat_s: .nan}\n" + GOOD_TAIL, "run.heartbeat_s", "nan"),
    ("flush_inf", "run: {flush_interval: .inf}\n" + GOOD_TAIL, "run.flush_interval", "finite"),
    ("seed_float", "run: {seed: 1.5}\n" + GOOD_TAIL, "run.seed", "Expected `int`"),
    ("label_list", "run: {label: [a]}\n" + GOOD_TAIL, "run.label", "Expected `str`"),
    ("write_batch_zero", "run: {write_batch: 0}\n" + GOOD_TAIL, "run.write_batch", ">= 1"),
    ("journal_empty", "run: {journal: ''}\n" + GOOD_TAIL, "run.journal", "must be one of"),
    (
        "cooldown_nan",
        "pools: {apis: {resources: [{cooldown_s: .nan}]}}\n" + POOL_USER,
        "pools.apis.resources[0].cooldown_s",
        "nan",
    ),
    (
        "capacity_inf",
        "pools: {apis: {resources: [{capacity: .inf}]}}\n" + POOL_USER,
        "pools.apis.resources[0].capacity",
        "Expected `int`",
    ),
    ("source_n_inf", "pipeline: {tasks: [{use: echo}]}\nsource: {kind: range, n: .inf}\n", "source.n", "int"),
    (
        "source_limit_zero",
        "pipeline: {tasks: [{use: echo}]}\nsource: {kind: jsonl, path: d.jsonl, limit: 0}\n",
        "source.limit",
        ">= 1",
    ),
]


@pytest.mark.parametrize(("case", "text", "field", "needle"), FIELD_PATHS, ids=[c[0] for c in FIELD_PATHS])
def test_each_problem_names_its_exact_field(
    tmp_path: Path, case: str, text: str, field: str, needle: str
) -> None:
    """Every line of the error starts with the field that is wrong (and only that field: a broken
    pool is not also reported at each reference to it); no "fingerprint" jargon."""
    message = _errors(_write(tmp_path, text))
    lines = [line.strip() for line in message.splitlines()[1:]]
    assert lines and all(line.startswith(f"{field}: ") for line in lines), message
    assert needle in message and "fingerprint" not in message, message


# a non-finite number nested anywhere in free-form data: each format spells it its own way
NESTED_NON_FINITE = {
    "yaml": (
        "run: {store: s.db, meta: {limits: [1, 2, .inf], deep: {x: -.inf}}}\n"
        "pools:\n  apis:\n    resources:\n"
        "      - {id: a, options: {q: {r: .nan}}, meta: {m: [.inf]}, tags: {t: .nan}}\n"
        "pipeline: {tags: {x: {y: .nan}}, tasks: [{use: echo, resource: apis}]}\n"
        "source: {kind: range, n: 1}\n"
    ),
    "toml": (
        '[run]\nstore = "s.db"\nmeta = { limits = [1, 2, inf], deep = { x = -inf } }\n'
        '[[pools.apis.resources]]\nid = "a"\noptions = { q = { r = nan } }\nmeta = { m = [inf] }\n'
        "tags = { t = nan }\n"
        '[pipeline]\ntags = { x = { y = nan } }\ntasks = [{ use = "echo", resource = "apis" }]\n'
        '[source]\nkind = "range"\nn = 1\n'
    ),
    "json": (
        '{"run": {"store": "s.db", "meta": {"limits": [1, 2, Infinity], "deep": {"x": -Infinity}}},'
        ' "pools": {"apis": {"resources": [{"id": "a", "options": {"q": {"r": NaN}},'
        ' "meta": {"m": [Infinity]}, "tags": {"t": NaN}}]}},'
        ' "pipeline": {"tags": {"x": {"y": NaN}}, "tasks": [{"use": "echo", "resource": "apis"}]},'
        ' "source": {"kind": "range", "n": 1}}'
    ),
}
NESTED_NON_FINITE_FIELDS = [
    "run.meta.limits[2]: must be a finite number, got inf",
    "run.meta.deep.x: must be a finite number, got -inf",
    "pools.apis.resources[0].options.q.r: must be a finite number, got nan",
    "pools.apis.resources[0].tags.t: must be a finite number, got nan",
    "pools.apis.resources[0].meta.m[0]: must be a finite number, got inf",
    "pipeline.tags.x.y: must be a finite number, got nan",
]


@pytest.mark.parametrize("fmt", sorted(NESTED_NON_FINITE))
def test_a_non_finite_number_nested_in_free_form_data_is_refused_at_its_path(
    tmp_path: Path, fmt: str
) -> None:
    """``run.meta``, resource ``options``/``tags``/``meta`` and ``pipeline.tags`` are recorded
    as JSON, which cannot hold inf/nan: nested ones were accepted (and stored as null), where a
    top-level one was refused at its field."""
    message = _errors(_write(tmp_path, NESTED_NON_FINITE[fmt], f"c.{fmt}"))
    lines = sorted(line.strip() for line in message.splitlines()[1:])
    assert lines == sorted(NESTED_NON_FINITE_FIELDS), message


@pytest.mark.parametrize("command", ["validate", "run"])
def test_validate_and_run_refuse_a_nested_non_finite_number_with_exit_2(tmp_path: Path, command: str) -> None:
    cfg = _write(tmp_path, NESTED_NON_FINITE["json"], "c.json")
    result = subprocess.run(
        [sys.executable, "-m", "pyattacker", command, "-c", str(cfg)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "run.meta.limits[2]: must be a finite number, got inf" in result.stderr
    assert not (tmp_path / "s.db").exists()  # nothing ran


TARGETS = """
from pyattacker import task

@task(name="unknown_algo", algorithm="nosuch")
def unknown_algo(value):
    return value

@task(name="bad_param", algorithm={"name": "backoff", "base": -1})
def bad_param(value):
    return value

@task(name="endless", timeout_s=float("inf"))
def endless(value):
    return value
"""


@pytest.mark.parametrize(
    ("attr", "needle"),
    [
        ("unknown_algo", "unknown algorithm 'nosuch'"),
        ("bad_param", "algorithm 'backoff': parameter 'base' must be >= 0, got -1"),
        ("endless", "timeout_s"),
    ],
)
def test_a_bad_value_declared_by_the_use_target_is_reported_at_its_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, attr: str, needle: str
) -> None:
    """A ``use:`` target declaring a bad algorithm or an infinite timeout was reported as
    ``pipeline: ...``, naming neither the entry nor the target."""
    (tmp_path / "declaring_mod.py").write_text(TARGETS)
    monkeypatch.syspath_prepend(str(tmp_path))
    text = (
        "pools: {apis: {resources: [{id: a}]}}\n"
        f"pipeline: {{tasks: [{{use: echo}}, {{use: 'declaring_mod:{attr}', resource: apis}}]}}\n"
        "source: {kind: range, n: 1}\n"
    )
    message = _errors(_write(tmp_path, text))
    (line,) = message.splitlines()[1:]
    assert line.strip().startswith(f"pipeline.tasks[1].use (declaring_mod:{attr} declares it): "), message
    assert needle in line
    # the entry can override what its target declares
    fixed = text.replace("resource: apis}", "resource: apis, algorithm: null, timeout_s: null}")
    check_config(load_config(_write(tmp_path, fixed)))


SINK_OPTIONS = [
    ('{name = "jsonl", path = 5}', "run.event_sinks[0].path", "a non-empty path"),
    ('{name = "jsonl", path = ""}', "run.event_sinks[0].path", "a non-empty path"),
    ('{name = "jsonl", path = "e.jsonl", fsync = "no"}', "run.event_sinks[0].fsync", "true or false"),
    ('{name = "jsonl", path = "e.jsonl", fsync = nan}', "run.event_sinks[0].fsync", "true or false"),
    ('{name = "console", kinds = 5}', "run.event_sinks[0].kinds", "a list of event kinds"),
    ('{name = "console", kinds = "task.failed"}', "run.event_sinks[0].kinds", "a list of event kinds"),
    ('{name = "console", kinds = ["task.failed", ""]}', "run.event_sinks[0].kinds[1]", "non-empty"),
    ('{name = "console", stream = "err"}', "run.event_sinks[0].stream", "from Python"),
]


@pytest.mark.parametrize(("sink", "field", "needle"), SINK_OPTIONS, ids=[s[0] for s in SINK_OPTIONS])
def test_event_sink_option_values_are_checked_by_validate(
    tmp_path: Path, sink: str, field: str, needle: str
) -> None:
    """Only the option names were checked: ``path = 5`` and ``kinds = 5`` passed ``validate`` and
    ended ``run`` with a traceback; ``kinds = "task.failed"`` silently watched single letters."""
    path = tmp_path / "c.toml"
    path.write_text(
        'pipeline = {tasks = [{use = "echo"}]}\nsource = {kind = "range", n = 1}\n'
        f"[run]\nevent_sinks = [{sink}]\n"
    )
    message = _errors(path)
    (line,) = message.splitlines()[1:]
    assert line.strip().startswith(f"{field}: ") and needle in line, message


def test_good_event_sink_options_pass(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        'pipeline = {tasks = [{use = "echo"}]}\nsource = {kind = "range", n = 1}\n'
        '[run]\nevent_sinks = [{name = "console", kinds = ["task.failed"]},'
        ' {name = "jsonl", path = "e.jsonl", fsync = true}, "console"]\n'
    )
    check_config(load_config(path))


def test_pools_an_algorithm_names_must_be_declared(tmp_path: Path) -> None:
    """``failover``'s ``pools`` were only looked up when a lease was asked for: an undeclared
    name passed ``validate`` and then failed every pipeline. Each is now reported where the
    algorithm is set, fallbacks included; declared names pass."""
    bad = (
        "pools:\n"
        "  a: {resources: [{id: r1}], algorithm: {name: failover, pools: [a, nope]}}\n"
        "  b: {resources: [{id: r2}]}\n"
        "pipeline: {resource: a, tasks: [{use: echo, resource: a, algorithm:"
        " {name: failover, pools: [b], fallback: {name: failover, pools: [zz]}}}]}\n"
        "source: {kind: range, n: 2}\n"
    )
    with pytest.raises(ConfigError) as info:
        check_config(load_config(_write(tmp_path, bad)))
    text = str(info.value)
    assert "pools.a.algorithm: names the pool 'nope', which is not declared (pools: 'a', 'b')" in text
    assert "pipeline.tasks[0].algorithm (task 'echo'): names the pool 'zz'" in text
    assert "'b', which" not in text
    good = bad.replace("nope", "b").replace("zz", "a")
    check_config(load_config(_write(tmp_path, good)))


def test_a_suite_config_gets_one_clear_refusal(tmp_path: Path) -> None:
    """A suite file is not one experiment's config: ``check_config`` refuses it with one line
    that says what it is and which commands take it, not a line per unknown section plus two
    missing ones (``run``/``resume``/``validate`` send a suite to ``check_suite``)."""
    suite = "suite: {id: s1}\nexperiments: {a: {config: a.yaml}}\noutput: {root: out}\n"
    with pytest.raises(ConfigError) as info:
        check_config(load_config(_write(tmp_path, suite)))
    lines = str(info.value).splitlines()
    assert len(lines) == 2 and lines[1].strip().startswith("suite: this is an experiment suite")
    assert "run, resume and validate take it with -c" in lines[1]


# -- rate limits -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("limits", "expected"),
    [
        ("{rmp: 60}", "pools.apis.resources[0].limits.rmp: unknown field (did you mean"),
        ("{rpm: 0}", "pools.apis.resources[0].limits.rpm: Expected `float` > 0"),
        ("{rpm: null}", "pools.apis.resources[0].limits.rpm: Expected `float`, got `null`"),
        ("{tpm: -5}", "pools.apis.resources[0].limits.tpm: Expected `float` > 0"),
        ("{tpd: .inf}", "pools.apis.resources[0].limits.tpd: must be a finite number"),
        ("{rpd: many}", "pools.apis.resources[0].limits.rpd: Expected `float`"),
        ("[60]", "pools.apis.resources[0].limits: must be a mapping, got list"),
    ],
)
def test_bad_resource_limits_are_errors_at_their_field(tmp_path: Path, limits: str, expected: str) -> None:
    text = f"pools: {{apis: {{resources: [{{id: a, limits: {limits}}}]}}}}\n" + GOOD_TAIL
    assert expected in _errors(_write(tmp_path, text))


def test_resource_limits_reach_the_built_pool(tmp_path: Path) -> None:
    text = "pools: {apis: {resources: [{id: a, capacity: 8, limits: {rpm: 500, tpm: 200000}}]}}\n"
    built = build(load_config(_write(tmp_path, text + GOOD_TAIL)))
    (pool,) = built.pools
    limits = pool.resource("a").limits
    assert pool.rate_limited and limits is not None
    assert limits.spec == {"rpm": 500.0, "tpm": 200000.0}
