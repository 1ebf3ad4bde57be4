"""Token choice: inverse-CDF sampling follows the distribution and never picks a dropped token."""

from __future__ import annotations

import pytest
import torch

from coevo.policy.base import Sampling
from coevo.policy.sample import choose, draws, filtered_probs, inverse_cdf

CPU = torch.device("cpu")


def test_inverse_cdf_picks_the_bucket_each_draw_falls_in():
    probs = torch.tensor([[0.5, 0.0, 0.25, 0.25]] * 5)
    u = torch.tensor([0.0, 0.49, 0.5, 0.74, 0.999999])
    assert inverse_cdf(probs, u).tolist() == [0, 0, 2, 2, 3]


def test_inverse_cdf_never_picks_a_zero_probability_token_at_the_edges():
    probs = torch.tensor([[0.0, 0.3, 0.7, 0.0, 0.0]] * 3)
    u = torch.tensor([0.0, 1.0 - 2**-24, 1.0])  # 1.0 itself: the cap keeps it in range
    assert inverse_cdf(probs, u).tolist() == [1, 2, 2]


def test_sampling_frequencies_follow_the_distribution():
    logits = torch.log(torch.tensor([0.1, 0.2, 0.3, 0.4]))
    rows = 40_000
    u = torch.rand(rows, generator=torch.Generator().manual_seed(0))
    chosen, logp = choose(logits.expand(rows, 4), Sampling(temperature=1.0), u)
    freq = torch.bincount(chosen, minlength=4).double() / rows
    assert freq.tolist() == pytest.approx([0.1, 0.2, 0.3, 0.4], abs=0.01)
    assert logp.tolist() == pytest.approx(logits[chosen].tolist(), abs=1e-6)


def test_top_p_keeps_the_smallest_set_reaching_p():
    logits = torch.log(torch.tensor([[0.05, 0.5, 0.3, 0.15]]))
    probs = filtered_probs(logits, Sampling(temperature=1.0, top_p=0.75))
    assert (probs[0] > 0).tolist() == [False, True, True, False]
    u = torch.rand(2_000, generator=torch.Generator().manual_seed(1))
    chosen, _ = choose(logits.expand(2_000, 4), Sampling(temperature=1.0, top_p=0.75), u)
    assert set(chosen.tolist()) == {1, 2}


def test_each_row_draws_all_its_steps_from_its_own_generator():
    first = draws([torch.Generator().manual_seed(s) for s in (5, 6)], 20, CPU)
    again = draws([torch.Generator().manual_seed(s) for s in (6, 5)], 20, CPU)
    assert first.shape == (2, 20)
    assert first.tolist() == again.flip(0).tolist()
    alone = torch.rand(20, generator=torch.Generator().manual_seed(5))
    assert first[0].tolist() == alone.tolist()  # a row's numbers: its seed's, in one call


def test_a_shared_generator_fills_each_step_before_the_next():
    shared = torch.Generator().manual_seed(3)
    got = draws([shared] * 4, 5, CPU)
    expected = torch.rand(20, generator=torch.Generator().manual_seed(3)).view(5, 4).T
    assert got.tolist() == expected.tolist()


def test_greedy_draws_nothing_and_chooses_the_argmax():
    assert draws([None, None], 8, CPU) is None
    logits = torch.tensor([[0.1, 2.0, 0.3], [5.0, 0.0, 0.0]])
    chosen, logp = choose(logits, Sampling(temperature=1.0), None)
    assert chosen.tolist() == [1, 0]
    assert logp.tolist() == pytest.approx(torch.log_softmax(logits, -1).max(-1).values.tolist())
