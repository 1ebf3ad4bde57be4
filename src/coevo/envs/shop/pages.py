"""The shop's pages as text, what each lets the agent click, and the action grammar.

Pages follow WebShop's text mode: search -> results (10 per page, `next >` / `< prev`) -> item
(option groups, `description`, `features`, `reviews`, `< prev`, `back to search`, `buy now`)
-> done. Every page starts with the instruction; everything clickable is shown in [brackets]
and clicked with `click[label]`, the label written as shown. Searching is done from the
search page with `search[keywords]`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from coevo.envs.shop.catalog import Product

RESULTS_PER_PAGE = 10
QUERY_ECHO = 100  # characters of a query repeated back when nothing matches it
BACK, NEXT, PREV, BUY = "back to search", "next >", "< prev", "buy now"
SUB_PAGES = ("description", "features", "reviews")

Target = tuple
"""What a label does: ("back",), ("next",), ("prev",), ("item", pid), ("option", group, value),
("sub", name) or ("buy",)."""


@dataclass(frozen=True)
class Page:
    """A rendered page: its kind, its text and what its labels do."""

    name: str
    """search, results, item, description, features, reviews or done."""
    text: str
    clickables: dict[str, Target]

    def resolve(self, label: str) -> tuple[str, Target] | None:
        """The label as shown and its target, for a label written exactly or up to case and
        spacing (WebShop lower-cases click arguments); None when the page has no such label."""
        target = self.clickables.get(label)
        if target is not None:
            return label, target
        wanted = " ".join(label.split()).lower()
        for shown, target in self.clickables.items():
            if shown.lower() == wanted:
                return shown, target
        return None

    def menu(self) -> str:
        """One line saying what the agent can do on this page."""
        if self.name == "search":
            return "This is the search page: type search[your keywords]."
        return "You can click: " + " ".join(f"[{label}]" for label in self.clickables)


def search_page(instruction: str) -> Page:
    return Page("search", f"Instruction: {instruction}\nSearch: type search[your keywords]", {})


def results_page(
    instruction: str, query: str, results: Sequence[int], page_no: int, products: list[Product]
) -> Page:
    """Results page `page_no` (1-based) of a search; `products` are the ones on this page."""
    clickables: dict[str, Target] = {BACK: ("back",)}
    lines = [f"Instruction: {instruction}", f"[{BACK}]"]
    if not results:
        # The whole query could be 100,000 characters: the observation echoes a bounded part.
        shown = repr(query[:QUERY_ECHO])
        if len(query) > QUERY_ECHO:
            shown += f" (the first {QUERY_ECHO} of its {len(query):,} characters)"
        lines.append(f"No products match {shown}. Go back and try other keywords.")
        return Page("results", "\n".join(lines), clickables)
    lines.append(f"Page {page_no} (Total results: {len(results)})")
    nav = []
    if page_no > 1:
        clickables[PREV] = ("prev",)
        nav.append(f"[{PREV}]")
    if page_no * RESULTS_PER_PAGE < len(results):
        clickables[NEXT] = ("next",)
        nav.append(f"[{NEXT}]")
    if nav:
        lines.append(" ".join(nav))
    first = (page_no - 1) * RESULTS_PER_PAGE
    for pid, product in zip(results[first : first + RESULTS_PER_PAGE], products, strict=True):
        clickables[product.asin] = ("item", pid)
        lines.append(f"[{product.asin}] {product.title} | {product.price_tag}")
    return Page("results", "\n".join(lines), clickables)


def item_page(instruction: str, pid: int, product: Product, chosen: dict[str, str]) -> Page:
    """A product's page: title, price, rating, option groups and the buttons."""
    clickables: dict[str, Target] = {BACK: ("back",), PREV: ("prev",)}
    lines = [
        f"Instruction: {instruction}",
        f"[{BACK}] [{PREV}]",
        product.title,
        f"Price: {product.price_tag}",
        f"Rating: {product.rating}",
    ]
    for group, values in product.options:
        shown = []
        for value in values:
            # A value repeated across groups selects the first group's (labels are unique).
            clickables.setdefault(value, ("option", group, value))
            shown.append(f"[{value}]")
        line = f"{group}: {' '.join(shown)}"
        if group in chosen:
            line += f" (chosen: {chosen[group]})"
        lines.append(line)
    for name in SUB_PAGES:
        clickables[name] = ("sub", name)
    clickables[BUY] = ("buy",)
    lines.append(" ".join(f"[{name}]" for name in (*SUB_PAGES, BUY)))
    return Page("item", "\n".join(lines), clickables)


def sub_page(instruction: str, product: Product, name: str) -> Page:
    """The description, features or reviews of a product."""
    if name == "description":
        body = f"Description: {product.description or '(none)'}"
    elif name == "features":
        body = "Features:\n" + ("\n".join(f"- {b}" for b in product.bullets) or "(none)")
    else:
        reviews = [f"- {s:g}/5 {t}: {b}" for s, t, b in product.reviews]
        body = "Reviews:\n" + ("\n".join(reviews) or "(no reviews yet)")
    clickables: dict[str, Target] = {BACK: ("back",), PREV: ("prev",)}
    text = f"Instruction: {instruction}\n[{BACK}] [{PREV}]\n{product.title}\n{body}"
    return Page(name, text, clickables)


def done_text(product: Product, chosen: dict[str, str], reward: float) -> str:
    options = ", ".join(f"{g}: {v}" for g, v in chosen.items()) or "no options chosen"
    return (
        "Thank you for shopping with us!\n"
        f"You bought {product.asin}: {product.title} ({product.price_tag}), {options}.\n"
        f"Your score (min 0.0, max 1.0): {reward:.3f}"
    )


# --- the action grammar -------------------------------------------------------------------

_ACTION = re.compile(r"([A-Za-z_]+)(\s*)\[(.*)\]", re.DOTALL)
_TRAILING = re.compile(r"([A-Za-z_]+)\s*\[(.*)\](.+)", re.DOTALL)
_OPENING = re.compile(r"([A-Za-z_]+)\s*\[")
VERBS = ("search", "click")


@dataclass(frozen=True)
class Action:
    """A parsed `search[...]` or `click[...]`; `note` says how a sloppy form was read."""

    verb: str
    arg: str
    note: str = ""


def parse_action(text: str) -> Action | str:
    """Parse one action; a string return is the observation explaining what was wrong."""
    text = text.strip()
    head, newline, rest = text.partition("\n")
    if newline and _ACTION.fullmatch(head.strip()):
        # Two actions, or an action and more text: only one action per step.
        return _unexpected(rest, head.strip()[:80])
    opening = _OPENING.match(text)
    if opening is not None and opening.group(1).lower() in VERBS:
        # The action ends at the bracket that closes its own: `search[red shoes]` written
        # 5,000 times in a row is one action and then unexpected text, not one long search.
        end = _closing_bracket(text, opening.end() - 1)
        extra = text[end + 1 :].strip() if end is not None else ""
        if extra:
            arg = text[opening.end() : end]
            return _unexpected(extra, f"{opening.group(1).lower()}[{arg[:60]}]")
    match = _ACTION.fullmatch(text)
    if match is None:
        trailing = _TRAILING.fullmatch(text)
        if trailing is not None and trailing.group(1).lower() in VERBS:
            example = f"{trailing.group(1).lower()}[{trailing.group(2)[:60]}]"
            return _unexpected(trailing.group(3), example)
        if "[" in text and "]" not in text:
            return f"Invalid action {text[:80]!r}: the closing ']' is missing."
        return (
            f"Invalid action {text[:80]!r}. Use search[keywords] on the search page or "
            "click[label] with a label shown in [brackets]."
        )
    verb, space, arg = match.group(1), match.group(2), match.group(3)
    if verb.lower() not in VERBS:
        return f"Unknown action {verb!r}: the actions are search[keywords] and click[label]."
    note = ""
    if verb != verb.lower() or space:
        note = f"(Read {verb}{space}[...] as {verb.lower()}[...]: write actions in lower case.)"
    return Action(verb.lower(), arg, note)


def _unexpected(extra: str, example: str) -> str:
    return (
        f"Unexpected text after the action: {extra.strip()[:80]!r}. Write one action and "
        f"nothing after it, e.g. {example}."
    )


def _closing_bracket(text: str, start: int) -> int | None:
    """Index of the `]` that closes the `[` at `start` (brackets may nest), or None."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "[":
            depth += 1
        elif text[i] == "]":
            depth -= 1
            if depth == 0:
                return i
    return None
