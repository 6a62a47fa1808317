"""The viewer's pipeline-level endpoints and ``export`` timed on a large store (issues 49, 51).

``time_pipeline_endpoints(store_path)`` answers every pipeline-level JSON endpoint of the viewer
(``/pipelines`` with each filter, sort and a keyset page, text search, ``/timeline``,
``/failures``, ``/pipeline``, ``/events``, ``/logs``, ``/errors``) twice: cold (a fresh ``Api``
in a fresh process state: its own connection, SQLite's page cache empty) and warm (the same
request again, the answer cache off, so it reads the store again). Each answer also reports the
Python memory the request allocated at its peak (``tracemalloc``): flat when nothing in it grows
with the store. ``time_export(store_path)`` streams ``export --rows`` of each kind in JSONL and
CSV for a while and reports rows/s and the process's peak RSS.

    python -m benchmarks.scale_endpoints STORE [--out FILE] [--export-seconds 10]

The scale scenario (``benchmarks/scale_store.py``) builds the store and calls both.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["ENDPOINTS", "time_export", "time_pipeline_endpoints"]

#: (name, path, params) of each request timed; ``{pid}`` / ``{fail}`` / ``{next}`` are filled in
ENDPOINTS: tuple[tuple[str, str, dict[str, str]], ...] = (
    ("pipelines", "/pipelines", {}),
    ("pipelines_page2", "/pipelines", {"after": "{next}"}),
    ("pipelines_state_failed", "/pipelines", {"state": "failed"}),
    ("pipelines_task", "/pipelines", {"task": "parse"}),
    ("pipelines_error_class", "/pipelines", {"error_class": "KeyError"}),
    ("pipelines_text_hit", "/pipelines", {"q": "missing key"}),
    ("pipelines_text_rare", "/pipelines", {"q": "{fail}"}),
    ("pipelines_text_none", "/pipelines", {"q": "no-such-text-anywhere"}),
    ("pipelines_sort_finished_desc", "/pipelines", {"sort": "finished", "order": "desc"}),
    ("pipelines_sort_duration", "/pipelines", {"sort": "duration", "order": "desc"}),
    ("pipelines_sort_attempts", "/pipelines", {"sort": "attempts", "order": "desc"}),
    ("pipelines_sort_key", "/pipelines", {"sort": "key"}),
    ("timeline", "/timeline", {}),
    ("failures", "/failures", {}),
    ("errors", "/errors", {}),
    ("pipeline", "/pipeline", {"pipeline_id": "{pid}"}),
    ("pipeline_failed", "/pipeline", {"pipeline_id": "{fail}"}),
    ("events", "/events", {}),
    ("events_of_pipeline", "/events", {"pipeline_id": "{pid}"}),
    ("logs", "/logs", {}),
    ("logs_of_pipeline", "/logs", {"pipeline_id": "{pid}"}),
)


def _fill(params: dict[str, str], values: dict[str, str]) -> dict[str, str]:
    return {k: v.format(**values) if "{" in v else v for k, v in params.items()}


def _timed(call: Callable[[], Any]) -> tuple[float, float, int, Any]:
    """Wall seconds, CPU seconds and peak Python bytes allocated by ``call``, and its answer."""
    gc.collect()
    tracemalloc.start()
    wall, cpu = time.perf_counter(), time.process_time()
    answer = call()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return wall, cpu, peak, answer


def _probe_ids(api: Any) -> dict[str, str]:
    """A pipeline, a failed pipeline and the second page's cursor to ask about."""
    first = api.call("/pipelines", {})
    failed = api.call("/pipelines", {"state": "failed", "limit": "1"})
    pid = first["rows"][0]["pipeline_id"] if first["rows"] else ""
    fail = failed["rows"][0]["pipeline_id"] if failed["rows"] else pid
    return {"pid": pid, "fail": fail, "next": first.get("next") or ""}


def time_pipeline_endpoints(store_path: str | os.PathLike[str]) -> dict[str, Any]:
    """``{name: {"cold_s", "warm_s", "cold_cpu_s", "warm_cpu_s", "peak_py_bytes", "rows"}}`` for
    each of ``ENDPOINTS`` on the store at ``store_path`` (its latest run)."""
    from pyattacker_plugins.serve.api import Api  # (the viewer: imported only when timing it)

    location = os.fspath(store_path)
    values = _probe_ids(Api(location, answer_ttl_s=0))
    out: dict[str, Any] = {}
    for name, path, params in ENDPOINTS:
        filled = _fill(params, values)
        api = Api(location, answer_ttl_s=0)  # cold: its own connection, nothing cached
        cold, cold_cpu, peak, answer = _timed(lambda a=api, p=path, f=filled: a.call(p, f))
        warm, warm_cpu, peak2, _ = _timed(lambda a=api, p=path, f=filled: a.call(p, f))
        rows = answer.get("rows", answer.get("groups", answer.get("buckets", [])))
        out[name] = {
            "path": path,
            "params": filled,
            "cold_s": round(cold, 4),
            "warm_s": round(warm, 4),
            "cold_cpu_s": round(cold_cpu, 4),
            "warm_cpu_s": round(warm_cpu, 4),
            "peak_py_bytes": max(peak, peak2),
            "rows": len(rows) if isinstance(rows, list) else None,
        }
    return out


def time_export(
    store_path: str | os.PathLike[str],
    *,
    kinds: tuple[str, ...] = ("pipelines", "tasks", "attempts", "results"),
    formats: tuple[str, ...] = ("jsonl", "csv"),
    seconds: float = 10.0,
) -> dict[str, Any]:
    """Rows/s of ``export --rows KIND`` in each format, streamed for about ``seconds`` each (to
    ``/dev/null``), on the store's latest run; and the peak RSS of the process after each."""
    from pyattacker.store.codecs import CodecRegistry
    from pyattacker.views.blobs import BlobReader, ViewCodecs
    from pyattacker.views.common import choose_run, read_only_store
    from pyattacker.views.export import _WRITERS, iter_kind

    location = os.fspath(store_path)
    out: dict[str, Any] = {}
    for kind in kinds:
        for fmt in formats:
            with read_only_store(location) as store, open(os.devnull, "w", encoding="utf-8") as sink:
                run_id = choose_run(store, None).run_id
                writer = _WRITERS[fmt](sink, kind)  # what ``export_stores`` writes with
                codecs = ViewCodecs(CodecRegistry.from_plugins(), BlobReader(store, None))
                rows, cpu, start = 0, time.process_time(), time.perf_counter()
                for row in iter_kind(store, kind, run_id=run_id, codecs=codecs):
                    writer.write(row)
                    rows += 1
                    if rows % 1000 == 0 and time.perf_counter() - start > seconds:
                        break
                writer.close()
                wall, cpu = time.perf_counter() - start, time.process_time() - cpu
            out[f"{kind}.{fmt}"] = {
                "rows": rows,
                "wall_s": round(wall, 3),
                "cpu_s": round(cpu, 3),
                "rows_per_s": round(rows / wall),
                "rows_per_cpu_s": round(rows / cpu) if cpu else None,
                "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m benchmarks.scale_endpoints", description=__doc__.split("\n")[0]
    )
    ap.add_argument("store", help="a SQLite store (e.g. one built by benchmarks/scale_store.py)")
    ap.add_argument("--out", type=Path, default=None, help="also write the results as JSON here")
    ap.add_argument("--export-seconds", type=float, default=10.0, help="per kind and format; 0 = skip")
    ap.add_argument("--only", default="", help="comma-separated: endpoints, export")
    args = ap.parse_args(argv)
    only = set(filter(None, args.only.split(",")))
    result: dict[str, Any] = {"store": args.store}
    if not only or "endpoints" in only:
        result["endpoints"] = time_pipeline_endpoints(args.store)
    if args.export_seconds > 0 and (not only or "export" in only):
        result["export"] = time_export(args.store, seconds=args.export_seconds)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
