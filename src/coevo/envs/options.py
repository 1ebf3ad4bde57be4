"""Check an env's options against its constructor before it is built: one sentence a mistake.

`-o n_products=abc` or a misspelt option in a recipe's `env.options` would otherwise fail deep
inside the env (`'<' not supported between 'str' and 'int'`) or as Python's TypeError about
keyword arguments. The constructor's signature says which options exist and its annotations
what each must be; values are checked as recipe values are (`coevo.config.check_value`).
"""

from __future__ import annotations

import difflib
import inspect
import typing
from collections.abc import Callable
from typing import Any

from coevo.config import ConfigError, check_value


class OptionError(ValueError):
    """An env option that does not exist or has a value of the wrong type."""


def check_options(
    name: str, factory: Callable[..., Any], options: dict[str, Any]
) -> dict[str, Any]:
    """`options` as `factory` takes them (1 -> 1.0 for a float); raise OptionError naming the
    option that `factory` does not have or whose value is of the wrong type."""
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # no signature to read (a C extension): let it decide
        return options
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    named = [n for n, p in params.items() if p.kind in kinds]
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    for key in options:
        if key not in named and not takes_any:
            close = difflib.get_close_matches(key, named, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise OptionError(
                f"env {name!r} has no option {key!r}: {hint}its options are "
                f"{', '.join(named) or 'none'}."
            )
    hints = _hints(factory)
    checked = dict(options)
    for key, value in options.items():
        if key in hints:
            try:
                checked[key] = check_value(value, hints[key], f"env option {key}")
            except ConfigError as exc:
                raise OptionError(f"{str(exc).rstrip('.')} (env {name!r}).") from None
    return checked


def _hints(factory: Callable[..., Any]) -> dict[str, Any]:
    target = factory.__init__ if isinstance(factory, type) else factory
    try:
        return typing.get_type_hints(target)
    except Exception:  # annotations that do not resolve: check the names only
        return {}
