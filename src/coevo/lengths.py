"""Token rows that need not be computed in full: groups of like length, shared prefixes.

Training sends a pair's chosen and rejected sides through the model in such groups
(`coevo.train.model.AgentLogps`); generation feeds each episode's new tokens so
(`coevo.policy.hf.HFPolicy`): a long page and a one-line error need not share a width.
Generation reuses a cached prefix, and DPO computes a pair's shared prefix once
(`coevo.train.batches.collate_forked`): `common_prefix` says how long it is.
"""

from __future__ import annotations

from collections.abc import Sequence


def length_groups(lengths: list[int], waste: float = 0.1) -> list[list[int]]:
    """Row indices in groups of like length, longest first: a row joins the group while
    padding every row to the group's longest costs at most `waste` of its real tokens
    (`waste=float("inf")`: one group)."""
    groups: list[list[int]] = []
    real = 0
    for row in sorted(range(len(lengths)), key=lambda r: -lengths[r]):
        if groups:
            longest = lengths[groups[-1][0]]
            if longest * (len(groups[-1]) + 1) <= (1 + waste) * (real + lengths[row]):
                groups[-1].append(row)
                real += lengths[row]
                continue
        groups.append([row])
        real = lengths[row]
    return groups


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading items `a` and `b` share."""
    if len(a) <= len(b) and list(b[: len(a)]) == list(a):  # the usual case, compared in C
        return len(a)
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
