"""Reflection and exploration through any Policy: lenient parsing, malformed answers counted,
goal-free exploration episodes, the choice of signals."""

from __future__ import annotations

import pytest

from coevo.methods.agent_data.explore import (
    Seed,
    explore_env,
    instruction,
    parse_context,
    pick,
    prompt,
    random_seeds,
    reflect,
    reflection_prompt,
)
from coevo.methods.agent_data.signals import Signal
from coevo.policy.base import Completion, Sampling
from coevo.trajectory import Task, Trajectory, Turn
from tests.toy_env import ToyEnv


class Answering:
    """A policy that answers from a list, in turn (a stand-in for any explorer)."""

    name = "explorer"
    max_context = 4096

    def __init__(self, tokenizer, answers: list[str]) -> None:
        self.tokenizer, self.answers, self.prompts = tokenizer, list(answers), []

    def generate(self, prompts, sampling, *, seeds=None):
        self.prompts += [self.tokenizer.decode(p) for p in prompts]
        return [Completion(self.answers.pop(0), "stop") for _ in prompts]


@pytest.fixture(scope="module")
def tokenizer(nano_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(nano_model_dir)


def test_contexts_are_read_leniently():
    assert parse_context("Thought: hmm\nContext: It never looked.\n") == "It never looked."
    assert parse_context("context:   the  search page") == "the search page"
    assert parse_context("It typed too soon.") == "It typed too soon."
    assert parse_context("Thought: explore the options") == "explore the options"
    assert len(parse_context("Context: " + "x " * 1000)) == 300
    for empty in ("", "   ", "Context:", None, 3):
        assert parse_context(empty) is None


def test_a_malformed_answer_costs_only_its_exploration(tokenizer):
    env = ToyEnv()
    t = env.tasks("train")[0]
    step = [Trajectory(t, "target", (Turn("user", "go"), Turn("assistant", "Action: look")), 0.0,
                       True, False, 1)]  # fmt: skip
    signal = Signal("boundary", t, (0,), {"rewards": [0.0, 1.0]})
    text = reflection_prompt(signal, step)
    assert t.instruction in text and "both succeed and fail" in text and "Reward: 0.00" in text
    policy = Answering(tokenizer, ["Context: it typed without looking", "", "Context:"])
    got = reflect(policy, [text] * 3, Sampling(max_new_tokens=8), seed=0, max_length=4096)
    assert got == ["it typed without looking", None, None]
    # A prompt too long for the context is cut in the middle, keeping both ends.
    long = text.replace("Attempt 1:", "Attempt 1:" + " filler" * 3000)
    policy = Answering(tokenizer, ["Context: ok"])
    assert reflect(policy, [long], Sampling(max_new_tokens=8), seed=0, max_length=1024) == ["ok"]
    assert "Weakness found" in policy.prompts[0] and "Context:'" in policy.prompts[0]


def test_exploration_is_goal_free_and_played_by_the_policy(tokenizer):
    env = ToyEnv()
    from coevo.envs.pool import EnvPool

    tasks = env.tasks("train")[:2]
    seeds = [Seed(t, None, f"1-{i}") for i, t in enumerate(tasks)]
    policy = Answering(tokenizer, ["Thought: Task: type it\nAction: look", "Action: type[zz]"] * 2)
    played = explore_env(
        policy, EnvPool(ToyEnv), env, seeds, ["the look action", None], Sampling(), seed=0,
        max_length=2048,
    )  # fmt: skip
    assert [t.task.id for t in played] == ["explore/1-0/toy/train/0", "explore/1-1/toy/train/1"]
    assert all(t.task.split == "train" and t.agent == "explorer" for t in played)
    opening = played[0].turns[0].text
    assert "the look action" in opening and tasks[0].instruction not in opening
    assert prompt("random").strip() in played[1].turns[0].text
    assert instruction("ctx").startswith("Explore freely")


def test_pick_takes_the_kinds_in_turn_one_signal_per_task():
    def s(kind: str, i: int) -> Signal:
        return Signal(kind, Task(f"t{i}", "toy", "train", "x"), (i,))

    signals = [s("rare", 0), s("rare", 1), s("rare", 2), s("boundary", 0), s("boundary", 3)]
    signals.append(s("forgetting", 4))
    chosen = pick(signals, 4)
    assert [(c.kind, c.task.id) for c in chosen] == [
        ("forgetting", "t4"),
        ("boundary", "t0"),
        ("rare", "t1"),
        ("boundary", "t3"),
    ]
    assert pick(signals, 0) == [] and len(pick(signals, 99)) == 5


def test_random_seeds_are_train_tasks_drawn_by_the_seed():
    tasks = ToyEnv().tasks("train")
    a, b = random_seeds(tasks, 3, 7, "r"), random_seeds(tasks, 3, 7, "r")
    assert [x.task.id for x in a] == [x.task.id for x in b] and len({x.task.id for x in a}) == 3
    assert all(x.signal is None for x in a) and [x.key for x in a] == ["r-0", "r-1", "r-2"]
