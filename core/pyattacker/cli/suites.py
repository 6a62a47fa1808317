"""The experiment-suite flags of the CLI reference, refused by name.

Experiment suites are not supported in this version (a ``suite:``/``experiments:`` config is
refused by ``check_config``). Their flags (``--experiment``, ``--output-root``,
``--by-experiment``) are hidden options that refuse any use with one line saying what is
missing and what to do instead (exit 2), rather than click's generic "No such option".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import rich_click as click

from pyattacker.errors import ConfigError

__all__ = ["SUITES_UNSUPPORTED", "refuse_suite_flags"]

SUITES_UNSUPPORTED = (
    "experiment suites are not supported in this version; run each experiment's config on its"
    " own, each into its own store (pyattacker run -c MEMBER.yaml --store OUT/MEMBER.db)"
)

#: flag -> whether it takes a value (``--by-experiment`` is a switch)
_TAKES_VALUE = {"--experiment": True, "--output-root": True, "--by-experiment": False}


def _refuse(ctx: click.Context, param: click.Parameter, value: Any) -> None:
    if value:  # None, () or False: the flag was not given
        raise ConfigError(f"{param.opts[0]}: {SUITES_UNSUPPORTED}")


def refuse_suite_flags(*flags: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Hidden options named ``flags`` that refuse any use with one line (``ConfigError``)."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        for flag in reversed(flags):
            takes_value = _TAKES_VALUE[flag]
            fn = click.option(
                flag,
                is_flag=not takes_value,
                multiple=takes_value,
                hidden=True,
                expose_value=False,
                callback=_refuse,
                metavar="ID" if takes_value else None,
            )(fn)
        return fn

    return decorate
