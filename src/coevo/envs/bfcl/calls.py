"""The bfcl action grammar: BFCL's Python call syntax, parsed with `ast` and literals only.

    parse_calls("[cd(folder='document'), mkdir(dir_name='temp')]")   # -> [Call, Call]
    parse_answer("answer[The file is moved.]")                       # -> "The file is moved."

The BFCL package `eval`s call strings; nothing here ever does. A call is accepted only when it
is a bare function name applied to literal arguments (strings, numbers, lists, tuples, dicts,
sets, True/False/None), so `__import__('os')`, attribute access, lambdas, nested calls and names
are refused with a message the agent can act on. Whether the function exists and takes those
arguments is the back-end's question (`coevo.envs.bfcl.backend`).
"""

from __future__ import annotations

import ast
import re
import warnings
from dataclasses import dataclass, field
from typing import Any

# "answer[...]" ends the agent's part of a user turn; any text inside the brackets is its reply.
_ANSWER = re.compile(r"^answer\s*\[(.*)\]\s*$", re.DOTALL | re.IGNORECASE)
# Models often wrap code in a fence: ```python ... ``` (the language tag is optional).
_FENCE = re.compile(r"^```[ \t]*(?:python|py)?[ \t]*\n?(.*?)\n?```$", re.DOTALL | re.IGNORECASE)

CALL_FORMAT = "[func_name1(param1=value1, param2=value2), func_name2(param=value)]"


class CallSyntaxError(ValueError):
    """An action that is not a list of literal calls; the message is shown to the agent."""


@dataclass(frozen=True)
class Call:
    """One function call of an action, with its arguments as Python values."""

    name: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        parts = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{self.name}({', '.join(parts)})"


def parse_answer(action: str) -> str | None:
    """The reply inside `answer[...]`, or None when the action is not an answer."""
    match = _ANSWER.match(action.strip())
    return match.group(1).strip() if match else None


def parse_calls(action: str) -> list[Call]:
    """The calls of an action (a list of calls, or one bare call); raises CallSyntaxError."""
    text = action.strip()
    fence = _FENCE.match(text)
    if fence:
        text = fence.group(1).strip()
    try:
        # A model's text such as `1abc` makes Python warn (invalid decimal literal) to stderr
        # before it fails or parses: the agent hears about the problem from the observation.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, OverflowError) as exc:  # ValueError: a NUL byte
        reason = exc.msg if isinstance(exc, SyntaxError) else str(exc)
        raise CallSyntaxError(
            f"Could not parse the action as function calls ({reason}). Write the calls as "
            f"{CALL_FORMAT}, or answer[<your reply>] to end your turn."
        ) from None
    except (RecursionError, MemoryError):
        raise CallSyntaxError("The action is nested too deeply to parse.") from None
    body = tree.body
    nodes = body.elts if isinstance(body, ast.List | ast.Tuple) else [body]
    if not nodes:
        raise CallSyntaxError(
            "An empty list calls nothing. Call at least one function, or write "
            "answer[<your reply>] to end your turn."
        )
    return [_call(node, text) for node in nodes]


def _call(node: ast.expr, source: str) -> Call:
    if not isinstance(node, ast.Call):
        raise CallSyntaxError(
            f"{_segment(source, node)!r} is not a function call. Write the calls as {CALL_FORMAT}."
        )
    if not isinstance(node.func, ast.Name):
        raise CallSyntaxError(
            f"{_segment(source, node)!r}: only functions from the list can be called, by their bare name "
            "(no attributes, methods, subscripts or expressions)."
        )
    name = node.func.id
    if name.startswith("_"):
        raise CallSyntaxError(f"{name!r} is not an available function.")
    args = []
    for arg in node.args:
        if isinstance(arg, ast.Starred):
            raise CallSyntaxError(f"{name}: *arguments are not allowed; pass each value.")
        args.append(_literal(arg, name, source))
    kwargs = {}
    for keyword in node.keywords:
        if keyword.arg is None:
            raise CallSyntaxError(f"{name}: **arguments are not allowed; name each argument.")
        if keyword.arg in kwargs:
            raise CallSyntaxError(f"{name}: argument {keyword.arg!r} is given twice.")
        kwargs[keyword.arg] = _literal(keyword.value, name, source)
    return Call(name, tuple(args), kwargs)


def _literal(node: ast.expr, name: str, source: str) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        raise CallSyntaxError(
            f"{name}: argument {_segment(source, node)!r} is not a literal value. Arguments must be strings, "
            "numbers, lists, tuples, dicts, True, False or None."
        ) from None


def _segment(source: str, node: ast.expr, limit: int = 80) -> str:
    """The source text of `node`, shortened, for an error message (only errors pay for it)."""
    text = ast.get_source_segment(source, node) or ""
    return text if len(text) <= limit else text[: limit - 3] + "..."
