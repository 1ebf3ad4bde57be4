"""The checker passes a good env and names what is wrong with broken ones."""

from __future__ import annotations

import random

from typer.testing import CliRunner

from coevo.cli import app
from coevo.envs.base import NoDemonstrationError, StepResult
from coevo.envs.check import check_env
from coevo.trajectory import Turn
from tests.toy_env import ToyEnv


class RaisesOnBadAction(ToyEnv):
    def step(self, action):
        if "frobnicate" in action:
            raise ValueError("cannot parse")
        return super().step(action)


class WeakExpert(ToyEnv):
    def expert(self, task):
        return [Turn("assistant", "Action: type[aaa]")]


class Noisy(ToyEnv):
    def reset(self, task, *, seed=None):
        obs, info = super().reset(task, seed=seed)
        return f"{obs} ({random.random()})", info

    def step(self, action):
        r = super().step(action)
        return StepResult(
            f"{r.observation} {random.random()}", r.reward, r.terminated, r.truncated, r.info
        )


class NoBudget(ToyEnv):
    def step(self, action):
        r = super().step(action)
        return StepResult(r.observation, r.reward, r.terminated, False, r.info)


class RewardTooBig(ToyEnv):
    def step(self, action):
        r = super().step(action)
        return StepResult(r.observation, r.reward * 2, r.terminated, r.truncated, r.info)


def failing(env) -> set[str]:
    return {r.name for r in check_env(env, tasks_per_split=2).failures}


def test_good_env_passes():
    report = check_env(ToyEnv(), tasks_per_split=3)
    assert report.ok, [(r.name, r.problems) for r in report.failures]


def test_broken_envs_fail_the_right_checks():
    assert "bad actions answered, step used" in failing(RaisesOnBadAction())
    assert "expert reaches 1.0" in failing(WeakExpert())
    assert "deterministic replay" in failing(Noisy())
    assert "step budget truncates" in failing(NoBudget())
    assert "rewards in [0, 1], 0 before the end" in failing(RewardTooBig())


def test_cli_check_exit_codes():
    runner = CliRunner()
    ok = runner.invoke(app, ["env", "check", "tests.toy_env:ToyEnv", "--tasks", "2"])
    assert ok.exit_code == 0, ok.output
    bad = runner.invoke(app, ["env", "check", "tests.envs.test_check:WeakExpert", "--tasks", "2"])
    assert bad.exit_code == 1 and "FAIL" in bad.output


def test_cli_unknown_env_is_one_clear_line():
    result = CliRunner().invoke(app, ["env", "check", "nope"])
    assert result.exit_code == 2
    assert "Unknown env 'nope'" in result.output
    assert "Traceback" not in result.output


def test_cli_play_by_hand():
    result = CliRunner().invoke(
        app, ["env", "play", "tests.toy_env:ToyEnv"], input="look\nAction: type[apple]\n"
    )
    assert result.exit_code == 0, result.output
    assert "The word is apple" in result.output and "reward 1.000" in result.output


def test_cli_play_shows_env_text_literally():
    # Rich would read "[buy now]" as a style and "[/]" as a closing tag (a MarkupError).
    result = CliRunner().invoke(
        app,
        ["env", "play", "sql"],
        input="Thought: a.\nAction: SELECT '[buy now]'\nThought: b.\nAction: SELECT \"[/]\"\n",
    )
    assert result.exit_code == 0, result.output
    assert "[('[buy now]',)]" in result.output and "[('[/]',)]" in result.output
    assert "Traceback" not in result.output


def test_cli_option_of_the_wrong_type_is_one_sentence():
    result = CliRunner().invoke(app, ["env", "play", "shop", "-o", "n_products=abc"])
    assert result.exit_code == 2
    assert result.output.strip() == (
        "error: env option n_products must be an integer, not 'abc' (env 'shop')."
    )


class SomeUndemonstrated(ToyEnv):
    """Lists tasks it has no demonstration for, as ETO's ScienceWorld lists do."""

    def expert(self, task):
        if task.id == self.tasks("train")[1].id:
            raise NoDemonstrationError(f"The gold path of {task.id} is longer than its budget.")
        return super().expert(task)


def test_tasks_without_a_demonstration_are_counted_and_named_apart_not_failed():
    env = SomeUndemonstrated()
    report = check_env(env, tasks_per_split=3)
    assert report.ok, [(r.name, r.problems) for r in report.failures]
    missing = env.tasks("train")[1].id
    assert list(report.undemonstrated) == [missing]
    assert report.results["expert reaches 1.0"].passed == 3 * 3 - 1
    result = CliRunner().invoke(
        app, ["env", "check", "tests.envs.test_check:SomeUndemonstrated", "--tasks", "3"]
    )
    assert result.exit_code == 0, result.output
    assert "1 listed tasks have no demonstration" in result.output and missing in result.output
