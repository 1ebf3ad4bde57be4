"""Silence library output that tells a coevo user nothing, keeping coevo's own progress.

Each stage that loads or saves a model would otherwise print transformers' `Loading weights`
and `Writing model shards` bars and accelerate's `Removed shared tensor {'lm_head.weight'}`
warning (a model whose output layer shares the embedding's weights, saved as intended). The
`coevo` command calls `quiet_libraries()` once; code that imports coevo as a library keeps its
own settings.
"""

from __future__ import annotations

import logging

# The logger of accelerate's checkpoint writer, whose one warning is about tied weights.
ACCELERATE_SAVE_LOGGER = "accelerate.utils.other"


def quiet_libraries() -> None:
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    logging.getLogger(ACCELERATE_SAVE_LOGGER).setLevel(logging.ERROR)
