"""The ReAct action format: "Thought: ... Action: ...", parsed tolerantly.

Every env calls `parse` on the agent's text at the top of `step`, so the format and its error
message live here only. A bare action with no markers (`search[red shoes]`, `SELECT 1`) is
accepted too, which is what a person typing in `coevo env play` writes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# "Action:" opening a line, any case; failing that, "Action:" inside a line, capitalised, so
# a thought that says "the next action: ..." in passing is not taken for the action.
_ACTION_LINE = re.compile(r"(?:^|\n)[ \t]*action[ \t]*:[ \t]*", re.IGNORECASE)
_ACTION_INLINE = re.compile(r"\bAction\s*:\s*")
_THOUGHT = re.compile(r"^\s*thought\s*:\s*", re.IGNORECASE)
# A model that runs on past its turn writes the next observation itself: cut there.
_RUN_ON = re.compile(r"\n\s*(?:observation|task)\s*:", re.IGNORECASE)

FORMAT_ERROR = (
    "Invalid format. Reply with one line 'Thought: <your reasoning>' followed by one line "
    "'Action: <action>', using an action from the instruction."
)


@dataclass(frozen=True)
class ReAct:
    """The parts of one agent reply. `action` is None when the reply has no usable action."""

    thought: str
    action: str | None

    @property
    def ok(self) -> bool:
        return self.action is not None


def parse(text: str) -> ReAct:
    """Split an agent reply into thought and action; tolerant of spacing, case and run-ons."""
    if not isinstance(text, str):
        return ReAct(thought="", action=None)
    run_on = _RUN_ON.search(text)
    if run_on:
        text = text[: run_on.start()]
    first = _ACTION_LINE.search(text) or _ACTION_INLINE.search(text)
    if first is None:
        stripped = text.strip()
        if not stripped or _THOUGHT.match(stripped):
            # A thought with no action, or nothing at all.
            return ReAct(thought=_THOUGHT.sub("", stripped), action=None)
        return ReAct(thought="", action=stripped)
    # The first "Action:" ends the thought; anything before it is reasoning.
    thought = _THOUGHT.sub("", text[: first.start()].strip())
    action = text[first.end() :].strip()
    return ReAct(thought=thought.strip(), action=action or None)


def format_reply(thought: str, action: str) -> str:
    """The canonical text of one agent turn, as experts write it and models learn it."""
    return f"Thought: {thought}\nAction: {action}"
