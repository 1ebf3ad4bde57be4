"""The coevo command silences the libraries' bars and tied-weight warnings on every stage."""

from __future__ import annotations

import logging

import torch

from coevo.run.console import ACCELERATE_SAVE_LOGGER, quiet_libraries


def noise(model_dir, out, capfd, caplog) -> str:
    """What loading and saving a model, and cleaning a tied state dict, print."""
    from accelerate import PartialState
    from accelerate.utils.other import clean_state_dict_for_safetensors
    from transformers import AutoModelForCausalLM

    PartialState()  # accelerate's loggers need it, as in a trainer
    caplog.clear()
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    model.save_pretrained(out)
    shared = torch.zeros(2)
    with caplog.at_level(logging.WARNING):
        clean_state_dict_for_safetensors({"embed.weight": shared, "lm_head.weight": shared})
    return capfd.readouterr().err + caplog.text


def test_the_libraries_say_nothing_a_user_needs(nano_model_dir, tmp_path, capfd, caplog):
    from transformers.utils import logging as transformers_logging

    before = logging.getLogger(ACCELERATE_SAVE_LOGGER).level
    try:
        # As the libraries start (an earlier `coevo run` in this process may have quietened them).
        transformers_logging.enable_progress_bar()
        logging.getLogger(ACCELERATE_SAVE_LOGGER).setLevel(logging.NOTSET)
        loud = noise(nano_model_dir, tmp_path / "a", capfd, caplog)
        assert "Loading weights" in loud and "Removed shared tensor" in loud
        quiet_libraries()
        quiet = noise(nano_model_dir, tmp_path / "b", capfd, caplog)
        assert "Loading weights" not in quiet and "Writing model shards" not in quiet
        assert "Removed shared tensor" not in quiet
    finally:  # other tests see the libraries as they were
        transformers_logging.enable_progress_bar()
        logging.getLogger(ACCELERATE_SAVE_LOGGER).setLevel(before)
