from __future__ import annotations

import pytest

from coevo.envs.react import format_reply, parse


@pytest.mark.parametrize(
    ("text", "thought", "action"),
    [
        ("Thought: find shoes\nAction: search[red shoes]", "find shoes", "search[red shoes]"),
        ("thought:find shoes\naction :   search[red shoes]  ", "find shoes", "search[red shoes]"),
        ("THOUGHT: a\n  ACTION: click[Buy Now]", "a", "click[Buy Now]"),
        ("Thought: a b Action: click[x]", "a b", "click[x]"),
        ("search[red shoes]", "", "search[red shoes]"),
        # A model that runs on writes the observation itself: it is cut off.
        ("Thought: t\nAction: click[x]\nObservation: fake page", "t", "click[x]"),
        # Multi-line actions (SQL) keep their lines.
        ("Thought: q\nAction: ```sql\nSELECT 1\nFROM t\n```", "q", "```sql\nSELECT 1\nFROM t\n```"),
        # "action:" in passing inside a thought is not the action.
        ("Thought: the next action: unclear\nAction: look", "the next action: unclear", "look"),
    ],
)
def test_parse_tolerant(text, thought, action):
    parsed = parse(text)
    assert parsed.ok
    assert (parsed.thought, parsed.action) == (thought, action)


@pytest.mark.parametrize("text", ["", "   ", "Thought: only thinking", "Action:", "Action:   \n"])
def test_parse_malformed_has_no_action(text):
    assert not parse(text).ok


def test_parse_non_string_is_malformed():
    assert not parse(None).ok  # type: ignore[arg-type]


def test_format_reply_parses_back():
    parsed = parse(format_reply("because", "click[< Prev]"))
    assert (parsed.thought, parsed.action) == ("because", "click[< Prev]")
