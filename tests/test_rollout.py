"""Lockstep rollouts: continuous batching, exactly-once episodes, equality with sequential runs."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from coevo.envs.conversation import replay
from coevo.envs.pool import EnvPool, WorkerLost, attempt
from coevo.policy.base import Completion, Sampling
from coevo.rollout import rollout
from coevo.seeds import episode_seed
from tests.toy_env import ToyEnv


@pytest.fixture(autouse=True)
def _tiny_models_run_on_one_thread(one_thread):
    """Tiny models only (see `one_thread` in tests/conftest.py)."""


@pytest.fixture(scope="module")
def tokenizer(nano_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(nano_model_dir)


class ScriptedPolicy:
    """Looks `n` times (n = the task's index mod 4), then types the word; records each batch."""

    name = "scripted"
    max_context = 4096

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.calls: list[list[int]] = []  # per generate call: steps taken by each prompt's episode

    def generate(self, prompts, sampling, *, seeds=None):
        out, steps = [], []
        for ids in prompts:
            text = self.tokenizer.decode(ids)
            word = re.search(r"Type (\w+)\.", text).group(1)
            taken = text.count("Observation:")
            looks = ToyEnvWords.index(word) % 4
            action = "look" if taken < looks else f"type[{word}]"
            out.append(Completion(f"Thought: step {taken}.\nAction: {action}", "stop"))
            steps.append(taken)
        self.calls.append(steps)
        return out


ToyEnvWords = [t.data["word"] for t in ToyEnv(n_tasks=8).tasks("train")]


def test_continuous_batching_finishes_every_episode_exactly_once(tokenizer):
    env = ToyEnv()
    tasks = env.tasks("train")
    policy = ScriptedPolicy(tokenizer)
    made = []

    def factory():
        made.append(ToyEnv())
        return made[-1]

    trajectories = rollout(policy, factory, tasks, samples=3, batch_size=5, progress=False)
    assert [(t.task.id, t.sample) for t in trajectories] == [
        (task.id, k) for task in tasks for k in range(3)
    ]
    assert all(t.reward == 1.0 and t.terminated for t in trajectories)
    assert Counter(t.steps for t in trajectories) == Counter(
        (ToyEnvWords.index(t.task.data["word"]) % 4) + 1 for t in trajectories
    )
    assert max(len(c) for c in policy.calls) == 5
    # Queued episodes joined while others were mid-way: some batch mixes step counts.
    assert any(len(set(c)) > 1 for c in policy.calls)
    # Continuous batching keeps the batch full: total replies / calls is near the batch size.
    assert sum(len(c) for c in policy.calls) == sum(t.steps for t in trajectories)
    assert len(policy.calls) < sum(t.steps for t in trajectories) / 4
    assert len(made) <= 5  # envs are reused from the pool, never one per episode


def test_the_progress_line_in_a_log_keeps_its_counts(tokenizer, capsys):
    tasks = ToyEnv().tasks("train")[:3]
    name = "explore-1-target, tasks 1-64 of 64"  # as long as a run's
    rollout(ScriptedPolicy(tokenizer), ToyEnv, tasks, description=name, progress=True)
    line = capsys.readouterr().out.strip().splitlines()[-1]  # captured: not a terminal
    assert name in line and "3/3 episodes, mean reward 1.000," in line and "steps/s" in line


def test_trajectories_hold_the_same_text_as_a_replay(tokenizer):
    env = ToyEnv()
    (traj,) = rollout(ScriptedPolicy(tokenizer), ToyEnv, env.tasks("train")[2:3], progress=False)
    again = replay(env, traj.task, traj.agent_texts, agent="scripted")
    assert traj.turns == again.turns
    assert (traj.reward, traj.steps, traj.terminated) == (again.reward, again.steps, True)
    assert traj.agent == "scripted"
    assert traj.metadata["sampling"] == Sampling().to_dict()
    assert traj.metadata["seed"] == episode_seed(0, traj.task.id, 0)


def test_pool_is_reused_across_rollouts_and_drops_a_crashed_env(tokenizer):
    class Flaky(ToyEnv):
        def step(self, action):
            if self._task.data["word"] == "cherry":
                raise RuntimeError("simulator died")
            return super().step(action)

    tasks = ToyEnv().tasks("train")
    with EnvPool(Flaky) as pool:
        first = rollout(ScriptedPolicy(tokenizer), pool, tasks, batch_size=3, progress=False)
        size = pool.size
        second = rollout(ScriptedPolicy(tokenizer), pool, tasks, batch_size=3, progress=False)
        assert pool.size <= 3 and size <= 3
    crashed = [t for t in first + second if "env_error" in t.metadata]
    assert [t.task.data["word"] for t in crashed] == ["cherry", "cherry"]
    assert all(t.truncated and t.reward == 0 for t in crashed)
    assert "simulator died" in crashed[0].metadata["env_error"]
    assert sum(1 for t in first if t.reward == 1.0) == len(tasks) - 1


class LosingPool(EnvPool):
    """A pool whose "worker" dies under the env of `word` on its `at`-th step, `times` times:
    the rollout sees WorkerLost there, as from a Ray worker whose process was killed."""

    def __init__(self, word: str, at: int, times: int) -> None:
        super().__init__(ToyEnv)
        self.word, self.at, self.times = word, at, times
        self.steps: dict[int, int] = {}

    def step_all(self, calls):
        out = []
        for env, action in calls:
            self.steps[id(env)] = self.steps.get(id(env), 0) + 1
            if (
                env._task.data["word"] == self.word
                and self.steps[id(env)] == self.at
                and self.times
            ):
                self.times -= 1
                self.discard(env)  # it went with its worker
                out.append(WorkerLost("env worker 0 died"))
            else:
                out.append(attempt(env.step, action))
        return out

    def reset_all(self, calls):
        for env, _, _ in calls:
            self.steps[id(env)] = 0
        return super().reset_all(calls)


@pytest.mark.parametrize("deaths", [1, 2])
def test_an_episode_a_dead_worker_took_is_played_again_once_else_marked(tokenizer, deaths):
    tasks = ToyEnv().tasks("train")
    policy = ScriptedPolicy(tokenizer)
    expected = rollout(policy, ToyEnv, tasks, batch_size=3, progress=False)
    with LosingPool("damson", at=2, times=deaths) as pool:  # damson looks 3 times, then types
        got = rollout(policy, pool, tasks, batch_size=3, progress=False)
    assert [(t.task.id, t.sample) for t in got] == [(t.task.id, t.sample) for t in expected]
    same = [(t.turns, t.reward) for t in got if t.task.data["word"] != "damson"]
    assert same == [(t.turns, t.reward) for t in expected if t.task.data["word"] != "damson"]
    (lost,) = [t for t in got if t.task.data["word"] == "damson"]
    if deaths == 1:  # replayed from the start: the episode it would have been
        assert (lost.turns, lost.reward) == (expected[3].turns, expected[3].reward)
        assert "worker_lost" not in lost.metadata
    else:
        assert lost.metadata["worker_lost"] and lost.truncated and lost.reward == 0


def test_context_overflow_ends_the_episode_with_a_note(tokenizer):
    policy = ScriptedPolicy(tokenizer)
    tasks = ToyEnv().tasks("train")[:2]
    out = rollout(policy, ToyEnv, tasks, max_length=20 + 128, progress=False)
    assert [t.steps for t in out] == [0, 0]
    assert all(t.truncated and "context" in t.metadata["error"] for t in out)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_lockstep_equals_sequential_with_a_real_model(toy_agent_dir, temperature):
    from coevo.policy.hf import HFPolicy

    policy = HFPolicy(toy_agent_dir, dtype="float64")  # float64: batching cannot flip an argmax
    env = ToyEnv()
    tasks = env.tasks("train") + env.tasks("test_unseen")[:4]
    if temperature > 0:
        tasks = tasks[:4]
    sampling = Sampling(temperature=temperature, max_new_tokens=32 if temperature == 0 else 16)
    together = rollout(policy, ToyEnv, tasks, sampling=sampling, samples=2, batch_size=7, seed=5,
                       progress=False)  # fmt: skip
    alone = rollout(policy, ToyEnv, tasks, sampling=sampling, samples=2, batch_size=1, seed=5,
                    progress=False)  # fmt: skip
    assert [t.to_dict() for t in together] == [t.to_dict() for t in alone]
    # The episodes really differ, so the comparison means something.
    if temperature == 0:
        assert len({t.reward for t in together}) > 1
    else:
        assert len({t.agent_texts[0] for t in together}) > 1
    for traj in together:  # every trajectory replays to the same text and outcome
        again = replay(env, traj.task, traj.agent_texts)
        assert (again.turns, again.reward, again.steps) == (traj.turns, traj.reward, traj.steps)


def test_random_model_runs_to_the_step_budget(nano_model_dir):
    from coevo.policy.hf import HFPolicy

    policy = HFPolicy(nano_model_dir, dtype="float64")
    tasks = ToyEnv().tasks("train")[:3]
    sampling = Sampling(max_new_tokens=12)
    out = rollout(policy, ToyEnv, tasks, sampling=sampling, batch_size=2, progress=False)
    one = rollout(policy, ToyEnv, tasks, sampling=sampling, batch_size=1, progress=False)
    assert [t.to_dict() for t in out] == [t.to_dict() for t in one]
    assert all(t.truncated and t.steps == 5 for t in out)


def test_kept_caches_give_the_same_episodes_as_full_prompts(nano_model_dir):
    from coevo.policy.hf import HFPolicy

    policy = HFPolicy(nano_model_dir, dtype="float64")
    tasks = ToyEnv().tasks("test_seen")[:5]
    sampling = Sampling(temperature=1.0, max_new_tokens=10, logprobs=True)
    cached = rollout(policy, ToyEnv, tasks, sampling=sampling, batch_size=3, progress=False)
    assert policy._sessions == {}  # every episode's cache was freed
    full = rollout(policy, ToyEnv, tasks, sampling=sampling, batch_size=3, cache=False,
                   progress=False)  # fmt: skip
    assert [t.to_dict() for t in cached] == [t.to_dict() for t in full]


def test_session_reuses_the_cached_prefix(nano_model_dir):
    from coevo.policy.hf import HFPolicy
    from coevo.render import render_prompt
    from coevo.trajectory import Turn

    policy = HFPolicy(nano_model_dir, dtype="float64")
    sampling = Sampling(max_new_tokens=6, logprobs=True, stop=())
    first = [Turn("user", "Type fig.")]
    (a,) = policy.generate([render_prompt(first, policy.tokenizer)], sampling, sessions=["e"])
    kept = len(policy._sessions["e"].ids)
    turns = [*first, Turn("assistant", a.text), Turn("user", "Observation: no.")]
    prompt = render_prompt(turns, policy.tokenizer)
    (b,) = policy.generate([prompt], sampling, sessions=["e"])
    (c,) = policy.generate([prompt], sampling)
    assert kept >= len(render_prompt(first, policy.tokenizer))
    assert b.token_ids == c.token_ids
    assert b.logprobs == pytest.approx(c.logprobs, abs=1e-9)
    policy.end_sessions(["e"])
    assert policy._sessions == {}


def test_sessions_survive_rows_leaving_the_batch(nano_model_dir):
    from coevo.policy.hf import HFPolicy
    from coevo.render import render_prompt
    from coevo.trajectory import Turn

    policy = HFPolicy(nano_model_dir, dtype="float64")
    # Stop strings a random model hits at different steps: rows leave the batch one by one,
    # so the batch is pruned while earlier rows' sessions still look into its cache.
    sampling = Sampling(temperature=1.0, max_new_tokens=16, logprobs=True, stop=("e", "a"))
    keys, seeds = [f"e{i}" for i in range(8)], list(range(8))
    firsts = [
        [Turn("user", f"Type {w}.")]
        for w in ["fig", "kiwi", "plum", "pear", "lime", "date", "yam", "fog"]
    ]
    out = policy.generate([render_prompt(t, policy.tokenizer) for t in firsts], sampling,
                          seeds=seeds, sessions=keys)  # fmt: skip
    assert len({len(c.token_ids) for c in out}) > 2  # rows really finished at different steps
    prompts = [
        render_prompt(
            [*t, Turn("assistant", c.text), Turn("user", "Observation: no.")], policy.tokenizer
        )  # fmt: skip
        for t, c in zip(firsts, out, strict=True)
    ]
    again = policy.generate(prompts, sampling, seeds=seeds, sessions=keys)
    fresh = policy.generate(prompts, sampling, seeds=seeds)
    assert [c.token_ids for c in again] == [c.token_ids for c in fresh]
    for a, b in zip(again, fresh, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-9)


@pytest.mark.parametrize("layout", [True, False])
def test_unlike_new_parts_are_fed_in_groups_and_give_what_each_row_gives_alone(
    nano_model_dir, layout
):
    """A long page, a one-line error and a new episode in one call: the prefill runs in
    groups of like length, and every row samples what it samples alone, with no cache. A
    model whose cache layout is not known (sliding-window layers) feeds all rows at once."""
    from coevo.policy.hf import HFPolicy
    from coevo.render import render_prompt
    from coevo.trajectory import Turn

    policy = HFPolicy(nano_model_dir, dtype="float64", device="cpu")  # exact ids: the CPU
    if not layout:
        policy._layout = None
    prefills = []
    policy.model.register_forward_pre_hook(
        lambda _, args, kwargs: (
            prefills.append(kwargs["input_ids"].shape) if kwargs["input_ids"].shape[1] > 1 else None
        ),
        with_kwargs=True,
    )
    sampling = Sampling(temperature=1.0, max_new_tokens=8, logprobs=True, stop=())
    words = ["fig", "kiwi", "plum", "pear", "lime", "date"]
    firsts = [[Turn("user", f"Type {w}.")] for w in words]
    keys, seeds = [f"e{i}" for i in range(len(words))], list(range(len(words)))
    out = policy.generate([render_prompt(t, policy.tokenizer) for t in firsts], sampling,
                          seeds=seeds, sessions=keys)  # fmt: skip
    page = "Observation: " + " ".join(words * 12)
    observations = [page, "Observation: no.", page, "Observation: no.", "Observation: a b c."]
    turns = [
        [*t, Turn("assistant", c.text), Turn("user", o)]
        for t, c, o in zip(firsts, out, observations, strict=False)
    ] + [[Turn("user", "Type yam.")]]  # a new episode joins, nothing cached
    prompts = [render_prompt(t, policy.tokenizer) for t in turns]
    keys[-1] = "new"
    prefills.clear()
    again = policy.generate(prompts, sampling, seeds=seeds, sessions=keys)
    assert (len(prefills) > 1) == layout  # several groups
    assert sum(rows for rows, _ in prefills) == len(prompts)  # each row fed once
    for prompt, seed, got in zip(prompts, seeds, again, strict=True):
        (alone,) = policy.generate([prompt], sampling, seeds=[seed])
        assert got.token_ids == alone.token_ids
        assert got.logprobs == pytest.approx(alone.logprobs, abs=1e-9)
    # The sessions the grouped call kept hold the right keys and values: a next step on them
    # samples what a fresh full prompt does.
    turns = [[*t, Turn("assistant", c.text), Turn("user", "Observation: ok.")]
             for t, c in zip(turns, again, strict=True)]  # fmt: skip
    prompts = [render_prompt(t, policy.tokenizer) for t in turns]
    third = policy.generate(prompts, sampling, seeds=seeds, sessions=keys)
    fresh = policy.generate(prompts, sampling, seeds=seeds)
    assert [c.token_ids for c in third] == [c.token_ids for c in fresh]
    for a, b in zip(third, fresh, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-9)


def test_sampled_ids_and_logprobs_reach_the_trajectory_and_match_a_fresh_forward(nano_model_dir):
    """What GRPO needs: the trajectory keeps what was sampled, and a forward pass over the
    rendered ids gives back the log-probs the policy sampled with (no re-tokenisation drift)."""
    import torch

    from coevo.policy.hf import HFPolicy
    from coevo.render import render

    policy = HFPolicy(nano_model_dir, dtype="float64", device="cpu")  # compared to 1e-6
    tasks = ToyEnv().tasks("train")[:3]
    sampling = Sampling(temperature=1.0, max_new_tokens=8, logprobs=True)
    out = rollout(policy, ToyEnv, tasks, sampling=sampling, samples=2, batch_size=4,
                  progress=False)  # fmt: skip
    assert [t.sample for t in out] == [0, 1] * 3
    for traj in out:
        agent = [t for t in traj.turns if t.role == "assistant"]
        assert agent and all(t.token_ids and len(t.logprobs) == len(t.token_ids) for t in agent)
        rendered = render(traj, policy.tokenizer)
        learned = [i for i, m in zip(rendered.input_ids, rendered.action_mask, strict=True) if m]
        assert learned == [i for t in agent for i in t.token_ids]
        ids = torch.tensor([rendered.input_ids])
        with torch.no_grad():
            logits = policy.model(input_ids=ids).logits[0, :-1]  # (seq - 1, vocab)
        fresh = torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None])[:, 0]
        mask = torch.tensor(rendered.action_mask[1:], dtype=torch.bool)
        sampled = torch.tensor(rendered.sampled_logprobs[1:], dtype=torch.float64)
        torch.testing.assert_close(fresh[mask], sampled[mask], rtol=0, atol=1e-6)


def test_the_session_capability_is_part_of_the_contract(nano_model_dir, tokenizer):
    from coevo.policy.base import Policy, SessionPolicy
    from coevo.policy.hf import HFPolicy

    scripted = ScriptedPolicy(tokenizer)
    assert isinstance(scripted, Policy) and not isinstance(scripted, SessionPolicy)
    assert isinstance(HFPolicy(nano_model_dir), SessionPolicy)


def test_the_progress_bar_says_what_it_counts():
    import io

    from rich.console import Console

    from coevo.rollout import _Progress

    bar = _Progress("explore-1-target, tasks 1-4 of 4", 4, enabled=True)
    try:
        bar.done(1.0)
        bar.done(0.0)
        out = io.StringIO()
        Console(file=out, width=200).print(bar.progress.get_renderable())
    finally:
        bar.close()
    line = out.getvalue()
    assert "explore-1-target, tasks 1-4 of 4" in line
    assert "2/4 episodes, mean reward 0.500," in line and "steps/s" in line


class FailingPolicy(ScriptedPolicy):
    """ScriptedPolicy that is cut off (as by a kill) at its `fail_at`-th generate call."""

    def __init__(self, tokenizer, fail_at: int) -> None:
        super().__init__(tokenizer)
        self.fail_at = fail_at

    def generate(self, prompts, sampling, *, seeds=None):
        if len(self.calls) + 1 == self.fail_at:
            raise KeyboardInterrupt
        return super().generate(prompts, sampling, seeds=seeds)


def test_episodes_are_handed_on_as_they_end(tokenizer):
    tasks = ToyEnv().tasks("train")
    policy = ScriptedPolicy(tokenizer)
    handed: list[tuple[int, list[tuple[str, int]]]] = []  # (generate calls so far, episodes)

    def on_finished(episodes):
        handed.append((len(policy.calls), [(t.task.id, t.sample) for t in episodes]))

    played = rollout(
        policy, ToyEnv, tasks, samples=2, batch_size=4, progress=False, on_finished=on_finished
    )
    every = [key for _, keys in handed for key in keys]
    assert sorted(every) == sorted((t.task.id, t.sample) for t in played)  # each once
    assert handed[0][0] < len(policy.calls)  # the first came long before the rollout ended
    # Cut off mid-way, the rollout had already handed on every episode that ended before.
    cut = FailingPolicy(tokenizer, fail_at=5)
    ended = []
    with pytest.raises(KeyboardInterrupt):
        rollout(
            cut, ToyEnv, tasks, samples=2, batch_size=4, progress=False, on_finished=ended.extend
        )
    # The same scripted episodes: exactly those the whole run had ended within 4 calls.
    expected = [key for calls, keys in handed if calls <= 4 for key in keys]
    assert expected and [(t.task.id, t.sample) for t in ended] == expected


@pytest.mark.parametrize("decode", ["eager", "static"])
def test_the_old_caches_are_freed_before_the_next_step_runs(nano_model_dir, decode):
    """A step over kept sessions copies their caches into one batch cache; the old ones must
    go as they are copied, not stay beside the new ones until the step ends."""
    import weakref

    from coevo.policy.hf import HFPolicy
    from coevo.render import render_prompt
    from coevo.trajectory import Turn

    policy = HFPolicy(nano_model_dir, dtype="float32", decode=decode)
    sampling = Sampling(max_new_tokens=4, stop=())
    firsts = [[Turn("user", f"Type {word}.")] for word in ("fig", "plum")]
    replies = policy.generate(
        [render_prompt(t, policy.tokenizer) for t in firsts], sampling, sessions=["a", "b"]
    )

    def storage(tensor):  # what holds a kept cache's memory: the tensor, or the one it views
        return weakref.ref(tensor._base if tensor._base is not None else tensor)

    old = [storage(policy._sessions[key].kv[0][0]) for key in ("a", "b")]
    alive_at_forward: list[list[bool]] = []
    hook = policy.model.register_forward_pre_hook(
        lambda module, args: alive_at_forward.append([r() is not None for r in old])
    )
    nexts = [
        render_prompt(
            [*t, Turn("assistant", r.text), Turn("user", "Observation: no.")], policy.tokenizer
        )
        for t, r in zip(firsts, replies, strict=True)
    ]
    policy.generate(nexts, sampling, sessions=["a", "b"])
    hook.remove()
    assert alive_at_forward and alive_at_forward[0] == [False, False]
    assert set(policy._sessions) == {"a", "b"}  # kept again, over the new cache


@pytest.mark.parametrize("decode", ["eager", "static"])
def test_a_session_left_out_of_a_call_keeps_its_cache(nano_model_dir, decode):
    """Sessions kept by one call share its cache: a later call over some of them must leave
    the others' keys and values as they were, and their next turn must reply as without any
    session."""
    import torch

    from coevo.policy.hf import HFPolicy
    from coevo.render import render_prompt
    from coevo.trajectory import Turn

    policy = HFPolicy(nano_model_dir, dtype="float32", decode=decode)
    sampling = Sampling(max_new_tokens=5, stop=(), logprobs=True)
    turns = [[Turn("user", f"Type {word}.")] for word in ("fig", "plum", "kiwi")]

    def prompts(keys):
        return [render_prompt(turns[k], policy.tokenizer) for k in keys]

    def step(keys, sessions):
        replies = policy.generate(prompts(keys), sampling, sessions=sessions)
        for k, reply in zip(keys, replies, strict=True):
            turns[k] += [Turn("assistant", reply.text), Turn("user", "Observation: no.")]
        return replies

    step([0, 1, 2], ["a", "b", "c"])
    kept = [t.clone() for t in policy._sessions["c"].kv[0]]
    step([0, 1], ["a", "b"])  # "c" sits this call out
    assert all(torch.equal(t, u) for t, u in zip(kept, policy._sessions["c"].kv[0], strict=True))
    fresh = policy.generate(prompts([2, 0]), sampling)  # the same prompts, nothing cached
    cached = policy.generate(prompts([2, 0]), sampling, sessions=["c", "a"])
    assert [r.token_ids for r in cached] == [r.token_ids for r in fresh]
    for got, want in zip(cached, fresh, strict=True):
        assert got.logprobs == pytest.approx(want.logprobs, abs=1e-4)


class MiscountingPolicy(ScriptedPolicy):
    """Gives its replies' token ids with one log-prob too few."""

    def generate(self, prompts, sampling, *, seeds=None):
        return [
            Completion(c.text, c.finish_reason, token_ids=(1, 2, 3), logprobs=(-0.1, -0.2))
            for c in super().generate(prompts, sampling, seeds=seeds)
        ]


def test_sampled_ids_without_one_log_prob_each_are_refused_not_dropped(tokenizer):
    tasks = ToyEnv().tasks("train")[:2]
    with pytest.raises(ValueError, match="returned 3 token ids but 2 log-probs"):
        rollout(MiscountingPolicy(tokenizer), ToyEnv, tasks, batch_size=2, progress=False)


class LookingPolicy(ScriptedPolicy):
    """Always looks (to the step budget), each reply numbered; records every prompt."""

    def __init__(self, tokenizer) -> None:
        super().__init__(tokenizer)
        self.prompts: list[list[int]] = []

    def generate(self, prompts, sampling, *, seeds=None):
        self.prompts.extend(prompts)
        return [Completion(f"Thought: look {len(self.prompts)}.\nAction: look", "stop")] * len(
            prompts
        )


def test_a_cut_block_moves_the_cut_less_often_and_every_prompt_fits(tokenizer):
    from functools import partial
    from itertools import pairwise

    from coevo.lengths import common_prefix

    task = ToyEnv().tasks("train")[:1]
    env = partial(ToyEnv, max_steps=16)
    whole = LookingPolicy(tokenizer)
    rollout(whole, env, task, progress=False)
    step = len(whole.prompts[2]) - len(whole.prompts[1])
    sampling = Sampling(max_new_tokens=8)
    limit = len(whole.prompts[5]) + sampling.max_new_tokens  # outgrown from the 7th step on
    breaks = []
    for block in (0, 4 * step):
        policy = LookingPolicy(tokenizer)
        (played,) = rollout(
            policy, env, task, sampling=sampling, max_length=limit, cut_block=block, progress=False
        )
        assert played.steps == 16 and played.metadata["prompts_cut_by_max_length"] == 10
        assert all(len(p) <= limit - sampling.max_new_tokens for p in policy.prompts)
        # Where the previous prompt is not a prefix of the next, a session prefills again.
        pairs = pairwise(policy.prompts)
        breaks.append(sum(common_prefix(a, b) < len(a) for a, b in pairs))
    assert breaks[0] >= 8 and 0 < breaks[1] <= breaks[0] // 3
