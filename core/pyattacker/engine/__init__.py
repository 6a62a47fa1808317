"""The engine: the runner as a front object over its parts (admission, resume, checkpoints,
outcomes, scheduling, signals, telemetry, handoff control), the task context, run settings.

Layer 5: imports flow and below; knows nothing of config files, views or the command line.
"""
