"""An example third-party store for pyattacker: ``snapshot:path/to/folder``."""
