"""pyattacker: run tens of thousands of resumable pipelines, observably and politely."""

from __future__ import annotations

__version__ = "0.1.0"
