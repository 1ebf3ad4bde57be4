"""Check a recipe before its run directory exists: env, env options, model source, lengths.

A mistake found here is one sentence and leaves nothing behind, so the corrected recipe runs
in the same `--out`. Found later, inside a stage, the same mistake costs the stages before it
and leaves a run directory that the corrected recipe (another config hash) is refused in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coevo.config import ConfigError
from coevo.envs.base import Env, make
from coevo.envs.conversation import opening_message
from coevo.methods.registry import method
from coevo.run.recipe import RunConfig
from coevo.trajectory import Turn

# Prompts measured: a few train tasks and the first of each evaluated split. Every prompt opens
# with the same instructions, so a handful shows a budget that is too small.
TASKS_MEASURED = 8
# A locally initialised model's chat template adds <|user|>, <|end|> and <|assistant|>.
TINY_MARKUP_TOKENS = 3


def check_recipe(config: RunConfig) -> None:
    """Raise ConfigError (or EnvError, ModelError) if `config` cannot run; builds the env once."""
    env = build_env(config)
    try:
        model_dir = model_source(config)
        check_lengths(config, env, model_dir)
    finally:
        close = getattr(env, "close", None)
        if callable(close):
            close()


def build_env(config: RunConfig) -> Env:
    """The env as the run will build it; bad options fail here, with the env's own sentence."""
    try:
        return make(config.env.name, **config.env.options)
    except TypeError as exc:
        raise ConfigError(
            f"env.options: env {config.env.name!r} does not take these options ({exc}); "
            "see its constructor for the options it has."
        ) from None


def model_source(config: RunConfig) -> Path | None:
    """The checkpoint directory the run starts from (None: a model made in the run)."""
    if config.model.path is not None:
        path = Path(config.model.path)
        # A Hub name too: coevo never downloads, so it says where models come from.
        if not path.exists():
            raise ConfigError(
                f"model.path: no directory {str(path)!r}; model.path is a local checkpoint "
                "directory (coevo does not download from the Hugging Face Hub: download it "
                "first), or use model.name (coevo model get --list) or model.size instead."
            )
        if not (path / "config.json").is_file():
            raise ConfigError(
                f"model.path: {str(path)!r} is not a Hugging Face checkpoint directory (it has "
                "no config.json); point it at one, or use model.name or model.size instead."
            )
        return path
    if config.model.name is not None:
        from coevo.policy.models import get_model
        from coevo.run.console import console

        # Converted once into the cache, outside the run directory; the run reuses it.
        return get_model(config.model.name, progress=console.print)
    return None


def check_lengths(config: RunConfig, env: Env, model_dir: Path | None) -> None:
    """The first prompt and the longest reply must fit in model.max_length."""
    reply_limits = {"eval.sampling.max_new_tokens": config.eval.sampling.max_new_tokens}
    if method(config.method).explores:  # it samples from the model too
        reply_limits["explore.sampling.max_new_tokens"] = config.explore.sampling.max_new_tokens
    if "grpo" in method(config.method).reads:  # GRPO's rollouts
        reply_limits["grpo.sampling.max_new_tokens"] = config.grpo.sampling.max_new_tokens
    reply_name, reply = max(reply_limits.items(), key=lambda item: item[1])
    count, exact = prompt_counter(model_dir)
    tasks = env.tasks("train")[:TASKS_MEASURED]
    for split in config.eval.splits:
        if split != "valid":
            tasks += env.tasks(split)[:1]
    budget = config.model.max_length
    for task in tasks:
        observation, _ = env.reset(task)
        prompt = count(opening_message(env, observation))
        if prompt + reply > budget:
            at_least = "" if exact else " at least"
            raise ConfigError(
                f"model.max_length={budget} is too small: the instruction and first "
                f"observation of task {task.id!r} take{at_least} {prompt} tokens and a reply "
                f"up to {reply} more ({reply_name}); raise model.max_length to{at_least} "
                f"{prompt + reply} or lower {reply_name}."
            )


def prompt_counter(model_dir: Path | None) -> tuple[Any, bool]:
    """A function giving the tokens of a first prompt, and whether its counts are exact.

    With a checkpoint, its own tokenizer and chat template count exactly. A locally made model
    has no tokenizer until its stage trains one; its byte-level BPE never merges across the
    pre-tokenizer's pieces, so their number is a lower bound that needs no training.
    """
    if model_dir is not None:
        from transformers import AutoTokenizer

        from coevo.render import render_prompt

        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        return (lambda text: len(render_prompt([Turn("user", text)], tokenizer))), True
    from tokenizers import pre_tokenizers

    pieces = pre_tokenizers.ByteLevel(add_prefix_space=False)
    return (lambda text: len(pieces.pre_tokenize_str(text)) + TINY_MARKUP_TOKENS), False
