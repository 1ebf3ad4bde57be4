"""rollout_speed --store --cut-block: the tokens lockstep runs for stored episodes, cut as the
rollout cuts them."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from coevo.render import render_prompt
from coevo.trajectory import Task, Trajectory, Turn

BENCHMARKS = Path(__file__).parents[2] / "benchmarks"


@pytest.fixture
def rollout_speed(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    return importlib.import_module("rollout_speed")


@pytest.fixture(scope="module")
def tokenizer(nano_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(nano_model_dir)


def episode(steps: int) -> Trajectory:
    task = Task("toy/train/0", "toy", "train", "Type fig.", {})
    turns = [Turn("user", "Type the word you are given. Actions: look, type[word].")]
    for i in range(steps):
        turns += [Turn("assistant", f"Thought: look {i}.\nAction: look"), Turn("user", f"fig {i}")]
    turns.append(Turn("assistant", "Thought: done.\nAction: type[fig]"))
    meta = {"sampling": {"max_new_tokens": 8}}
    return Trajectory(task, "target", tuple(turns), 1.0, True, False, steps + 1, meta)


def test_uncut_episodes_run_each_token_once_and_blocks_break_the_prefix_less(
    rollout_speed, tokenizer
):
    episodes = [episode(12), episode(16)]
    whole = [render_prompt(e.turns[:-1], tokenizer) for e in episodes]
    last = [len(tokenizer(e.turns[-1].text)["input_ids"]) for e in episodes]
    # Under a budget that cuts nothing, lockstep runs every prompt token once, and each reply.
    tokens, breaks, cut = rollout_speed.cut_tokens(episodes, tokenizer, 10_000, 0)
    assert (breaks, cut) == (0, 0)
    assert tokens == sum(len(w) + n for w, n in zip(whole, last, strict=True))
    # Cut at about half of the shorter episode: every later prompt is cut, and each cut that
    # moves breaks the cached prefix; blocks of several exchanges break it less, and cost less.
    limit = len(whole[0]) // 2
    minimal = rollout_speed.cut_tokens(episodes, tokenizer, limit, 0)
    blocks = rollout_speed.cut_tokens(episodes, tokenizer, limit, limit // 2)
    assert minimal[2] == blocks[2] > 8
    assert minimal[1] > 2 * blocks[1] > 0
    assert tokens < blocks[0] < minimal[0]
