"""InterCode's reward, with the expected numbers worked out by hand in each test."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from coevo.envs.sql.reward import GoldRows, kendall_tau_b, round_cents, score


def rows(*values) -> list[tuple]:
    return [(v,) for v in values]


def test_identical_results_score_one():
    gold = GoldRows.of(rows(1, 2, 3))
    s = score(rows(1, 2, 3), gold)
    assert (s.reward, s.iou, s.order) == (1.0, 1.0, 1.0)


def test_iou_counts_duplicates_as_multisets():
    # gold {a:2, b:1}, predicted {a:1, b:2, c:1}: intersection min-counts a1+b1 = 2,
    # union max-counts a2+b2+c1 = 5, so IoU = 0.4. The common rows come in the same order
    # ([a, b] on both sides), tau = 1.
    gold = GoldRows.of(rows("a", "a", "b"))
    s = score(rows("a", "b", "b", "c"), gold)
    assert (s.intersection, s.union) == (2, 5)
    assert s.iou == pytest.approx(0.4)
    assert s.reward == 0.4


def test_ordering_factor_is_kendall_tau():
    # Predicted order 2,1,3,4 against 1,2,3,4: of the 6 pairs only (2,1) is discordant,
    # tau = (5 - 1) / 6 = 0.667, IoU = 1, reward rounds to 0.67.
    s = score(rows(2, 1, 3, 4), GoldRows.of(rows(1, 2, 3, 4)))
    assert s.iou == 1.0
    assert s.order == pytest.approx(4 / 6)
    assert s.reward == 0.67


def test_tau_pairs_the_two_row_sequences_position_by_position():
    # As InterCode: tau between sequences (b, a, c) and (c, a, b), values compared as text.
    # Pairs (b,c), (a,a), (c,b): positions 1-2 concordant (b>a, c>a), 1-3 discordant
    # (b<c, c>b), 2-3 concordant (a<c, a<b): tau = (2 - 1) / 3.
    s = score(rows("b", "a", "c"), GoldRows.of(rows("c", "a", "b")))
    assert s.order == pytest.approx(1 / 3) and s.reward == 0.33


def test_reversed_order_is_clipped_to_zero():
    # InterCode would multiply by tau = -1 and return -1.0; the contract needs [0, 1].
    s = score(rows(3, 2, 1), GoldRows.of(rows(1, 2, 3)))
    assert s.iou == 1.0 and s.order == 0.0 and s.reward == 0.0


def test_iou_and_order_combine():
    # Common rows 1,2,3 (IoU 3/4 with the extra 9); their order 1,3,2 vs 1,2,3 has one
    # discordant pair of 3: tau = 1/3, reward = round(0.75 / 3, 2) = 0.25.
    s = score(rows(1, 3, 9, 2), GoldRows.of(rows(1, 2, 3)))
    assert s.iou == pytest.approx(0.75)
    assert s.order == pytest.approx(1 / 3)
    assert s.reward == 0.25


def test_single_common_row_has_no_ordering_and_no_rounding():
    # Intersection 1 of union 3; tau of one row is undefined, so IoU alone, and InterCode
    # rounds only the tau-scaled score: 1/3, not 0.33.
    s = score(rows(1, 9), GoldRows.of(rows(1, 2)))
    assert s.order is None
    assert s.reward == 1 / 3


def test_intercode_case_one_common_row_is_a_third():
    # InterCode: predicted [(1,)] vs gold [(1,), (2,), (3,)] scores 0.3333...
    s = score([(1,)], GoldRows.of([(1,), (2,), (3,)]))
    assert s.order is None and s.reward == 1 / 3


def test_all_common_rows_equal_has_no_ordering_and_no_rounding():
    # Common rows (1,), (1,): every pair tied on both sides, tau undefined; IoU 2/3 as is.
    s = score(rows(1, 1), GoldRows.of(rows(1, 1, 2)))
    assert s.order is None and s.reward == 2 / 3


def test_intercode_case_scipys_last_bit_rounds_down():
    # Common rows (2,), (None,), (2,) on both sides, IoU 3/8. scipy's tau: 2 / sqrt(2) /
    # sqrt(2) = 0.9999999999999999, times 0.375 = 0.37499999999999994: InterCode 0.37.
    predicted = [(2,), (None,), (2,)]
    gold = [(2,), (None,), (2,), (2,), (2,), (2,), (None,), (2,)]
    s = score(predicted, GoldRows.of(gold))
    assert s.iou == 0.375 and s.order == 0.9999999999999999
    assert s.reward == 0.37
    assert round_cents(0.375) == 0.38  # an exact 1 would have rounded up


def test_round_cents_is_numpys_rounding_of_a_float64():
    # 0.025 is stored a hair above 1/40, so Python's round(0.025, 2) gives 0.03; numpy rounds
    # 0.025 * 100 = 2.5 to the even 2: 0.02. Likewise 0.075 -> 0.08 (Python: 0.07).
    assert (round_cents(0.025), round(0.025, 2)) == (0.02, 0.03)
    assert (round_cents(0.075), round(0.075, 2)) == (0.08, 0.07)
    np = pytest.importorskip("numpy")
    for a in range(0, 120):
        for b in range(max(a, 1), 120):
            assert round_cents(a / b) == round(np.float64(a / b), 2)


def test_both_empty_score_one_and_one_empty_scores_zero():
    assert score([], GoldRows.of([])).reward == 1.0
    assert score([], GoldRows.of(rows(1))).reward == 0.0
    assert score(rows(1), GoldRows.of([])).reward == 0.0


def test_error_scores_zero_and_says_why():
    s = score(None, GoldRows.of(rows(1)), "Error executing query: no such table: x")
    assert s.reward == 0.0
    assert "no such table" in s.to_info()["error"]


def test_rows_compare_as_text_like_intercode():
    # str((1,)) != str((1.0,)): an integer answer does not match a float one.
    assert score([(1.0,)], GoldRows.of([(1,)])).reward == 0.0
    assert score([(1, "a")], GoldRows.of([(1, "a")])).reward == 1.0


def _tau_b_reference(x, y) -> float:
    """Plain O(n^2) tau-b, straight from the definition."""
    concordant = discordant = x_only = y_only = 0
    for i, j in itertools.combinations(range(len(x)), 2):
        dx = (x[i] > x[j]) - (x[i] < x[j])
        dy = (y[i] > y[j]) - (y[i] < y[j])
        if dx == 0 and dy == 0:
            continue
        if dx == 0:
            x_only += 1
        elif dy == 0:
            y_only += 1
        elif dx == dy:
            concordant += 1
        else:
            discordant += 1
    denominator = math.sqrt((concordant + discordant + x_only) * (concordant + discordant + y_only))
    return math.nan if denominator == 0 else (concordant - discordant) / denominator


def test_fast_tau_b_matches_the_definition_with_ties():
    rng = random.Random(0)
    for _ in range(300):
        n = rng.randint(2, 30)
        x = [rng.randint(0, 5) for _ in range(n)]
        y = [rng.randint(0, 5) for _ in range(n)]
        expected, got = _tau_b_reference(x, y), kendall_tau_b(x, y)
        assert (math.isnan(expected) and math.isnan(got)) or got == pytest.approx(expected)


def test_tau_b_by_hand_with_a_tie():
    # x = a,a,b ; y = a,b,a: pair (1,2) tied in x, (1,3) tied in y, (2,3) discordant.
    # tau_b = (0 - 1) / sqrt((3 - 1) * (3 - 1)) = -0.5.
    assert kendall_tau_b(["a", "a", "b"], ["a", "b", "a"]) == pytest.approx(-0.5)
    assert math.isnan(kendall_tau_b(["a", "a"], ["b", "c"]))
