"""Verification rejects unsolvable, nondeterministic, duplicate and test tasks, and counts each."""

from __future__ import annotations

from coevo.envs.evolve import Candidate
from coevo.envs.react import format_reply
from coevo.methods.agent_data.verify import jaccard, replay_check, verify
from coevo.trajectory import Task, Turn
from tests.toy_env import ToyEnv


class CheckedToy(ToyEnv):
    """ToyEnv whose expert types `expert_word` when a task names one (it then fails), and
    whose `look` shows a counter when a task is `flaky` (two replays differ)."""

    looks = 0

    def expert(self, task: Task) -> list[Turn]:
        word = task.data.get("expert_word", task.data["word"])
        return [
            Turn("assistant", format_reply("I check.", "look")),
            Turn("assistant", format_reply("I type.", f"type[{word}]")),
        ]

    def step(self, action: str):
        result = super().step(action)
        if self._task.data.get("flaky") and "look" in action:
            self.looks += 1
            return type(result)(
                f"{result.observation} ({self.looks})", *list(vars(result).values())[1:]
            )
        return result


def candidate(word: str, instruction: str | None = None, **data) -> Candidate:
    task = Task(
        f"toy/synth/{word}", "toy", "train", instruction or f"Type {word}.", {"word": word, **data}
    )
    return Candidate(task, {"why": "test"})


def test_word_jaccard():
    assert jaccard("Type apple now", "type APPLE now") == 1.0
    assert jaccard("a b c d", "a b c e") == 3 / 5
    assert jaccard("", "") == 1.0


def test_verification_keeps_good_tasks_and_counts_each_rejection():
    env = CheckedToy(n_tasks=4)  # train apple..damson; tests from banana and cherry on
    train, tests = env.tasks("train"), env.tasks("test_seen") + env.tasks("test_unseen")
    good = candidate("kiwi")
    candidates = [
        good,
        candidate("pear", expert_word="peach"),  # the expert fails: unsolvable
        candidate("plum", flaky=True),  # two replays differ: nondeterministic
        candidate("applex", instruction="type apple."),  # a train instruction: duplicate
        candidate("kiwi2", instruction="Type kiwi."),  # the good one, accepted first
        candidate("lime", instruction=tests[0].instruction),  # a test instruction
        Candidate(tests[1], {}),  # a test task itself
    ]
    checked = verify(env, candidates, train, tests)
    assert [c.task.id for c in checked.accepted] == [good.task.id]
    assert checked.rejected == {
        "unsolvable": 1,
        "nondeterministic": 1,
        "duplicate": 2,
        "test_overlap": 2,
    }
    # The ablation: every candidate joins unchecked.
    off = verify(env, candidates, train, tests, enabled=False)
    assert len(off.accepted) == len(candidates) and off.rejected == {}


def test_an_expert_that_raises_makes_the_task_unsolvable():
    class Refusing(ToyEnv):
        def expert(self, task):
            raise RuntimeError("no demonstration")

    assert replay_check(Refusing(), candidate("kiwi").task) == "unsolvable"
    assert replay_check(ToyEnv(), candidate("kiwi").task) is None


def test_the_papers_acceptance_rule_takes_a_replay_that_fails_but_scores():
    env = CheckedToy(n_tasks=4)
    near = candidate("pear", expert_word="peach")  # right first letter: reward 0.5
    wrong = candidate("plum", expert_word="kiwi")  # reward 0
    assert replay_check(env, near.task) == "unsolvable"
    assert replay_check(env, near.task, "positive") is None
    assert replay_check(env, wrong.task, "positive") == "unsolvable"
    checked = verify(env, [near, wrong], env.tasks("train"), [], acceptance="positive")
    assert checked.accepted == [near] and checked.rejected == {"unsolvable": 1}
