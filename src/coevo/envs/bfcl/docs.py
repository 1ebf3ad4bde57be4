"""How the prompt lists an entry's functions: the env option `docs`.

- `package`: the package's indented JSON, as BFCL shows it (about 7,100 SmolLM2 tokens of
  prompt at the median entry, 9,800 at most: more than the model's 8,192-token context);
- `compact`: the same JSON without the response schemas, on one line (about half of it);
- `signatures`: one line per function, a Python signature with the parameters' types,
  defaults and listed options, and the first sentence of its description, under one line per
  back-end saying what it is: about a fifth of the package's prompt, for small contexts.
  Parameter descriptions are left out (they repeat the name, or say a format such as
  YYYY-MM-DD that the agent meets in the results).
"""

from __future__ import annotations

import json
import re
from typing import Any

DOCS = ("package", "compact", "signatures")
FORMAT = {"package": "json", "compact": "json", "signatures": "python"}
"""The word the prompt's "a list of functions in {format} format" gets."""

_TYPES = {"string": "str", "integer": "int", "float": "float", "boolean": "bool", "dict": "dict"}
_SPLIT = "Tool description:"
_SENTENCE = re.compile(r"(?<=[a-z0-9)])\.(\s|$)")
_OPTIONS = (
    re.compile(r"\[Enum\]:\s*(\[.*?\]|[^.\n]+)", re.I),
    re.compile(r"(?:options are|here are the options)\s*:\s*([^.\n]+)", re.I),
)


def options(description: str) -> list[str]:
    """The values a parameter's description lists (`[Enum]: ["on", "off"]`, `Options are:
    economy, business, first.`), or none."""
    for pattern in _OPTIONS:
        found = pattern.search(description)
        if found is None:
            continue
        text = found.group(1).strip()
        try:
            values = json.loads(text)
        except ValueError:
            values = [v.strip().strip("'\"") for v in text.split(",")]
        return [str(v) for v in values if str(v).strip()]
    return []


def render_docs(docs: list[dict[str, Any]], style: str) -> str:
    """Function docs as the prompt shows them, in `style` (see the module docstring)."""
    if style == "compact":
        docs = [{k: v for k, v in d.items() if k != "response"} for d in docs]
        return json.dumps(docs, ensure_ascii=False, separators=(",", ":"))
    if style == "signatures":
        lines, intro = [], None
        for doc in docs:
            head, _, _ = doc["description"].rpartition(_SPLIT)
            if head.strip() and head.strip() != intro:
                intro = head.strip()
                lines.append(f"# {first_sentence(intro.removeprefix('This tool belongs to '))}")
            lines.append(signature(doc))
        return "\n".join(lines)
    return json.dumps(docs, indent=4)


def signature(doc: dict[str, Any]) -> str:
    """`name(a: int, mode: 'on'|'off' = 'on')  # What it does.`"""
    params = doc["parameters"]
    required = set(params.get("required", []))
    parts = []
    for name, spec in params["properties"].items():
        part = f"{name}: {_type(spec)}"
        if name not in required:
            default = spec.get("default")
            part += f" = {'None' if default in (None, 'None') else repr(default)}"
        parts.append(part)
    _, _, text = doc["description"].rpartition(_SPLIT)
    return f"{doc['name']}({', '.join(parts)})  # {first_sentence(text)}"


def _type(spec: dict[str, Any]) -> str:
    listed = options(spec.get("description", ""))
    if listed and spec.get("type") == "string":
        return "|".join(repr(v) for v in listed)
    if spec.get("type") == "array":
        items = spec.get("items", {})
        inner = (
            "|".join(repr(v) for v in listed) if listed else _TYPES.get(items.get("type"), "any")
        )
        return f"list[{inner}]"
    return _TYPES.get(spec.get("type", ""), "any")


def first_sentence(text: str) -> str:
    """The first sentence of `text`, the package's Python hint left out."""
    text = " ".join(text.split()).removesuffix(
        " Note that the provided function is in Python 3 syntax."
    )
    found = _SENTENCE.search(text)
    return text[: found.start() + 1] if found else text
