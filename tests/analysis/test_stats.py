from __future__ import annotations

import pytest
import torch

from coevo.analysis.stats import (
    GAIN,
    LOSS,
    NOT_SHOWN,
    TASKS_DOWN,
    TASKS_UP,
    counts,
    detectable,
    fisher_exact,
    holm,
    pooled_sd,
    seed_interval,
    sign_flip_test,
    signed_sums,
    split_test,
    t_quantile_80,
    t_quantile_975,
    verdict,
)


def t(*values):
    return torch.tensor(values, dtype=torch.float64)


def test_counts_up_down_and_unchanged():
    assert counts(t(0.5, -0.25, 0.0, 0.0, 1e-12)) == (1, 1, 3)  # 1e-12: float noise, a tie


def test_signed_sums_are_every_sign_pattern():
    # [0] -> with +-1: [1, -1] -> with +-2: [1+2, -1+2, 1-2, -1-2].
    assert signed_sums(t(1, 2)).tolist() == [3, 1, -1, -3]


def test_tasks_all_up_by_the_same_amount():
    # Four tasks up, none down: of the 16 sign patterns only all-plus and all-minus reach
    # |sum| = 4, so p = 2/16, however sure a bootstrap interval over them looks.
    four = sign_flip_test(t(0.2, 0.2, 0.2, 0.2))
    assert (four.p, four.exact, four.nonzero) == (0.125, True, 4)
    # Five up: 2/32. Unchanged tasks flip to themselves and drop out.
    assert sign_flip_test(t(0.2, 0.2, 0.2, 0.2, 0.2)).p == 0.0625
    five_and_ties = sign_flip_test(t(0.2, 0.2, 0.2, 0.2, 0.2, 0, 0, 0))
    assert (five_and_ties.p, five_and_ties.nonzero) == (0.0625, 5)
    # Six up, none down: 2/64, the fewest changed tasks that can reject at 5% (five cannot).
    assert sign_flip_test(t(*[0.5] * 6)).p == 0.03125


def test_unequal_magnitudes_counted_by_hand():
    # [+3, +1, -1], observed sum 3. The 8 patterns (signs of 3, 1, 1):
    #   +++ 5, ++- 3, +-+ 3, +-- 1, -++ -1, -+- -3, --+ -3, --- -5
    # |sum| >= 3 in 6 of them: p = 6/8.
    assert sign_flip_test(t(3, 1, -1)).p == 0.75
    # [+4, +2, +1]: only +++ (7) and --- (-7) reach |sum| 7: p = 2/8.
    assert sign_flip_test(t(4, 2, 1)).p == 0.25
    # [+3, +2, +1, -1], observed 5. A pattern's sum is 7 - 2F, F the magnitudes it makes
    # negative (of 3, 2, 1, 1): sum >= 5 when F <= 1 (none, or either 1: 3 patterns);
    # sum <= -5 when F >= 6 (the mirror images: 3). p = 6/16.
    assert sign_flip_test(t(3, 2, 1, -1)).p == 0.375
    # Direction does not matter: the test is two-sided.
    assert sign_flip_test(t(-3, -2, -1, 1)).p == 0.375


def test_no_difference_at_all_gives_p_one():
    assert sign_flip_test(t(0, 0, 0)).p == 1.0
    assert sign_flip_test(t(0.5)).p == 1.0  # one task: +0.5 and -0.5 are both as extreme


def test_many_differences_are_estimated_with_a_fixed_seed():
    diffs = t(0.2, 0.2, 0.2, 0.2, 0.2)
    mc = sign_flip_test(diffs, exact_up_to=4, draws=100_000)
    assert not mc.exact
    # Exact 0.0625; 100k draws: standard error sqrt(0.0625 * 0.9375 / 1e5) = 0.00077.
    assert mc.p == pytest.approx(0.0625, abs=0.004)
    assert sign_flip_test(diffs, exact_up_to=4, draws=100_000).p == mc.p  # same seed, same p
    # 30 tasks up: exact p 2 / 2^30; the estimate is floored at 1 / (1 + draws), never 0.
    assert sign_flip_test(t(*[1.0] * 30), draws=1000).p == 1 / 1001


def test_t_quantiles():
    assert t_quantile_975(2) == 4.3027
    assert t_quantile_975(30) == 2.0423
    assert t_quantile_975(60) == pytest.approx(2.000298, abs=1e-5)  # scipy.stats.t.ppf
    assert t_quantile_975(10_000) == pytest.approx(1.96020, abs=1e-4)
    with pytest.raises(ValueError, match="df >= 1"):
        t_quantile_975(0)


def test_seed_interval():
    # Seeds 0.01, 0.03, 0.05: mean 0.03, sd 0.02, half width 4.3027 * 0.02 / sqrt(3) = 0.04968.
    low, high = seed_interval([0.01, 0.03, 0.05])
    assert (low, high) == pytest.approx((-0.019683, 0.079683), abs=1e-6)
    # The issue's shop failure-agent minus SFT on test_seen, seeds 0-2: +1.2, -11.1, +1.2.
    # Mean -0.029, sd 0.07101, half width 4.3027 * 0.07101 / sqrt(3) = 0.17641.
    assert seed_interval([0.012, -0.111, 0.012]) == pytest.approx((-0.20541, 0.14741), abs=1e-5)
    assert seed_interval([0.2, 0.3]) is None  # two seeds: no seed-level interval


def test_a_gain_needs_both_levels():
    assert verdict(4.0, 0.01, (0.01, 0.05)) == GAIN
    assert verdict(-4.0, 0.01, (-0.05, -0.01)) == LOSS
    assert verdict(4.0, 0.01, (-0.01, 0.05)) == NOT_SHOWN  # seeds disagree
    assert verdict(4.0, 0.01, (-0.05, -0.01)) == NOT_SHOWN  # seeds point the other way
    assert verdict(4.0, 0.125, (0.01, 0.05)) == NOT_SHOWN  # tasks do not reject
    assert verdict(4.0, 0.01, None) == TASKS_UP  # too few seeds to say more
    assert verdict(-4.0, 0.01, None) == TASKS_DOWN
    assert verdict(0.0, 1.0, None) == NOT_SHOWN


def test_t_quantiles_for_power():
    assert t_quantile_80(2) == 1.0607
    assert t_quantile_80(30) == 0.8538
    assert t_quantile_80(60) == pytest.approx(0.847653, abs=1e-5)  # mpmath's t inverse
    assert t_quantile_80(10_000) == pytest.approx(0.841657, abs=1e-5)


def test_detectable_reproduces_the_issue_s_power_figures():
    # Shop: per-task paired spread 26 points, seed spread 4. At 50 tasks x 3 seeds the standard
    # error is sqrt(26^2 / 150 + 4^2 / 3) = sqrt(4.5067 + 5.3333) = 3.1369, times
    # 1.9600 + 0.8416 = 2.8016: 8.79, "about 9 points".
    assert detectable(26, 4, 50, 3) == pytest.approx(8.7882, abs=1e-4)
    # The paper's 6-point margin: 8 seeds x 33 tasks, sqrt(676 / 264 + 16 / 8) = 2.1356 -> 5.98;
    # 10 x 23, sqrt(676 / 230 + 1.6) = 2.1305 -> 5.97. A 3-point one: 20 x 100,
    # sqrt(0.338 + 0.8) = 1.0668 -> 2.99.
    assert detectable(26, 4, 33, 8) == pytest.approx(5.9829, abs=1e-4)
    assert detectable(26, 4, 23, 10) == pytest.approx(5.9688, abs=1e-4)
    assert detectable(26, 4, 100, 20) == pytest.approx(2.9886, abs=1e-4)
    # The verdict's own seed-level test at 3 seeds, t with df 2: (4.3027 + 1.0607) * 3.1369.
    assert detectable(26, 4, 50, 3, df=2) == pytest.approx(16.8243, abs=1e-4)
    # No seed spread: the task term alone, 2.8016 * 26 / sqrt(150) = 2.8016 * 2.1229 = 5.9475.
    assert detectable(26, 0, 50, 3) == pytest.approx(5.9475, abs=1e-4)
    with pytest.raises(ValueError, match="seeds >= 1"):
        detectable(26, 4, 50, 0)


def test_pooled_sd_is_the_spread_about_each_group_s_own_mean():
    # [1, 3]: squares 1 + 1; [2, 4, 6]: 4 + 0 + 4; [5] adds none. sqrt(10 / (1 + 2)) = 1.8257.
    assert pooled_sd([t(1, 3), t(2, 4, 6), t(5)]) == pytest.approx(1.825742, abs=1e-6)
    assert pooled_sd([t(5)]) == 0.0


def test_split_test_shuffles_tasks_between_the_sets_within_each_seed():
    # [1, 2] against [3, 4]: of the 6 ways to pick the first set's two values only {1, 2} and
    # {3, 4} give |mean difference| 2: p = 2/6.
    assert split_test([t(1, 2)], [t(3, 4)], draws=100_000) == pytest.approx(1 / 3, abs=0.005)
    # Two seeds, the second shifted by 10. Within each seed the 6 relabellings give mean
    # differences -2, -1, 0, 0, 1, 2; the statistic is their mean over the seeds, which
    # reaches |2| only when both seeds give -2 or both +2: p = 2/36. Pooling the seeds would
    # mix the shift into the test.
    first, second = [t(1, 2), t(11, 12)], [t(3, 4), t(13, 14)]
    assert split_test(first, second, draws=100_000) == pytest.approx(1 / 18, abs=0.003)
    assert split_test(first, second) == split_test(first, second)  # a fixed seed


def test_fisher_exact_by_hand():
    # 3 of 4 against 0 of 4: the tables with 3 successes in all have chances 4, 24, 24, 4 (of
    # 56) for 0..3 in the first group; the two of chance 4 are as unlikely as the observed one.
    assert fisher_exact(3, 4, 0, 4) == pytest.approx(8 / 56)
    assert fisher_exact(0, 4, 3, 4) == pytest.approx(8 / 56)
    # 5 of 5 against 0 of 5: 1 / C(10, 5) each way.
    assert fisher_exact(5, 5, 0, 5) == pytest.approx(2 / 252)
    assert fisher_exact(2, 4, 2, 4) == pytest.approx(1.0)
    assert fisher_exact(0, 3, 0, 5) == 1.0
    with pytest.raises(ValueError, match="out of range"):
        fisher_exact(5, 4, 0, 4)


def test_holm_adjusts_a_family_step_down():
    # Sorted: 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 = 0.04 -> kept at
    # 0.06 (never below the one before): back in the given order.
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.6]) == [1.0, 1.0]  # at most 1
    assert holm([0.2]) == [0.2]  # a family of one: as it was
    assert holm([]) == []
