"""Rows of unlike length in groups of like length."""

from __future__ import annotations

from coevo.lengths import length_groups


def test_length_groups_cover_every_row_once_within_the_waste():
    lengths = [100, 50, 98, 52, 10, 95]
    groups = length_groups(lengths, waste=0.1)
    assert groups == [[0, 2, 5], [3, 1], [4]]
    for rows in groups:
        padded = max(lengths[r] for r in rows) * len(rows)
        assert padded <= 1.1 * sum(lengths[r] for r in rows)
    assert length_groups([7, 7, 7]) == [[0, 1, 2]]
    assert length_groups([]) == []
    assert length_groups([100, 10, 1], waste=float("inf")) == [[0, 1, 2]]
