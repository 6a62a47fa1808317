"""The ``pyattacker`` command line: one module per command group.

``main`` holds the group and its lazy command table; the commands are in ``run`` (run,
resume), ``shard`` (run --shards), ``setup`` (validate, init), ``demo``, ``views`` (report,
export, watch) and ``plugins``. What several of them share: ``common`` (output, flag checks),
``execute`` (a run in this process and its summary), ``report_text``, ``suites`` (the refused
suite flags) and ``process_end``. Exit codes are ``pyattacker.errors.ExitCode``.

Layer 7, the top: imports anything below it.
"""
