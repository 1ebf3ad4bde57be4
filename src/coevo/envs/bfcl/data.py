"""BFCL v4 multi-turn entries from the `bfcl-eval` package: tasks, splits and tool docs.

The package ships four categories of 200 entries: `base`, `long_context`, `miss_func` and
`miss_param`. They are four variants of the same 200 scenarios (entry N of every category starts
from the same request and, nearly always, the same initial state), so the splits are drawn by
scenario: a seeded draw holds `n_test` scenarios out; `train` is the `base` entries of the
others, `test_seen` the `base` entries of the held-out ones, and `test_unseen` their three other
variants (interleaved by category, so the first tasks of the split cover all three). No test
scenario is trained on in any variant.

A Task carries its whole entry in `data`, so an episode needs nothing but the task (a task made
elsewhere, from an exploration say, plays the same way):

    entry_id, category, long_context, involved_classes, initial_config,
    turns: the user messages of each turn (a turn where withheld functions arrive has none),
    missed_function: {turn index (str): [function names withheld until that turn]},
    ground_truth: the package's call strings per turn.
"""

from __future__ import annotations

import functools
import importlib
import json
import random
from pathlib import Path
from types import ModuleType
from typing import Any

from coevo.envs.base import EnvError
from coevo.trajectory import Task

CATEGORIES: tuple[str, ...] = ("base", "long_context", "miss_func", "miss_param")
UNSEEN: tuple[str, ...] = ("long_context", "miss_func", "miss_param")
VERSION_PREFIX = "BFCL_v4"
# The eight back-ends of the multi-turn categories (the package's other classes serve web
# search and memory categories, which need the network or files).
CLASSES: tuple[str, ...] = (
    "GorillaFileSystem",
    "MathAPI",
    "MessageAPI",
    "TwitterAPI",
    "TicketAPI",
    "TradingBot",
    "TravelAPI",
    "VehicleControlAPI",
)
INSTALL = (
    "pip install --no-deps bfcl-eval==2026.3.23 && pip install mpmath==1.3.0 filelock tenacity "
    "tree_sitter==0.21.3 tree-sitter-java==0.21.0 tree-sitter-javascript==0.21.4 "
    "(`make` installs them; the `bfcl` extra lists all but bfcl-eval, whose own dependencies "
    "are not needed)"
)
# The package adds this to every function description by default (its language hint).
PYTHON_HINT = " Note that the provided function is in Python 3 syntax."


def package() -> ModuleType:
    """The installed `bfcl_eval` package, or a clear error saying how to install it."""
    try:
        return importlib.import_module("bfcl_eval")
    except ImportError as exc:
        raise EnvError(f"The bfcl env needs the bfcl-eval package ({exc}): {INSTALL}.") from exc


def data_dir() -> Path:
    return Path(package().__file__).parent / "data"


def _jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@functools.cache
def load_entries(category: str) -> tuple[dict[str, Any], ...]:
    """The entries of one category as task data (see the module docstring), in id order."""
    if category not in CATEGORIES:
        raise EnvError(f"Unknown bfcl category {category!r}: use one of {', '.join(CATEGORIES)}.")
    root = data_dir()
    name = f"{VERSION_PREFIX}_multi_turn_{category}.json"
    entries = _jsonl(root / name)
    truth = {e["id"]: e["ground_truth"] for e in _jsonl(root / "possible_answer" / name)}
    out = []
    for entry in entries:
        turns = [[m["content"] for m in messages] for messages in entry["question"]]
        out.append(
            {
                "entry_id": entry["id"],
                "category": category,
                "long_context": category == "long_context",
                "involved_classes": list(entry["involved_classes"]),
                "initial_config": entry["initial_config"],
                "turns": turns,
                "missed_function": dict(entry.get("missed_function") or {}),
                "ground_truth": truth[entry["id"]],
            }
        )
    out.sort(key=lambda d: int(d["entry_id"].rsplit("_", 1)[1]))
    return tuple(out)


@functools.cache
def _docs(class_name: str, hint: bool) -> tuple[dict[str, Any], ...]:
    from bfcl_eval.constants.executable_backend_config import MULTI_TURN_FUNC_DOC_FILE_MAPPING

    docs = _jsonl(data_dir() / "multi_turn_func_doc" / MULTI_TURN_FUNC_DOC_FILE_MAPPING[class_name])
    for doc in docs:
        doc["description"] += PYTHON_HINT if hint else ""
    return tuple(docs)


def tool_docs(
    classes: list[str],
    only: set[str] | None = None,
    skip: set[str] = frozenset(),
    hint: bool = True,
) -> list[dict[str, Any]]:
    """The function docs of these back-end classes, in order, as the package shows them to a
    model: all of them, or those named in `only`, less those in `skip`; `hint` adds the
    package's Python hint to each description (it does not to functions added in a later
    turn). Shared: read only."""
    unknown = [c for c in classes if c not in CLASSES]
    if unknown:
        raise EnvError(f"Unknown bfcl back-end {unknown[0]!r}: use one of {', '.join(CLASSES)}.")
    return [
        d
        for c in classes
        for d in _docs(c, hint)
        if (only is None or d["name"] in only) and d["name"] not in skip
    ]


def split_scenarios(seed: int, n_test: int) -> tuple[list[int], list[int]]:
    """Scenario indices (0-199) for training and for testing, a seeded draw."""
    n = len(load_entries("base"))
    if not 0 < n_test < n:
        raise EnvError(f"bfcl option n_test must be between 1 and {n - 1}, got {n_test!r}.")
    order = list(range(n))
    random.Random(seed).shuffle(order)
    return sorted(order[n_test:]), sorted(order[:n_test])


def build_tasks(seed: int, n_test: int) -> dict[str, list[Task]]:
    """The three splits: `train` and `test_seen` from `base`, `test_unseen` from the rest."""
    train, test = split_scenarios(seed, n_test)
    base = load_entries("base")
    unseen = [load_entries(c)[i] for i in test for c in UNSEEN]
    chosen = {
        "train": [base[i] for i in train],
        "test_seen": [base[i] for i in test],
        "test_unseen": unseen,
    }
    return {split: [task_of(e, split) for e in entries] for split, entries in chosen.items()}


def task_of(entry: dict[str, Any], split: str) -> Task:
    first = next((t for t in entry["turns"] if t), [""])
    return Task(
        id=f"bfcl/{split}/{entry['entry_id']}",
        env="bfcl",
        split=split,
        instruction="\n".join(first),
        data=entry,
    )
