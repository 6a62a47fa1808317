"""The ``pyattacker`` command line: one module per command group.

Layer 7, the top: imports anything below it.
"""
