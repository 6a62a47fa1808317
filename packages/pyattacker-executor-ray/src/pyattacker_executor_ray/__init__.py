"""pyattacker-executor-ray: run the shards of ``pyattacker run --shards N`` on a Ray cluster.

``--executor ray`` hands each shard (the same ``pyattacker run ... --shard i/N`` command the
local executor runs) to a Ray actor on whichever node has room; the kernel's shard loop
(assignment, capacity slots, signals, the merged report) is unchanged. See README.md.
"""

__version__ = "0.1.0"
