"""Short thoughts for the expert's gold actions, so demonstrations read like ReAct turns.

The gold path has actions only; a one-line thought per action, made from the action's verb and
objects, gives SFT data the "Thought: ... Action: ..." shape the agent is asked to write.
"""

from __future__ import annotations

import re

# (pattern, template): the first pattern that matches the whole action wins; groups fill the
# template. Patterns follow the action grammar of the instruction prompt.
_RULES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), template)
    for pattern, template in (
        (r"look around", "I look around to see what is here."),
        (r"(?:teleport|go) to (.+)", "I need to be in the {0}, so I go there."),
        (r"open door to (.+)", "I open the door to the {0}."),
        (r"open (.+)", "I open the {0} to get at what is inside."),
        (r"close (.+)", "I close the {0}."),
        (r"focus on (.+)", "The task is about the {0}, so I focus on it."),
        (r"pick up (.+)", "I pick up the {0}; I will need it."),
        (r"put down (.+)", "I put down the {0}."),
        (r"move (.+) to (.+)", "I move the {0} to the {1}."),
        (r"pour (.+) into (.+)", "I pour the {0} into the {1}."),
        (r"dunk (.+) into (.+)", "I dunk the {0} into the {1}."),
        (r"use (.+) on (.+)", "I use the {0} on the {1} to learn more."),
        (r"use (.+)", "I use the {0}."),
        (r"activate (.+)", "I turn on the {0}."),
        (r"deactivate (.+)", "I turn off the {0}."),
        (r"connect (.+) to (.+)", "I connect the {0} to the {1}."),
        (r"disconnect (.+)", "I disconnect the {0}."),
        (r"(?:examine|look at|look in) (.+)", "I examine the {0} to check its state."),
        (r"read (.+)", "I read the {0}."),
        (r"mix (.+)", "I mix the {0}."),
        (r"eat (.+)", "I eat the {0}."),
        (r"flush (.+)", "I flush the {0}."),
        (r"wait1?", "I wait for things to change."),
        (r"inventory", "I check what I am carrying."),
        (r"\d+", "The action was ambiguous; option {0} is the one I meant."),
    )
)


def thought_for(action: str) -> str:
    """A one-line thought that motivates `action`."""
    text = action.strip()
    for pattern, template in _RULES:
        match = pattern.fullmatch(text)
        if match:
            return template.format(*(match.groups() or (text,)))
    return f"Next I {text}."
