"""HFPolicy: batched generation, stop strings, seeds, log-probs, adapters and clear errors."""

from __future__ import annotations

import shutil
import warnings

import pytest
import torch

from coevo.policy.base import Policy, PolicyError, Sampling
from coevo.policy.cache import cache_keyword
from coevo.policy.hf import HFPolicy
from coevo.render import render_prompt
from coevo.trajectory import Turn
from tests.toy_env import ToyEnv


@pytest.fixture(scope="module")
def agent(toy_agent_dir) -> HFPolicy:
    return HFPolicy(toy_agent_dir, dtype="float64")


@pytest.fixture(scope="module")
def prompts(agent) -> list[list[int]]:
    env = ToyEnv()
    out = []
    for task in env.tasks("train")[:4]:
        observation, _ = env.reset(task)
        opening = f"{env.instruction_prompt}\n\n{observation}"
        out.append(render_prompt([Turn("user", opening)], agent.tokenizer))
    return out


def test_policy_contract(agent):
    assert isinstance(agent, Policy)
    assert agent.max_context > 0


def test_trained_agent_ends_its_turn(agent, prompts):
    out = agent.generate(prompts, Sampling(max_new_tokens=40))
    for completion in out:
        assert completion.finish_reason == "stop"
        assert completion.text == "Thought: I check the word.\nAction: look"


def test_stop_string_cuts_the_text_before_it(agent, prompts):
    out = agent.generate(prompts, Sampling(max_new_tokens=40, stop=("\nAction:",)))
    for completion in out:
        assert completion.finish_reason == "stop"
        assert completion.text == "Thought: I check the word."


def test_max_new_tokens_ends_with_length(agent, prompts):
    (completion,) = agent.generate(prompts[:1], Sampling(max_new_tokens=3, logprobs=True))
    assert completion.finish_reason == "length"
    assert len(completion.token_ids) == 3


def test_the_cache_goes_under_the_name_the_model_takes(agent, prompts):
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # a deprecated keyword (to be removed)
        agent.generate(prompts[:2], Sampling(max_new_tokens=4))

    class Older(torch.nn.Module):
        def forward(self, input_ids, past_key_values=None, use_cache=False): ...

    class Newer(torch.nn.Module):
        def forward(self, input_ids, cache=None, use_cache=False): ...

    assert cache_keyword(Older()) == "past_key_values"
    assert cache_keyword(Newer()) == "cache"


def test_batched_greedy_equals_one_at_a_time(nano_model_dir):
    policy = HFPolicy(nano_model_dir, dtype="float64")  # random init: long, varied replies
    turns = [[Turn("user", f"Type {w}. " * (i + 1))] for i, w in enumerate(["fig", "apple", "x"])]
    batch = [render_prompt(t, policy.tokenizer) for t in turns]
    sampling = Sampling(max_new_tokens=24, logprobs=True, stop=())
    together = policy.generate(batch, sampling)
    alone = [policy.generate([p], sampling)[0] for p in batch]
    assert [c.token_ids for c in together] == [c.token_ids for c in alone]
    for a, b in zip(together, alone, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-9)


def test_logprobs_match_a_forward_pass(nano_model_dir):
    policy = HFPolicy(nano_model_dir, dtype="float32")
    prompt = render_prompt([Turn("user", "Type apple.")], policy.tokenizer)
    for sampling in (
        Sampling(max_new_tokens=16, logprobs=True, stop=()),
        Sampling(temperature=0.7, top_p=0.9, max_new_tokens=16, logprobs=True, stop=(), seed=3),
    ):
        (completion,) = policy.generate([prompt, prompt[2:]], sampling)[:1]
        ids = torch.tensor([prompt + list(completion.token_ids)], device=policy.device)
        with torch.no_grad():
            logps = torch.log_softmax(policy.model(ids).logits[0].float(), dim=-1)  # (seq, vocab)
        start = len(prompt) - 1
        expected = [logps[start + i, t].item() for i, t in enumerate(completion.token_ids)]
        assert list(completion.logprobs) == pytest.approx(expected, abs=1e-4)


def test_seeds_make_rows_independent_of_their_batch(nano_model_dir):
    policy = HFPolicy(nano_model_dir)
    prompts = [render_prompt([Turn("user", f"Type {w}.")], policy.tokenizer) for w in "abc"]
    sampling = Sampling(temperature=1.0, max_new_tokens=12, stop=(), logprobs=True)
    first = policy.generate(prompts, sampling, seeds=[1, 2, 3])
    reversed_batch = policy.generate(prompts[::-1], sampling, seeds=[3, 2, 1])
    assert [c.token_ids for c in first] == [c.token_ids for c in reversed_batch[::-1]]
    other = policy.generate(prompts, sampling, seeds=[4, 5, 6])
    assert [c.token_ids for c in other] != [c.token_ids for c in first]
    seeded = Sampling(temperature=1.0, max_new_tokens=12, stop=(), logprobs=True, seed=7)
    assert [c.token_ids for c in policy.generate(prompts, seeded)] == [
        c.token_ids for c in policy.generate(prompts, seeded)
    ]


def test_lora_adapter_loads_and_changes_the_model(nano_model_dir, tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(nano_model_dir)
    config = LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    get_peft_model(base, config).save_pretrained(tmp_path / "adapter")
    # float32: merged and unmerged log-probs are compared to 1e-4 (bf16 rounds at 1e-2).
    plain = HFPolicy(nano_model_dir, dtype="float32")
    tuned = HFPolicy(nano_model_dir, adapter=tmp_path / "adapter", dtype="float32")
    unmerged = HFPolicy(
        nano_model_dir, adapter=tmp_path / "adapter", merge_adapter=False, dtype="float32"
    )
    prompt = [render_prompt([Turn("user", "Type fig.")], plain.tokenizer)]
    sampling = Sampling(max_new_tokens=8, logprobs=True, stop=())
    a, b, c = (p.generate(prompt, sampling)[0] for p in (plain, tuned, unmerged))
    assert a.logprobs != pytest.approx(b.logprobs, abs=1e-3)
    assert b.token_ids == c.token_ids
    assert b.logprobs == pytest.approx(c.logprobs, abs=1e-4)
    assert cache_keyword(unmerged.model) == cache_keyword(plain.model)  # through the wrapper


def test_path_without_a_model_names_the_fix(tmp_path):
    with pytest.raises(PolicyError, match="holds no model.*coevo model init"):
        HFPolicy(tmp_path)


def test_bad_adapter_dir_names_the_fix(nano_model_dir, tmp_path):
    with pytest.raises(PolicyError, match="holds no LoRA adapter"):
        HFPolicy(nano_model_dir, adapter=tmp_path)


def test_tokenizer_without_chat_template_names_the_fix(nano_model_dir, tmp_path):
    from transformers import AutoTokenizer

    target = tmp_path / "no_template"
    shutil.copytree(nano_model_dir, target)
    for leftover in target.glob("chat_template*"):
        leftover.unlink()
    tokenizer = AutoTokenizer.from_pretrained(target)
    tokenizer.chat_template = None
    tokenizer.save_pretrained(target)
    with pytest.raises(PolicyError, match="has no chat template"):
        HFPolicy(target)


def test_sampling_rejects_bad_settings():
    with pytest.raises(ValueError, match="temperature"):
        Sampling(temperature=-1)
    with pytest.raises(ValueError, match="top_p"):
        Sampling(top_p=0)
