"""Read-only views of stores: merge (fold, store_report, shard_report), export, stats, live
aggregates, watch, progress.

Layer 6: imports shard, store and below (independent of config); never writes a store.
"""
