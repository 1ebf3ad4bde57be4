"""What a run prints: coevo's console, and silence for library output that tells a user nothing.

`console` is the one rich console every stage writes its progress to (stderr, so a command's
stdout stays its result); `duration` is how a run says a time.

Each stage that loads or saves a model would otherwise print transformers' `Loading weights`
and `Writing model shards` bars and accelerate's `Removed shared tensor {'lm_head.weight'}`
warning (a model whose output layer shares the embedding's weights, saved as intended). The
`coevo` command calls `quiet_libraries()` once; code that imports coevo as a library keeps its
own settings.
"""

from __future__ import annotations

import logging

from rich.console import Console

console = Console(stderr=True)

# The logger of accelerate's checkpoint writer, whose one warning is about tied weights.
ACCELERATE_SAVE_LOGGER = "accelerate.utils.other"


def quiet_libraries() -> None:
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    logging.getLogger(ACCELERATE_SAVE_LOGGER).setLevel(logging.ERROR)


def duration(seconds: float) -> str:
    """`seconds` as a person says it: 42 s, 3 min 05 s, 2 h 07 min."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"
