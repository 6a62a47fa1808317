"""What checking stored bytes against their digest costs when they are read back (issue 44).

Resume checks a checkpoint's bytes before decoding them; export (and every view) checks each
payload before showing it. Both are measured end to end, interleaved with a baseline of the
same work with the check switched off (``payload_mismatch`` replaced by a no-op in the module
that calls it), in the same process and the same minutes; the ratio is check / baseline. A
micro measurement puts the digest beside the decode it precedes, per payload size.

    python -m benchmarks.digest_checks                  # N=2,000 pipelines, 5 rounds
    python -m benchmarks.digest_checks --n 500 --rounds 3 --out benchmarks/results/x.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pyattacker import Runner, pipeline, task
from pyattacker.clock import VirtualClock
from pyattacker.digest import digest_bytes
from pyattacker.engine import resume as resume_mod
from pyattacker.store.codecs import CodecRegistry
from pyattacker.views import common as common_mod
from pyattacker.views.export import export_stores

FAIL = {"on": True}


@task
def make(row: int) -> dict[str, Any]:
    return {"i": row, "text": "w" * 200, "items": list(range(20))}


@task
def last(x: dict[str, Any]) -> dict[str, Any]:
    if FAIL["on"]:
        raise ValueError("later")
    return x


TEMPLATE = pipeline("digest-bench", make, last)


@contextmanager
def unchecked() -> Iterator[None]:
    """The baseline: the same code with the digest check a no-op."""
    saved = resume_mod.payload_mismatch, common_mod.payload_mismatch
    resume_mod.payload_mismatch = common_mod.payload_mismatch = lambda digest, data: None
    try:
        yield
    finally:
        resume_mod.payload_mismatch, common_mod.payload_mismatch = saved


def _failed_store(folder: Path, n: int) -> Path:
    """A store where every pipeline's first output is durable and its second task failed."""
    path = folder / "seed.db"
    FAIL["on"] = True
    with Runner(store=str(path), clock=VirtualClock(), handle_signals=False, concurrency=8) as r:
        r.run(TEMPLATE.map(range(n)))
    return path


def _resume_once(template: Path, folder: Path, round_: int, tag: str) -> float:
    path = folder / f"r{round_}-{tag}.db"
    path.write_bytes(template.read_bytes())
    FAIL["on"] = False
    t0 = time.perf_counter()
    with Runner(store=str(path), clock=VirtualClock(), handle_signals=False, concurrency=8) as r:
        report = r.run(TEMPLATE.map(range(N_SEEDS["n"])))
    elapsed = time.perf_counter() - t0
    assert report.succeeded == N_SEEDS["n"], report
    os.unlink(path)
    return elapsed


def _export_once(store: Path, folder: Path) -> float:
    out = folder / "out.jsonl"
    t0 = time.perf_counter()
    export_stores([str(store)], str(out), rows="artifacts")
    return time.perf_counter() - t0


N_SEEDS = {"n": 0}


def _interleaved(rounds: int, measure: Callable[[int, str], float]) -> dict[str, Any]:
    checked, baseline = [], []
    for i in range(rounds):
        with unchecked():
            baseline.append(measure(i, "base"))
        checked.append(measure(i, "check"))
    ratio = statistics.median(checked) / statistics.median(baseline)
    return {
        "checked_s": [round(x, 4) for x in checked],
        "baseline_s": [round(x, 4) for x in baseline],
        "ratio_median": round(ratio, 4),
    }


def _micro() -> dict[str, Any]:
    codecs = CodecRegistry.from_plugins()
    out = {}
    for size in (100, 1_000, 10_000, 100_000):
        value = {"text": "w" * size}
        codec, type_name, data = codecs.encode(value)
        loops = max(200, 2_000_000 // size)
        t0 = time.perf_counter()
        for _ in range(loops):
            digest_bytes(data)
        digest_s = (time.perf_counter() - t0) / loops
        t0 = time.perf_counter()
        for _ in range(loops):
            codecs.decode(codec, type_name, data)
        decode_s = (time.perf_counter() - t0) / loops
        out[f"{len(data)}B"] = {
            "digest_us": round(digest_s * 1e6, 3),
            "decode_us": round(decode_s * 1e6, 3),
            "digest_over_decode": round(digest_s / decode_s, 3),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000, help="pipelines in the store")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", help="write the result as JSON here")
    args = parser.parse_args(argv)
    N_SEEDS["n"] = args.n
    with tempfile.TemporaryDirectory(prefix="digest-bench-") as tmp:
        folder = Path(tmp)
        template = _failed_store(folder, args.n)
        resume = _interleaved(args.rounds, lambda i, tag: _resume_once(template, folder, i, tag))
        FAIL["on"] = False
        export = _interleaved(args.rounds, lambda i, tag: _export_once(template, folder))
    result = {
        "what": "digest check on read-back: check / baseline (check off), same process, interleaved",
        "n_pipelines": args.n,
        "rounds": args.rounds,
        "resume_whole_run": resume,
        "export_artifacts": export,
        "per_payload": _micro(),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
