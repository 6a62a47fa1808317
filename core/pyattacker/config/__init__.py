"""Config files: loading, the schema with every error by field path, ``use:`` resolution,
and building the run's settings, pools, template and seeds from a checked config.

Layer 6: imports engine, shard, flow and below.
"""
