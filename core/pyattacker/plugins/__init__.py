"""Plugins: the hook specs, discovery and composition, per-kind registries, the discovery cache.

Layer 2: imports only the vocabulary (errors, model, digest, clock, paths).
"""
