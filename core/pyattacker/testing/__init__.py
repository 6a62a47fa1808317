"""Test kits for plugin authors: contract suites a plugin package runs in its own tests.

``StoreContract`` and ``ArtifactBackendContract`` are test classes to subclass (see their
modules); ``pyattacker.testing.rows`` builds records for store tests. Installing pyattacker
also registers a pytest plugin (``pyattacker.testing.pytest_plugin``) with two fixtures:
``pyattacker_home`` (a private ``PYATTACKER_HOME`` per test) and ``pyattacker_plugins`` (the
plugins discovered from what is installed, fresh per test). pytest is needed only here.
"""

from __future__ import annotations

from pyattacker.testing.backend_contract import ArtifactBackendContract
from pyattacker.testing.store_contract import StoreContract, StoreFactory

__all__ = ["ArtifactBackendContract", "StoreContract", "StoreFactory"]
