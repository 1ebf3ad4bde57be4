"""Padding, the concatenated DPO batch, length buckets, and building examples with the renderer."""

from __future__ import annotations

import pytest
import torch

from coevo.train.batches import (
    DpoExample,
    LengthBatches,
    Tokens,
    check_seq,
    collate_dpo,
    collate_packed,
    dpo_examples,
    lm_examples,
    sft_examples,
)


def test_dpo_batch_is_chosen_rows_then_rejected_rows_padded_to_the_batch_max():
    a = DpoExample(Tokens((1, 2, 3), (0, 1, 1)), Tokens((4, 5), (0, 1)), 0.5, 0.1, -1.0, -2.0)
    b = DpoExample(Tokens((6, 7), (0, 1)), Tokens((8, 9, 10, 11), (0, 0, 1, 1)))
    batch = collate_dpo([a, b])
    assert batch["input_ids"].tolist() == [[1, 2, 3, 0], [6, 7, 0, 0], [4, 5, 0, 0], [8, 9, 10, 11]]
    assert batch["attention_mask"].tolist() == [
        [1, 1, 1, 0],
        [1, 1, 0, 0],
        [1, 1, 0, 0],
        [1, 1, 1, 1],
    ]
    assert batch["action_mask"].tolist() == [[0, 1, 1, 0], [0, 1, 0, 0], [0, 1, 0, 0], [0, 0, 1, 1]]
    assert batch["weight"].tolist() == [0.5, 1.0]
    assert batch["sft_weight"].tolist() == pytest.approx([0.1, 0.0])
    assert batch["ref_chosen"][0].item() == -1.0 and torch.isnan(batch["ref_chosen"][1])


def test_packed_batch_is_one_row_with_positions_restarting_and_no_first_token_learned():
    # The second sequence's first token is the agent's, but nothing of its own predicts it:
    # in one row the token before it is the first sequence's last.
    batch = collate_packed([Tokens((1, 2, 3), (0, 1, 1)), Tokens((4, 5), (1, 1))])
    assert batch["input_ids"].tolist() == [[1, 2, 3, 4, 5]]
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 1]]
    assert batch["action_mask"].tolist() == [[0, 1, 1, 0, 1]]
    assert batch["lengths"].tolist() == [3, 2]


def test_length_batches_cover_everything_once_group_lengths_and_are_reproducible():
    lengths = [(i * 37) % 101 for i in range(200)]
    sampler = LengthBatches(lengths, 8, seed=3)
    batches = sampler.batches(0)
    assert sorted(i for b in batches for i in b) == list(range(200))
    assert batches == LengthBatches(lengths, 8, seed=3).batches(0)
    assert batches != sampler.batches(1)  # each epoch mixes differently
    # Bucketing: padding waste (pad tokens / all tokens) is far below a random grouping's.
    padded = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    assert sum(lengths) / padded > 0.9
    sampler.epoch, sampler.skip = 1, 5
    assert list(sampler) == sampler.batches(1)[5:] and len(sampler) == 25 - 5


def test_sequences_without_agent_tokens_are_an_error_not_a_skip():
    with pytest.raises(ValueError, match="no agent tokens"):
        check_seq(Tokens((1, 2, 3), (1, 0, 0)), "example 7")  # token 0 is never predicted
    with pytest.raises(ValueError, match="differ in length"):
        check_seq(Tokens((1, 2, 3), (0, 1)), "example 8")


def test_builders_render_trajectories_and_pairs(nano_model_dir):
    from transformers import AutoTokenizer

    from coevo.envs.conversation import expert_trajectory, replay
    from coevo.envs.react import format_reply
    from coevo.render import render
    from coevo.trajectory import Pair
    from tests.toy_env import ToyEnv

    tok = AutoTokenizer.from_pretrained(nano_model_dir)
    env = ToyEnv()
    task = env.tasks("train")[0]
    expert = expert_trajectory(env, task)
    wrong = replay(env, task, [format_reply("Guess.", "type[avocado]")], agent="target")
    [seq] = sft_examples([expert], tok)
    assert list(seq.input_ids) == render(expert, tok).input_ids
    [ex] = dpo_examples([Pair(expert, wrong, "expert_vs_target", 0.5, 0.1)], tok)
    assert (ex.weight, ex.sft_weight) == (0.5, 0.1)
    assert list(ex.rejected.action_mask) == render(wrong, tok).action_mask


def test_lm_examples_learn_every_token_observations_included(nano_model_dir):
    from transformers import AutoTokenizer

    from coevo.envs.conversation import expert_trajectory
    from tests.toy_env import ToyEnv

    tok = AutoTokenizer.from_pretrained(nano_model_dir)
    env = ToyEnv()
    expert = expert_trajectory(env, env.tasks("train")[0])
    [agent_only] = sft_examples([expert], tok)
    [whole] = lm_examples([expert], tok)
    assert whole.input_ids == tuple(agent_only.input_ids)
    assert set(whole.action_mask) == {1}
    assert 0 in agent_only.action_mask  # so the SFT mask really leaves tokens out
