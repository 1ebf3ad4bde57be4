from __future__ import annotations

import pytest

from coevo.envs import EnvError, EpisodeClock, EpisodeFinishedError, make, names, register
from coevo.envs.base import NoEpisodeError, check_split
from tests.toy_env import ToyEnv


def test_registry_names_builtins_and_user_envs():
    assert {"shop", "sql", "sciworld"} <= set(names())
    register("toy-test", ToyEnv)
    assert isinstance(make("toy-test", max_steps=3), ToyEnv)
    assert make("tests.toy_env:ToyEnv").max_steps == 5


def test_unknown_env_names_the_fix():
    with pytest.raises(EnvError, match="Unknown env 'nope'.*register"):
        make("nope")
    with pytest.raises(EnvError, match="Cannot import"):
        make("no_such_package.mod:Env")
    with pytest.raises(EnvError, match="has no 'Nope'"):
        make("tests.toy_env:Nope")


def test_clock_counts_truncates_and_guards_the_end():
    clock = EpisodeClock(2)
    with pytest.raises(NoEpisodeError):
        clock.tick()
    clock.start()
    assert clock.tick() == 1 and clock.finish(False) is False
    assert clock.tick() == 2 and clock.finish(False) is True
    with pytest.raises(EpisodeFinishedError, match="reset"):
        clock.tick()
    clock.start()
    clock.tick()
    assert clock.finish(True) is False  # terminated, not truncated
    with pytest.raises(EpisodeFinishedError):
        clock.tick()


def test_clock_rejects_empty_budget():
    with pytest.raises(ValueError):
        EpisodeClock(0)


def test_check_split():
    assert check_split("test_unseen") == "test_unseen"
    with pytest.raises(EnvError, match="Unknown split 'dev'"):
        check_split("dev")


def test_options_are_checked_against_the_constructor():
    assert make("tests.toy_env:ToyEnv", max_steps=3).max_steps == 3
    with pytest.raises(EnvError, match="has no option 'max_step': did you mean 'max_steps'"):
        make("tests.toy_env:ToyEnv", max_step=3)
    with pytest.raises(EnvError, match="env option n_tasks must be an integer, not '8'"):
        make("tests.toy_env:ToyEnv", n_tasks="8")

    def flexible(**options):  # takes any option: only the constructor can judge them
        return ToyEnv(max_steps=options.get("steps", 5))

    register("flexible-toy", flexible)
    assert make("flexible-toy", steps=2).max_steps == 2
