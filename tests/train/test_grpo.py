"""The GRPO loop on a nano model: advantages, masking, the on-policy ratio, sampled log-probs,
exact resume, LoRA, and a toy reward it certainly learns."""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from coevo.config import build, merge
from coevo.envs.base import StepResult
from coevo.methods.grpo import hf_player
from coevo.run.recipe import GrpoSection
from coevo.train import grpo as grpo_module
from coevo.train.groups import TaskOrder, check_groups, collate, episode, rollout_stats
from coevo.train.grpo import GrpoConfig, train_grpo
from coevo.train.loop import make_accelerator
from coevo.train.losses import group_advantages, grpo_loss, token_logps
from coevo.train.model import AgentLogps
from coevo.train.settings import Compute
from coevo.trajectory import Task, Trajectory, Turn
from tests.train.conftest import EXACT, cpu_state
from tests.train.test_loop import Killed, kill_at, same_weights

LETTER = "a"


class LetterEnv:
    """One reply per episode, scored by how many times it writes the letter a (6 or more: 1).

    A random nano model writes a few a's by chance, some samples more than others, so every
    group has signal and the gradient of GRPO certainly raises the reward.
    """

    name = "letters"
    instruction_prompt = "Write."
    max_steps = 1

    def tasks(self, split: str) -> list[Task]:
        return [Task(f"letters/{split}/{i}", "letters", split, f"Write {i}.") for i in range(8)]

    def reset(self, task: Task, *, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        return task.instruction, {}

    def step(self, action: str) -> StepResult:
        return StepResult("Done.", min(1.0, action.count(LETTER) / 6), True, False, {})

    def expert(self, task: Task) -> list[Turn]:
        return []

    def close(self) -> None:
        pass


class ChattyEnv:
    """2 to 4 turns by task, with observations that repeat a word as many times as the task and
    the step say: the episodes of one batch differ in length and in what they were shown."""

    name = "chatty"
    instruction_prompt = "Type."
    max_steps = 4

    def tasks(self, split: str) -> list[Task]:
        return [Task(f"chatty/{i}", "chatty", split, f"Type {i}.", {"i": i}) for i in range(4)]

    def reset(self, task: Task, *, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        self.i, self.t = task.data["i"], 0
        return f"Instruction: type{' word' * (3 + 5 * self.i)}.", {}

    def step(self, action: str) -> StepResult:
        self.t += 1
        seen = "The word is" + " apple" * (1 + (7 * self.i + 3 * self.t) % 11) + "."
        return StepResult(seen, float(len(action) % 2), self.t >= 2 + self.i % 3, False, {})

    def expert(self, task: Task) -> list[Turn]:
        return []

    def close(self) -> None:
        pass


def config(**kw: Any) -> GrpoSection:
    """Test settings: 4 tasks x 8 samples of 16 tokens a step, lr 3e-3, constant; `kw` over."""
    base = {
        "steps": 2,
        "tasks_per_step": 4,
        "samples": 8,
        "sampling": {"temperature": 1.0, "max_new_tokens": 16},
        "rollout_batch_size": 32,
        "micro_batch_size": 16,
        "progress": False,
        "optim": {"lr": 3e-3, "warmup_ratio": 0.0, "schedule": "constant"},
    }
    return build(GrpoSection, merge(base, kw))


def grpo(model_dir: Path, out: Path, settings: GrpoConfig, model: Any = None, device="auto"):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    play = hf_player(model_dir, LetterEnv, settings, max_length=256)
    tasks = LetterEnv().tasks("train")
    start = str(model_dir) if model is None else model
    return train_grpo(
        start, tasks, play, settings, output_dir=out, tokenizer=tokenizer, device=device
    )


def attempt(task: str, sample: int, reward: float) -> Trajectory:
    t = Task(task, "letters", "train", "Write.")
    return Trajectory(t, "target", (Turn("user", "Write."),), reward, True, False, 1, sample=sample)


def test_advantages_and_the_share_of_groups_without_signal_by_hand():
    tasks = [Task("a", "letters", "train", "Write."), Task("b", "letters", "train", "Write.")]
    rewards = [1.0, 0.0, 0.5, 0.5, 0.3, 0.3, 0.3, 0.3]
    played = [attempt(t.id, k, rewards[4 * i + k]) for i, t in enumerate(tasks) for k in range(4)]
    groups = check_groups(played, tasks, 4)
    r = torch.tensor(rewards)
    # Group a: mean 0.5, deviations (0.5, -0.5, 0, 0), std sqrt(0.5 / 4) = 0.35355.
    expected = torch.tensor([1.41421, -1.41421, 0, 0, 0, 0, 0, 0])
    torch.testing.assert_close(group_advantages(r, groups), expected, rtol=0, atol=1e-4)
    raw = group_advantages(r, groups, scale=False)
    torch.testing.assert_close(raw, torch.tensor([0.5, -0.5, 0, 0, 0, 0, 0, 0]))
    stats = rollout_stats(make_accelerator(Compute(), device=EXACT), played, r, groups, 4)
    assert stats["no_signal"] == 0.5  # group b scored 0.3 four times
    assert stats["reward_mean"] == pytest.approx(sum(rewards) / 8)
    assert stats["success_rate"] == 1 / 8
    with pytest.raises(ValueError, match="needs 4 of each of its 2 tasks"):
        check_groups(played[:-1], tasks, 4)


def test_each_pass_plays_every_task_once_at_most_in_a_seeded_order():
    order = TaskOrder(10, 4, seed=0)
    first, second, third = order.step(1), order.step(2), order.step(3)
    assert len(set(first + second)) == 8  # a pass of 10 tasks is 2 steps of 4, 2 left over
    assert third != first and len(set(third)) == 4
    assert TaskOrder(10, 4, seed=0).step(3) == third != TaskOrder(10, 4, seed=1).step(3)


def test_the_sampled_logps_equal_a_fresh_forward_and_only_agent_tokens_get_gradient(
    nano_model_dir,
):
    """The log-probs kept at sampling are what a forward of the same ids gives (float32, CPU);
    the loss's gradient reaches the logits of the agent's tokens and nothing else."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(nano_model_dir, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(nano_model_dir)
    settings = config(samples=2)
    play = hf_player(nano_model_dir, LetterEnv, settings, max_length=256)
    tasks = LetterEnv().tasks("train")[:2]
    model.eval()
    played = play(model, tasks, step=1, seed=0)
    advantages = [1.0, -1.0, 0.5, -0.5]
    episodes = [episode(t, tokenizer, a, 256) for t, a in zip(played, advantages, strict=True)]
    for t, e in zip(played, episodes, strict=True):  # the agent's ids are the sampled ones
        learned = [i for i, m in zip(e.input_ids, e.action_mask, strict=True) if m]
        assert learned == list(t.turns[1].token_ids)
    batch = collate(episodes, torch.device("cpu"))
    mask = batch["action_mask"][:, 1:].bool()
    with torch.no_grad():
        fresh, _ = AgentLogps(model)(
            batch["input_ids"], batch["attention_mask"], batch["action_mask"], per_token=True
        )
    torch.testing.assert_close(fresh[mask], batch["old_logps"][:, 1:][mask], rtol=0, atol=1e-5)

    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    logits.retain_grad()
    logps = token_logps(logits[:, :-1], batch["input_ids"][:, 1:])  # (batch, seq - 1)
    old = batch["old_logps"][:, 1:]
    grpo_loss(logps, old, batch["advantage"], mask, ref_logps=old, beta=0.1).loss.backward()
    grad = logits.grad[:, :-1].abs().sum(-1)  # (batch, seq - 1)
    assert torch.all(grad[~mask] == 0)  # instructions, observations, markup, padding
    assert torch.all(grad[mask] > 0)


def quick_to_stop(model_dir: Path):
    """The nano model with its end-of-turn logit raised: its replies end anywhere from 1 to
    16 tokens, as a trained agent's do, rather than all at max_new_tokens."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from coevo.render import end_of_turn_ids

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    text = tokenizer("Instruction: type word word. The word is apple.")["input_ids"]
    with torch.no_grad():
        hidden = model.model(input_ids=torch.tensor([text])).last_hidden_state[0].mean(0)
        model.lm_head.weight[end_of_turn_ids(tokenizer)[0]] += 40 * hidden / hidden.norm() ** 2
    return model, tokenizer


def test_multi_turn_batched_rollouts_keep_the_log_probs_a_fresh_forward_gives(nano_model_dir):
    """Lockstep sampled rollouts of episodes of different lengths and contexts, several turns
    each, some replies sampled from prompts the budget cut (a prompt must fit in max_length -
    max_new_tokens) in episodes that still fit in max_length whole: every agent token of
    every episode that kept its whole context has the log-prob a fresh trainer forward gives,
    the cut ones are marked and left out, and `sampled_logp_gap` compares the others."""
    from coevo.render import render

    model, tokenizer = quick_to_stop(nano_model_dir)
    settings = config(samples=4, sampling={"temperature": 0.9}, kl_coef=0.0, micro_batch_size=4)
    play = hf_player(nano_model_dir, ChattyEnv, settings, max_length=110)
    played = play(model, ChattyEnv().tasks("train"), step=1, seed=0)
    episodes = [episode(t, tokenizer, a, 110) for t, a in zip(played, [1.0, -1.0] * 8, strict=True)]
    full = [e for e in episodes if e.full_context]
    assert len(full) >= 8 and len({len(e.input_ids) for e in full}) >= 6
    assert {t.steps for t, e in zip(played, episodes, strict=True) if e.full_context} >= {2, 3, 4}
    cut_in_a_prompt = [
        t.metadata["prompts_cut_by_max_length"] > 0
        and not render(t, tokenizer, max_length=110).dropped_turns
        for t in played
    ]
    assert any(cut_in_a_prompt)  # what set the gaps of the real runs: now marked as cut
    assert not any(e.full_context for e, cut in zip(episodes, cut_in_a_prompt, strict=True) if cut)

    batch = collate(episodes, torch.device("cpu"))  # right-padded, as the trainer reads it
    mask = batch["action_mask"][:, 1:].bool()
    with torch.no_grad():
        fresh, _ = AgentLogps(model)(
            batch["input_ids"], batch["attention_mask"], batch["action_mask"], per_token=True
        )
    sampled = batch["old_logps"][:, 1:]
    same = mask & batch["full_context"][:, None]
    torch.testing.assert_close(fresh[same], sampled[same], rtol=0, atol=1e-5)
    assert (fresh - sampled).abs()[mask & ~same].max() > 0.1  # sampled in another context
    # With several minibatches the old log-probs enter the ratio: the cut episodes' come from
    # this context's forward, the others stay as sampled.
    rescored = collate(
        grpo_module.rescored(AgentLogps(model), episodes, torch.device("cpu"), 3),
        torch.device("cpu"),
    )["old_logps"][:, 1:]
    torch.testing.assert_close(rescored[mask & ~same], fresh[mask & ~same], rtol=0, atol=1e-5)
    assert torch.equal(rescored[same], sampled[same])
    assert torch.equal(rescored[~mask], torch.zeros_like(rescored[~mask]))

    def gap(episodes: list) -> float:
        net = AgentLogps(model)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.0)  # the model stays as it is
        accelerator = make_accelerator(Compute(), device=EXACT)  # the test's model is on the CPU
        stats = grpo_module.update(
            net, None, episodes, settings, accelerator, optimizer, seed=0, step=1
        )
        return stats["sampled_logp_gap"]

    assert gap(episodes) < 1e-5
    # It measures: one stored log-prob off by 0.5 in an episode that kept its context shows.
    k = episodes.index(full[0])
    at = full[0].action_mask.index(1, 1)
    off = [*full[0].old_logps]
    off[at] += 0.5
    changed = [*episodes]
    changed[k] = dataclasses.replace(full[0], old_logps=off)
    assert gap(changed) == pytest.approx(0.5, abs=1e-5)


def test_a_step_changes_every_parameter_and_generation_plays_the_updated_weights(
    nano_model_dir, tmp_path
):
    from transformers import AutoModelForCausalLM

    before = AutoModelForCausalLM.from_pretrained(nano_model_dir).state_dict()
    # The CPU in float32: the sampled log-probs are compared with the trainer's to 1e-5.
    result = grpo(nano_model_dir, tmp_path / "grpo", config(steps=3), device=EXACT)
    after = cpu_state(result.model)
    assert [k for k, v in before.items() if torch.equal(v, after[k])] == []
    assert [r["step"] for r in result.history] == [1, 2, 3]
    for record in result.history:
        # Steps 2 and 3 sample from the weights the step before trained, in memory: had they
        # played the old weights, their log-probs would be far from the trainer's forward.
        assert record["sampled_logp_gap"] < 1e-5
        assert record["context_cut"] == 0  # single-turn episodes: nothing to cut
        assert record["kl"] >= 0 and record["entropy"] > 0  # kl_coef 0.001: a reference
        assert record["episodes"] == 32 and 0 <= record["no_signal"] <= 1
        for key in ("reward_mean", "reward_std", "success_rate", "clip_fraction", "rollout_s"):
            assert key in record
    assert result.history[0]["kl"] == 0  # the first step plays the reference itself
    assert result.history[-1]["kl"] > 0
    assert (tmp_path / "grpo" / "model" / "config.json").is_file()


def test_the_first_minibatch_is_on_policy_and_later_ones_are_clipped(
    nano_model_dir, tmp_path, monkeypatch
):
    ratios: list[tuple[torch.Tensor, torch.Tensor]] = []

    def spy(*args: Any, **kw: Any):
        out = grpo_loss(*args, **kw)
        ratios.append((out.ratio[out.mask], out.clipped[out.mask]))
        return out

    monkeypatch.setattr(grpo_module, "grpo_loss", spy)
    # 32 episodes: 2 minibatches of 16, one micro-batch each; a large rate moves the policy.
    settings = config(steps=1, minibatches=2, kl_coef=0.0, optim={"lr": 3e-2})
    result = grpo(nano_model_dir, tmp_path / "grpo", settings)
    (first, first_clipped), (second, second_clipped) = ratios
    assert torch.equal(first, torch.ones_like(first)) and not first_clipped.any()
    assert (second - 1).abs().max() > 0.1 and second_clipped.any()
    assert result.history[0]["optimizer_steps"] == 2
    assert 0 < result.history[0]["clip_fraction"] < 1


def test_a_killed_run_resumes_to_the_result_of_one_that_never_stopped(
    nano_model_dir, tmp_path, monkeypatch
):
    settings = config(steps=4, minibatches=2, checkpoints={"save_every": 2})
    straight = grpo(nano_model_dir, tmp_path / "a", settings, device=EXACT)
    with monkeypatch.context() as patch:
        kill_at(patch, 3)  # dies after step 3, its checkpoint (due at 4) not written
        with pytest.raises(Killed):
            grpo(nano_model_dir, tmp_path / "b", settings, device=EXACT)
    resumed = grpo(nano_model_dir, tmp_path / "b", settings, device=EXACT)
    assert resumed.step == 4 and same_weights(resumed.model, straight.model)

    def numbers(history: list[dict]) -> list[dict]:
        timing = ("rollout_s", "update_s", "tokens_per_s", "rollout_tokens_per_s")
        return [{k: v for k, v in r.items() if k not in (*timing, "update_tokens_per_s")}
                for r in history]  # fmt: skip

    assert numbers(resumed.history) == numbers(straight.history)


def test_lora_trains_only_the_adapters_against_the_base_model(nano_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(nano_model_dir)
    settings = config(steps=2, lora={"r": 4, "target_modules": ["q_proj", "v_proj"]})
    result = grpo(nano_model_dir, tmp_path / "grpo", settings, model=model)
    assert result.history[1]["kl"] > 0  # the reference: the base model, adapters off
    before = AutoModelForCausalLM.from_pretrained(nano_model_dir).state_dict()
    after = cpu_state(result.model)  # merged at the end
    changed = {k for k, v in before.items() if not torch.equal(v, after[k])}
    assert changed and all("q_proj" in k or "v_proj" in k for k in changed)


def test_grpo_raises_the_toy_reward_within_a_few_steps(nano_model_dir, tmp_path):
    result = grpo(nano_model_dir, tmp_path / "grpo", config(steps=8, kl_coef=0.0))
    rewards = [r["reward_mean"] for r in result.history]
    # Measured: 0.22 0.17 0.20 0.26 0.31 0.42 0.51 0.64 (lr 3e-3, 32 episodes a step).
    assert sum(rewards[-2:]) / 2 > sum(rewards[:2]) / 2 + 0.15, rewards


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"samples": 1}, "samples must be >= 2"),
        ({"sampling": {"temperature": 0.0}}, "temperature must be > 0"),
        ({"kl_coef": -1.0}, "kl_coef must be >= 0"),
        ({"tasks_per_step": 9}, "GRPO got 8 train tasks for tasks_per_step=9"),
    ],
)
def test_bad_settings_get_one_clear_sentence(nano_model_dir, tmp_path, change, message):
    with pytest.raises(ValueError, match=message):
        grpo(nano_model_dir, tmp_path / "grpo", config(**change))


def test_episodes_without_their_sampled_ids_are_refused(nano_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(nano_model_dir)
    t = Task("x", "letters", "train", "Write.")
    played = Trajectory(t, "target", (Turn("user", "Write."), Turn("assistant", "aaa")), 0.5,
                        True, False, 1)  # fmt: skip
    with pytest.raises(ValueError, match="without the token ids and log-probs"):
        episode(played, tokenizer, 1.0, None)


def test_an_episode_cut_by_the_context_budget_is_marked_and_left_out_of_the_gap(nano_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(nano_model_dir)
    t = Task("x", "letters", "train", "Write.")

    def reply(text: str) -> Turn:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        return Turn("assistant", text, token_ids=ids, logprobs=[-1.0] * len(ids))

    turns = [Turn("user", "Write.")]
    for k in range(6):
        turns += [reply(f"Action: write a long answer number {k}"), Turn("user", f"Seen {k}.")]
    played = Trajectory(t, "target", tuple(turns[:-1]), 0.5, True, False, 6)
    whole = episode(played, tokenizer, 1.0, None)
    cut = episode(played, tokenizer, 1.0, len(whole.input_ids) - 1)
    assert whole.full_context and not cut.full_context
    assert len(cut.input_ids) < len(whole.input_ids)
    batch = collate([whole, cut], torch.device("cpu"))
    assert batch["full_context"].tolist() == [True, False]


def test_old_log_probs_come_from_the_trainer_when_sampling_was_too_far_from_it(
    nano_model_dir, monkeypatch
):
    """Sampling in bf16 puts the sampled log-probs about 0.1 from the trainer's float32 ones
    (tests/test_gpu.py measures it): over `max_logp_gap` a step's later minibatches take their
    old log-probs from a trainer forward; under it, the sampled ones."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(nano_model_dir, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(nano_model_dir)
    played = hf_player(nano_model_dir, LetterEnv, config(samples=2), max_length=256)(
        model.eval(), LetterEnv().tasks("train")[:4], step=1, seed=0
    )
    # As if sampled in another precision: every agent token 0.2 off the trainer's.
    episodes = [episode(t, tokenizer, a, 256) for t, a in zip(played, [1.0, -1.0] * 4, strict=True)]
    off = [dataclasses.replace(e, old_logps=[v - 0.2 * m for v, m in
           zip(e.old_logps, e.action_mask, strict=True)]) for e in episodes]  # fmt: skip
    olds: list[torch.Tensor] = []

    def spy(logps, old, *args: Any, **kw: Any):
        olds.append((old - logps.detach()).abs().max())
        return grpo_loss(logps, old, *args, **kw)

    monkeypatch.setattr(grpo_module, "grpo_loss", spy)

    def step(bound: float) -> dict[str, float]:
        olds.clear()
        net = AgentLogps(model)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.0)  # the model stays as it is
        settings = config(samples=2, minibatches=2, micro_batch_size=8, max_logp_gap=bound)
        accelerator = make_accelerator(Compute(), device=EXACT)
        return grpo_module.update(net, None, off, settings, accelerator, optimizer, seed=0, step=1)

    loose = step(1.0)
    assert loose["old_logps_from_trainer"] == 0 and loose["sampled_logp_gap"] > 0.19
    assert olds[-1] > 0.19  # the second minibatch's old log-probs: the sampled ones
    tight = step(0.1)
    assert tight["old_logps_from_trainer"] == 1
    assert tight["sampled_logp_gap"] > 0.19  # measured before the sampled ones were replaced
    assert olds[-1] < 1e-5  # the trainer's own (lr 0: nothing moved)
    with pytest.raises(ValueError, match="max_logp_gap must be >= 0"):
        config(max_logp_gap=-1.0).validate()


class FlatEnv(LetterEnv):
    """Every reply scores 0.5: no group carries any signal."""

    def step(self, action: str) -> StepResult:
        return StepResult("Done.", 0.5, True, False, {})


def test_a_step_without_any_signal_skips_its_update_and_says_so(nano_model_dir, tmp_path, capsys):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(nano_model_dir)
    settings = config(steps=2)
    play = hf_player(nano_model_dir, FlatEnv, settings, max_length=256)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = train_grpo(str(nano_model_dir), FlatEnv().tasks("train"), play, settings,
                            output_dir=tmp_path, tokenizer=tokenizer, device=EXACT)  # fmt: skip
    assert [r["update_skipped"] for r in result.history] == [1.0, 1.0]
    # The schedule advanced on purpose: torch's warning of a misordered call is not shown.
    assert not [w for w in caught if "lr_scheduler.step()" in str(w.message)]
    assert [r["lr"] for r in result.history] == pytest.approx([settings.optim.lr] * 2)
    assert [r["no_signal"] for r in result.history] == [1.0, 1.0]
    assert "grpo step 1: every task's 8 episodes scored alike (no signal): update skipped" in (
        capsys.readouterr().err
    )
    before = AutoModelForCausalLM.from_pretrained(nano_model_dir).state_dict()
    assert all(torch.equal(v, before[k]) for k, v in cpu_state(result.model).items())
