from __future__ import annotations

import pytest

from coevo.analysis.outcomes import outcome, outcome_shares


def test_outcome_boundaries():
    assert outcome(1.0) == "success"
    assert outcome(0.6) == "hard_negative" and outcome(0.99) == "hard_negative"
    assert outcome(0.5999) == "failure" and outcome(0.0) == "failure"
    assert outcome(0.5, threshold=0.5) == "hard_negative"


def test_shares_by_hand():
    # 1.0 -> success; 0.75, 0.6 -> hard negative; 0.2, 0.0 -> failure: 1/5, 2/5, 2/5.
    shares = outcome_shares([1.0, 0.75, 0.6, 0.2, 0.0])
    assert shares == pytest.approx({"success": 0.2, "hard_negative": 0.4, "failure": 0.4})
    assert outcome_shares([]) == {"success": 0.0, "hard_negative": 0.0, "failure": 0.0}
