"""The plugin module: registers the ``ray`` shard executor.

Every pyattacker process imports every plugin module, so this one imports neither Ray nor the
executor: both load when ``--executor ray`` builds one.
"""

from __future__ import annotations

from typing import Any

from pyattacker import hookimpl
from pyattacker.plugins.hookspecs import Register

#: the version of the plugin API this module was written for (docs/plugins.md, "The plugin API")
PYATTACKER_PLUGIN_API = 2


def ray_executor(**options: Any) -> Any:
    """``--executor ray [--executor-option KEY=VALUE ...]``: connect to (or start) Ray."""
    from pyattacker_executor_ray.executor import RayExecutor  # Ray only when the executor is used

    return RayExecutor(**options)


@hookimpl
def pyattacker_shard_executors(register: Register) -> None:
    register("ray", ray_executor)
