"""The back-end of one episode: the package's classes, loaded with an entry's initial state.

Each `Backend` owns its own instances (one per involved class), so concurrent episodes never
share state; dropping the Backend releases it. The package's own executor keeps instances in
module globals and `eval`s call strings; this one dispatches parsed `Call`s to the instances'
public methods by name, after checking the arguments against the method's signature.

Results are rendered as the package renders them (a dict as JSON, anything else with `str`, an
exception as "Error during execution: ..."), so the package's response check compares like with
like.
"""

from __future__ import annotations

import copy
import decimal
import importlib
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from coevo.envs.bfcl.calls import Call

# Arguments that make a back-end compute for minutes (measured: logarithm at precision 20,000
# and square_root at 100,000 already take seconds, benchmarks/results/env_speed.md; an integer
# power or round grows with its exponent).
# The ground truth stays far below these (precision <= 10).
LIMITS: dict[tuple[str, str], dict[str, float]] = {
    ("MathAPI", "logarithm"): {"precision": 1_000},
    ("MathAPI", "square_root"): {"precision": 1_000},
    ("MathAPI", "power"): {"exponent": 10_000},
    ("MathAPI", "round_number"): {"decimal_places": 1_000},
}


@dataclass(frozen=True)
class Outcome:
    """What one call did: its result text, whether it ran, and what was wrong (None: nothing)."""

    call: Call
    result: str
    executed: bool
    error: str | None = None


def _load_class(name: str) -> type:
    from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING

    return getattr(importlib.import_module(CLASS_FILE_PATH_MAPPING[name]), name)


def render_result(value: Any) -> str:
    """A call's return value as the package's executor writes it."""
    try:
        if isinstance(value, str):
            return value
        if isinstance(value, dict):
            try:
                return json.dumps(value)
            except (TypeError, ValueError):
                return str(value)
        return str(value)
    except Exception as exc:  # e.g. an int too long for str(): shown, never raised
        return f"Error during execution: {exc}"


class Backend:
    """The instances of one episode, with their public methods by name."""

    def __init__(
        self, classes: list[str], initial_config: dict[str, Any], long_context: bool
    ) -> None:
        from bfcl_eval.constants.executable_backend_config import STATELESS_CLASSES

        self.instances: dict[str, Any] = {}
        self.methods: dict[str, tuple[str, Callable[..., Any]]] = {}
        for name in classes:
            instance = _load_class(name)()
            if name not in STATELESS_CLASSES:
                # The package loads a deep copy too: the scenario's dicts become the state.
                instance._load_scenario(
                    copy.deepcopy(initial_config.get(name, {})), long_context=long_context
                )
            self.instances[name] = instance
            for method_name, method in inspect.getmembers(instance, inspect.ismethod):
                if not method_name.startswith("_"):
                    # As in the package, a later class's method of the same name wins.
                    self.methods[method_name] = (name, method)

    def call(self, call: Call) -> Outcome:
        """Run one call; every problem, the back-end's exceptions included, is an Outcome."""
        found = self.methods.get(call.name)
        if found is None:
            hint = (
                "write answer[<your reply>] to end your turn"
                if call.name.lower() == "answer"
                else "the functions are listed in the instructions"
            )
            return Outcome(call, "", False, f"there is no function named {call.name!r}; {hint}")
        class_name, method = found
        signature = _signature(class_name, call.name, method)
        try:
            bound = signature.bind(*call.args, **call.kwargs)
        except TypeError as exc:
            return Outcome(call, "", False, f"{exc}; {call.name} takes ({_parameters(signature)})")
        for param, limit in LIMITS.get((class_name, call.name), {}).items():
            value = bound.arguments.get(param)
            if isinstance(value, int | float) and abs(value) > limit:
                return Outcome(
                    call, "", False,
                    f"{param}={value!r} is above this env's limit of {limit:g} for "
                    f"{call.name} (a guard against calls that run for minutes)",
                )  # fmt: skip
        # MathAPI sets the process's mpmath and decimal precision: keep them as they were.
        import mpmath

        dps = mpmath.mp.dps
        try:
            with decimal.localcontext():
                value = method(*bound.args, **bound.kwargs)
        except Exception as exc:
            text = f"Error during execution: {exc}"
            return Outcome(call, text, True, text)
        finally:
            mpmath.mp.dps = dps
        return Outcome(call, render_result(value), True)


_SIGNATURES: dict[tuple[str, str], inspect.Signature] = {}


def _signature(class_name: str, name: str, method: Callable[..., Any]) -> inspect.Signature:
    """A method's signature, computed once per class and name (it is the same on every
    instance, and computing it costs more than most calls)."""
    key = (class_name, name)
    if key not in _SIGNATURES:
        _SIGNATURES[key] = inspect.signature(method)
    return _SIGNATURES[key]


def _parameters(signature: inspect.Signature) -> str:
    """`a, b=1`: a method's parameters without the annotations."""
    return ", ".join(
        p.name if p.default is inspect.Parameter.empty else f"{p.name}={p.default!r}"
        for p in signature.parameters.values()
    )
