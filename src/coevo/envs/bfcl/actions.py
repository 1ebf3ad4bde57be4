"""The calls an explorer without a language model may make in a bfcl episode: the listed
functions with arguments drawn from the episode's state and the docs' types.

Where an argument comes from, first that applies:
- the options its description lists (`[Enum]: ...`, `Options are: ...`), or `CHOICES`
  where the docs say them in prose (`Buy/Sell`) or not at all;
- `SOURCES`: values the back-ends hold now or returned earlier in the episode, by the name
  they are kept under (`Pool`): the file and folder names of the current directory, tweet,
  ticket, order, booking and card ids, user ids and names, stock symbols, the credentials the
  scenario holds, the airports;
- its type: numbers from the state and a few small ones, True/False, dates, short texts made
  of the state's words.
Each function gets `VARIANTS` draws, seeded by the episode's place (task, turn, step), so the
list is the same whenever the state is. Every call binds to its function's signature; whether
the back-end then succeeds is its own business (a wrong id, a closed market), as with any agent.
"""

from __future__ import annotations

import json
import random
import re
from collections import defaultdict
from typing import Any

from coevo.envs.bfcl.backend import Backend
from coevo.envs.bfcl.calls import Call
from coevo.envs.bfcl.docs import options

VARIANTS = 2
"""Draws per function with arguments (one call for a function without)."""
_MAX_TEXT = 80
"""Longer state strings (file contents, messages) give words, not whole values."""
_DEPTH = 4

# Parameter -> the pool names its values come from.
SOURCES: dict[str, tuple[str, ...]] = {
    "file_name": ("files",),
    "file_name1": ("files",),
    "file_name2": ("files",),
    "source": ("files", "dirs"),
    "destination": ("dirs", "new_names"),
    "folder": ("dirs", "up"),
    "dir_name": ("dirs",),
    "path": ("dirs", "here"),
    "name": ("files", "dirs"),
    "pattern": ("words",),
    "keyword": ("words",),
    "tweet_id": ("tweets.keys", "tweet_id"),
    "ticket_id": ("ticket_queue.id", "ticket_id"),
    "order_id": ("orders.keys", "order_id"),
    "symbol": ("stocks.keys", "watch_list", "symbol"),
    "stock": ("stocks.keys", "symbol"),
    "stocks": ("stocks.keys", "watch_list"),
    "card_id": ("credit_card_list.keys", "card_id"),
    "booking_id": ("booking_record.keys", "booking_id"),
    "insurance_id": ("insurance_id",),
    "access_token": ("access_token",),
    "receiver_id": ("user_map.values", "user_id"),
    "user_id": ("user_map.values", "user_id"),
    "user_name": ("user_map.keys",),
    "user": ("user_map.keys",),
    "username": ("username",),
    "password": ("password",),
    "username_to_follow": ("following_list", "username"),
    "username_to_unfollow": ("following_list",),
    "mentioned_usernames": ("following_list", "username"),
    "user_first_name": ("user_first_name",),
    "first_name": ("user_first_name",),
    "user_last_name": ("user_last_name",),
    "last_name": ("user_last_name",),
    "travel_from": ("airports",),
    "travel_to": ("airports",),
    "cityA": ("zipcode", "zipcodes"),
    "cityB": ("zipcode", "zipcodes"),
}
# Per function, where the generic source would be wrong: a new name for what is created.
OVERRIDES: dict[tuple[str, str], tuple[str, ...]] = {
    ("mkdir", "dir_name"): ("new_names",),
    ("touch", "file_name"): ("new_names",),
    ("echo", "file_name"): ("files", "new_names"),
    ("get_symbol_by_name", "name"): ("company_names",),
    ("add_contact", "user_name"): ("new_people",),
}
# Choices the docs give in prose, or not at all (the back-end's code names them).
CHOICES: dict[tuple[str, str], tuple[str, ...]] = {
    ("wc", "mode"): ("l", "w", "c"),
    ("place_order", "order_type"): ("Buy", "Sell"),
    ("book_flight", "travel_class"): ("economy", "business", "first"),
    ("si_unit_conversion", "unit_in"): ("km", "m", "cm"),
    ("si_unit_conversion", "unit_out"): ("km", "m", "cm"),
    ("imperial_si_conversion", "unit_in"): ("cm", "in", "m", "ft", "km", "miles"),
    ("imperial_si_conversion", "unit_out"): ("cm", "in", "m", "ft", "km", "miles"),
    ("get_user_tickets", "status"): ("Open", "Closed"),
    ("purchase_insurance", "insurance_type"): ("comprehensive", "basic"),
    ("get_zipcode_based_on_city", "city"): ("Rivermist", "Stonebrook", "Maplecrest", "Silverpine"),
}
NEW_NAMES = ("notes.txt", "summary.txt", "archive", "backup", "draft.md", "data.csv")
NEW_PEOPLE = ("Eve", "Frank", "Grace")
ZIPCODES = ("83214", "74532", "56108", "62947")  # VehicleControlAPI's cities
COMPANY_NAMES = ("Apple", "Google", "Tesla", "Microsoft", "Nvidia", "Amazon", "Zeta Corp")
DATES = ("2024-11-15", "2024-12-01", "2025-01-10")
NUMBERS = (1, 2, 3, 5, 10)
FLOATS = (0.5, 1.0, 2.5, 10.0, 100.0)
TEXTS = ("Please check this.", "Thanks for the update.", "Status report")
_WORD = re.compile(r"[A-Za-z][A-Za-z]{3,}")


class Pool:
    """Values by the name they are kept under, from the back-ends' public state and from the
    results the episode's calls returned (JSON ones), plus the current directory's names."""

    def __init__(self, backend: Backend, results: list[str]) -> None:
        self.values: dict[str, list[Any]] = defaultdict(list)
        self.words: list[str] = []
        for instance in backend.instances.values():
            for name, value in vars(instance).items():
                if not name.startswith("_"):
                    self._collect(name, value, 0)
            directory = getattr(instance, "_current_dir", None)
            if directory is not None:  # GorillaFileSystem: what cd, cat, rm ... can reach now
                for name, item in directory.contents.items():
                    self.values["dirs" if hasattr(item, "contents") else "files"].append(name)
                    self.words += _WORD.findall(str(getattr(item, "content", "")))[:20]
                if directory.parent is not None:
                    self.values["up"].append("..")
                self.values["here"].append(".")
            airports = getattr(instance, "list_all_airports", None)
            if callable(airports):  # TravelAPI's fixed list
                self.values["airports"] += list(airports())
        for text in results:
            try:
                self._collect("result", json.loads(text), 0)
            except ValueError:
                continue
        self.values["new_names"] += NEW_NAMES
        self.values["company_names"] += COMPANY_NAMES
        self.values["new_people"] += NEW_PEOPLE
        self.values["zipcodes"] += ZIPCODES
        self.values["words"] += list(dict.fromkeys(self.words))[:50]
        self.numbers = sorted(
            {v for vs in self.values.values() for v in vs if _number(v) and abs(v) < 1e6}
        )[:50]

    def _collect(self, name: str, value: Any, depth: int) -> None:
        if depth > _DEPTH:
            return
        if isinstance(value, bool | int | float):
            self.values[name].append(value)
        elif isinstance(value, str):
            if len(value) <= _MAX_TEXT:
                self.values[name].append(value)
            self.words += _WORD.findall(value)[:10]
        elif isinstance(value, dict):
            for key, item in value.items():
                self.values[f"{name}.keys"].append(key)
                if isinstance(item, str | int | float) and not isinstance(item, bool):
                    self.values[f"{name}.values"].append(item)
                self._collect(key if isinstance(key, str) else name, item, depth + 1)
        elif isinstance(value, list | tuple | set):
            # A set's order follows string hashing, which differs between processes.
            items = sorted(value, key=repr) if isinstance(value, set) else list(value)
            for item in items[:50]:
                if isinstance(item, dict):  # a list of records: their fields, as name.field
                    for key, field in item.items():
                        if isinstance(field, str | int | float):
                            self.values[f"{name}.{key}"].append(field)
                self._collect(name, item, depth + 1)

    def get(self, names: tuple[str, ...]) -> list[Any]:
        """The distinct values under any of `names`, in their order."""
        found = [
            v for n in names for v in self.values.get(n, []) if isinstance(v, str | int | float)
        ]
        return list(dict.fromkeys(found))


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def calls(docs: list[dict[str, Any]], pool: Pool, rng: random.Random) -> list[Call]:
    """Calls of the functions in `docs`, `VARIANTS` draws each (duplicates dropped), in order."""
    out: dict[str, Call] = {}
    for doc in docs:
        params = doc["parameters"]["properties"]
        for _ in range(VARIANTS if params else 1):
            call = draw(doc, pool, rng)
            out.setdefault(str(call), call)
    return list(out.values())


def draw(doc: dict[str, Any], pool: Pool, rng: random.Random) -> Call:
    """One call of the function `doc` describes: every required argument, and each optional
    one half of the time; two arguments differ where they can (`cp` a folder into itself
    makes a cycle that `find` and `du` then recurse in forever)."""
    required = set(doc["parameters"].get("required", []))
    kwargs: dict[str, Any] = {}
    for name, spec in doc["parameters"]["properties"].items():
        if name not in required and rng.random() < 0.5:
            continue
        for _ in range(4):
            kwargs[name] = value(doc["name"], name, spec, pool, rng)
            if not isinstance(kwargs[name], str) or kwargs[name] not in _others(kwargs, name):
                break
    return Call(doc["name"], (), kwargs)


def _others(kwargs: dict[str, Any], name: str) -> list[Any]:
    return [v for k, v in kwargs.items() if k != name]


def value(function: str, name: str, spec: dict[str, Any], pool: Pool, rng: random.Random) -> Any:
    """One argument for parameter `name` of `function` (see the module docstring)."""
    kind = spec.get("type", "string")
    listed = list(CHOICES.get((function, name), ())) or options(spec.get("description", ""))
    sources = OVERRIDES.get((function, name)) or SOURCES.get(name, (name,))
    found = pool.get(sources)
    if kind == "array":
        items = spec.get("items", {}).get("type", "string")
        if items in ("float", "integer"):
            return rng.sample([*FLOATS, *pool.numbers], 3)
        choices = listed or [str(v) for v in found] or pool.get(("words",)) or list(TEXTS)
        return rng.sample(choices, min(len(choices), rng.choice((1, 2))))
    if listed and kind == "string":
        return rng.choice(listed)
    if kind == "boolean":
        return rng.choice((True, False))
    if kind == "integer":
        ints = [v for v in found if isinstance(v, int) and not isinstance(v, bool)]
        return rng.choice(ints or list(NUMBERS))
    if kind == "float":
        numbers = [float(v) for v in found if _number(v)]
        return rng.choice(numbers or [*FLOATS, *pool.numbers[:10]])
    if kind == "dict":
        return {"priority": rng.choice((1, 2, 3, 4, 5))}  # edit_ticket's only dict argument
    if found:
        return str(rng.choice(found))
    if "date" in name:
        return rng.choice(DATES)
    words = pool.get(("words",))
    if words and rng.random() < 0.5:
        return " ".join(rng.sample(words, min(len(words), 3)))
    return rng.choice(TEXTS)
