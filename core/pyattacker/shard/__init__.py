"""Shards: which pipeline runs in which process, the shard-executor interface, forking.

Layer 5: imports store, plugins and the vocabulary (independent of the engine).
"""
