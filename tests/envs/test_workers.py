"""Env workers on Ray: the same episodes as envs stepped in this process, a killed worker
process costing only its live episodes, and one sentence when Ray is not installed."""

from __future__ import annotations

import os
import signal
import time

import pytest

from coevo.policy.base import Sampling
from coevo.policy.hf import HFPolicy
from coevo.rollout import rollout
from tests.toy_env import ToyEnv

ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'coevo[ray]'")

from coevo.envs.workers import RayEnvPool  # noqa: E402 (after the skip)


@pytest.fixture(scope="module")
def cluster():
    """One small local Ray for the module: starting one costs seconds on a 2-core machine."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def policy(toy_agent_dir):
    return HFPolicy(toy_agent_dir, dtype="float64")


def played(trajectories):
    return [(t.task.id, t.sample, t.turns, t.reward, t.steps) for t in trajectories]


SAMPLING = Sampling(temperature=1.0, max_new_tokens=24)


def test_workers_play_the_episodes_envs_in_this_process_play(cluster, policy, one_thread):
    tasks = ToyEnv().tasks("train")
    local = rollout(policy, ToyEnv, tasks, sampling=SAMPLING, samples=2, batch_size=6,
                    seed=3, progress=False)  # fmt: skip
    with RayEnvPool(ToyEnv, workers=2) as pool:
        remote = rollout(policy, pool, tasks, sampling=SAMPLING, samples=2, batch_size=6,
                         seed=3, progress=False)  # fmt: skip
        assert pool.size == 6 and {e.worker for e in pool._all} == {0, 1}  # spread over both
        env = pool.acquire()  # the rest of the Env contract goes through too
        assert env.tasks("train") == tasks and env.max_steps == 5
        assert env.expert(tasks[0]) == ToyEnv().expert(tasks[0])
    assert played(remote) == played(local)


def test_a_killed_worker_costs_only_its_live_episodes(cluster, policy, one_thread):
    tasks = ToyEnv().tasks("train")
    local = rollout(policy, ToyEnv, tasks, sampling=SAMPLING, batch_size=4, progress=False)
    with RayEnvPool(ToyEnv, workers=2) as pool:
        victim = pool.worker_pids()[0]

        class KillsAWorker:
            """The policy, killing worker 0's process during the second generation step."""

            def __init__(self) -> None:
                self.calls = 0
                self.name, self.tokenizer, self.max_context = "p", policy.tokenizer, 1024

            def generate(self, prompts, sampling, *, seeds=None):
                self.calls += 1
                if self.calls == 2:
                    os.kill(victim, signal.SIGKILL)
                    time.sleep(0.5)
                return policy.generate(prompts, sampling, seeds=seeds)

        remote = rollout(KillsAWorker(), pool, tasks, sampling=SAMPLING, batch_size=4,
                         progress=False)  # fmt: skip
        assert victim not in pool.worker_pids()  # a fresh worker took its place
    # Its episodes were played again on the fresh worker: the run is the one without the kill.
    assert played(remote) == played(local)
    assert not any("worker_lost" in t.metadata for t in remote)


def test_a_run_with_env_workers_is_the_run_without(cluster, tmp_path, one_thread):
    """Every use of the run's envs goes through the workers: tasks, expert demonstrations, the
    nano model's corpus, evaluation."""
    from coevo.config import build
    from coevo.methods.runner import execute
    from coevo.run.recipe import RunConfig
    from coevo.store import Store

    recipe = {
        "method": "sft",
        "env": {"name": "tests.toy_env:ToyEnv", "options": {"n_tasks": 4}},
        "model": {"size": "nano", "max_length": 512},
        "sft": {"epochs": 2, "batch_size": 4, "progress": False},
        "eval": {"sampling": {"max_new_tokens": 16}, "batch_size": 4},
    }
    local = execute(build(RunConfig, recipe), tmp_path / "local", quiet=True)
    workers = execute(
        build(RunConfig, {**recipe, "rollout": {"workers": 2}}), tmp_path / "workers", quiet=True
    )
    stages = ("experts", "eval-0-test_seen", "eval-0-test_unseen")
    with Store(local, readonly=True) as a, Store(workers, readonly=True) as b:
        for stage in stages:
            assert played(b.trajectories(stage=stage)) == played(a.trajectories(stage=stage))
            assert a.trajectories(stage=stage)
    # Where the envs ran is not part of the run: the saved recipes are the same.
    assert (local / "config.yaml").read_text() == (workers / "config.yaml").read_text()
