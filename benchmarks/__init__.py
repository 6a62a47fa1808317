"""pyattacker's benchmark suite: the product against the baseline peer and the floor runner.

Run ``python -m benchmarks`` (``--quick`` for the CI smoke version). Every run is a fresh
process and every comparison a ratio within one round, because the machine is noisy.
See docs/performance.md for the method and the latest table.
"""
