"""Training examples as tensors: SFT and DPO examples, length-bucketed batches, padding.

Examples are rendered sequences (`input_ids` + `action_mask`, as `coevo.render` makes
them); nothing here needs a tokenizer except the two builders at the bottom.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from coevo.attention import pair_forks
from coevo.lengths import common_prefix
from coevo.trajectory import Pair, Trajectory


class TokenSeq(Protocol):
    """A rendered sequence: token ids and a mask that is 1 exactly on the agent's tokens."""

    input_ids: Sequence[int]
    action_mask: Sequence[int]


@dataclass(frozen=True)
class Tokens:
    """A plain TokenSeq, for examples made without the renderer (tests, imported data)."""

    input_ids: tuple[int, ...]
    action_mask: tuple[int, ...]


@dataclass(frozen=True)
class DpoExample:
    """One rendered preference pair with its weights and, once computed, its reference log-probs."""

    chosen: TokenSeq
    rejected: TokenSeq
    weight: float = 1.0
    """w_i of Eq. 9: scales the pair's whole loss (DPO and SFT terms)."""
    sft_weight: float = 0.0
    """s_i of Eq. 9: weight of the chosen side's per-token NLL; 0 for plain DPO."""
    ref_chosen_logp: float | None = None
    """Reference policy's summed agent-token log-prob of `chosen`."""
    ref_rejected_logp: float | None = None
    """Reference policy's summed agent-token log-prob of `rejected`."""

    @property
    def length(self) -> int:
        return max(len(self.chosen.input_ids), len(self.rejected.input_ids))


def check_seq(seq: TokenSeq, what: str) -> int:
    """Raise a clear error for a sequence that cannot be trained on; return its agent-token count."""
    if len(seq.input_ids) != len(seq.action_mask):
        raise ValueError(
            f"{what}: input_ids ({len(seq.input_ids)}) and action_mask ({len(seq.action_mask)}) "
            "differ in length; render it again with coevo.render."
        )
    # Position 0 is never predicted (nothing comes before it), so it cannot count.
    n = sum(1 for m in seq.action_mask[1:] if m)
    if n == 0:
        raise ValueError(
            f"{what} has no agent tokens to train on (all were cut or masked); raise max_length "
            "or drop the trajectory before training."
        )
    return n


def pad(seqs: Sequence[TokenSeq]) -> dict[str, torch.Tensor]:
    """Right-pad to the longest sequence of this batch only (never to a global maximum).

    -> input_ids, attention_mask, action_mask: (batch, longest). Pad ids are 0: they sit after
    every real token, so causal attention never lets a real token see them, and both masks
    are 0 there.
    """
    longest = max(len(s.input_ids) for s in seqs)
    ids = torch.zeros(len(seqs), longest, dtype=torch.long)
    attention = torch.zeros(len(seqs), longest, dtype=torch.long)
    action = torch.zeros(len(seqs), longest, dtype=torch.long)
    for row, s in enumerate(seqs):
        n = len(s.input_ids)
        ids[row, :n] = torch.as_tensor(s.input_ids, dtype=torch.long)
        attention[row, :n] = 1
        action[row, :n] = torch.as_tensor(s.action_mask, dtype=torch.long)
    return {"input_ids": ids, "attention_mask": attention, "action_mask": action}


def collate_sft(examples: Sequence[TokenSeq]) -> dict[str, torch.Tensor]:
    """A batch of SFT sequences: (batch, longest) tensors."""
    return pad(examples)


def collate_packed(examples: Sequence[TokenSeq]) -> dict[str, torch.Tensor]:
    """A batch of SFT sequences as ONE row, one after another, no padding (`sft.packing`).

    -> input_ids, position_ids, action_mask: (1, tokens), positions restarting at 0 where each
    sequence starts; lengths: (sequences,). The model attends within each sequence only
    (`coevo.attention.packed_rows_sdpa`). Each sequence's first token gets mask 0: it is
    never predicted, and here the row before it is the previous sequence's last token.
    """
    ids: list[int] = []
    positions: list[int] = []
    action: list[int] = []
    for s in examples:
        ids += s.input_ids
        positions += range(len(s.input_ids))
        action += [0, *s.action_mask[1:]]
    return {
        "input_ids": torch.tensor([ids], dtype=torch.long),
        "position_ids": torch.tensor([positions], dtype=torch.long),
        "action_mask": torch.tensor([action], dtype=torch.long),
        "lengths": torch.tensor([len(s.input_ids) for s in examples], dtype=torch.long),
    }


def collate_dpo(examples: Sequence[DpoExample]) -> dict[str, torch.Tensor]:
    """A batch of pairs as ONE (2 * pairs, longest) batch: chosen rows first, then rejected.

    Both sides share one forward pass. Per-pair fields are (pairs,); missing reference
    log-probs are NaN (the loop then uses a live reference model).
    """
    batch = pad([e.chosen for e in examples] + [e.rejected for e in examples])
    batch["tokens"] = batch["attention_mask"].sum()
    batch.update(_pair_fields(examples))
    return batch


def collate_forked(examples: Sequence[DpoExample]) -> dict[str, Any]:
    """A batch of pairs as ONE row of forks: each pair's shared prefix once, then the rest of
    its chosen side, then the rest of its rejected side (`coevo.attention.forked_sdpa`
    runs attention over it as if the sides were two rows). No padding.

    -> input_ids, position_ids: (1, tokens), positions restarting where the rejected rest
    starts; forks: their `PairForks` (each pair's prefix / chosen rest / rejected rest
    lengths, and the gathers `forked_sdpa` runs them with); scored: (4, agent
    tokens) for each scored token its row position (the token before it), its id, its pair and
    its side (0: in the shared prefix, counted for both; 1: chosen; 2: rejected). The prefix
    stops where the ids or the agent masks part, and leaves each side at least one token.
    Per-pair fields as `collate_dpo`; `tokens` counts both sides in full, as that batch would.
    """
    ids: list[int] = []
    positions: list[int] = []
    forks: list[tuple[int, int, int]] = []
    scored: list[tuple[int, int, int, int]] = []
    for pair, e in enumerate(examples):
        c_ids, r_ids = list(e.chosen.input_ids), list(e.rejected.input_ids)
        c_mask, r_mask = list(e.chosen.action_mask), list(e.rejected.action_mask)
        p = min(
            common_prefix(c_ids, r_ids),
            common_prefix(c_mask, r_mask),
            len(c_ids) - 1,
            len(r_ids) - 1,
        )
        start = len(ids)
        ids += c_ids + r_ids[p:]
        positions += list(range(len(c_ids))) + list(range(p, len(r_ids)))
        forks.append((p, len(c_ids) - p, len(r_ids) - p))
        # Token t of the chosen side sits at start + t and is predicted by the row before it;
        # token t >= p of the rejected side sits at `rest + t`, its token p after the prefix.
        rest = start + len(c_ids) - p
        for t in range(1, len(c_ids)):
            if c_mask[t]:
                scored.append((start + t - 1, c_ids[t], pair, 0 if t < p else 1))
        for t in range(p, len(r_ids)):
            if r_mask[t] and t > 0:
                row = start + p - 1 if t == p else rest + t - 1
                scored.append((row, r_ids[t], pair, 2))
    batch = {
        "input_ids": torch.tensor([ids], dtype=torch.long),
        "position_ids": torch.tensor([positions], dtype=torch.long),
        "forks": pair_forks(forks),
        "scored": torch.tensor(scored, dtype=torch.long).reshape(-1, 4).T.contiguous(),
        "tokens": torch.tensor(
            sum(len(e.chosen.input_ids) + len(e.rejected.input_ids) for e in examples)
        ),
    }
    batch.update(_pair_fields(examples))
    return batch


def _pair_fields(examples: Sequence[DpoExample]) -> dict[str, torch.Tensor]:
    """Per-pair weights and reference log-probs, (pairs,) each; missing references are NaN."""
    nan = float("nan")
    batch = {}
    batch["weight"] = torch.tensor([e.weight for e in examples], dtype=torch.float32)
    batch["sft_weight"] = torch.tensor([e.sft_weight for e in examples], dtype=torch.float32)
    batch["ref_chosen"] = torch.tensor(
        [nan if e.ref_chosen_logp is None else e.ref_chosen_logp for e in examples]
    )
    batch["ref_rejected"] = torch.tensor(
        [nan if e.ref_rejected_logp is None else e.ref_rejected_logp for e in examples]
    )
    return batch


class LengthBatches:
    """Batches of indices grouped by length, in a fixed order per (seed, epoch): a batch sampler.

    Indices are shuffled, cut into chunks of `batch_size * 16`, sorted by length inside each
    chunk and cut into batches, and the batches are shuffled: sequences of a batch have
    similar lengths (little padding) while each epoch still mixes the data. `epoch` and
    `skip` (batches to leave out at the start, for resuming) are set by the loop before
    iterating; the order depends on nothing else, which is what makes resume exact.
    """

    def __init__(
        self, lengths: Sequence[int], batch_size: int, *, seed: int, shuffle: bool = True
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}.")
        self.lengths = list(lengths)
        self.batch_size = None  # tells accelerate's sharding that batch sizes may vary
        self.size = batch_size
        self.seed = seed
        self.shuffle = shuffle
        self.drop_last = False
        self.epoch = 0
        self.skip = 0

    def batches(self, epoch: int) -> list[list[int]]:
        """Every batch of `epoch`, in order."""
        order = list(range(len(self.lengths)))
        if not self.shuffle:
            order.sort(key=lambda i: self.lengths[i])
            return [order[i : i + self.size] for i in range(0, len(order), self.size)]
        rng = random.Random(self.seed * 1_000_003 + epoch)
        rng.shuffle(order)
        chunk = self.size * 16
        out: list[list[int]] = []
        for start in range(0, len(order), chunk):
            part = sorted(order[start : start + chunk], key=lambda i: self.lengths[i])
            out.extend(part[i : i + self.size] for i in range(0, len(part), self.size))
        rng.shuffle(out)
        return out

    def __len__(self) -> int:
        return max(0, -(-len(self.lengths) // self.size) - self.skip)

    def __iter__(self) -> Iterator[list[int]]:
        yield from self.batches(self.epoch)[self.skip :]


def sft_examples(
    trajectories: Iterable[Trajectory], tokenizer: Any, *, max_length: int | None = None
) -> list[TokenSeq]:
    """Render trajectories for SFT; a trajectory left with no agent tokens is an error, not a skip."""
    from coevo.render import render

    out = []
    for t in trajectories:
        r = render(t, tokenizer, max_length=max_length)
        check_seq(r, f"Trajectory of task {t.task.id!r} (agent {t.agent!r})")
        out.append(r)
    return out


def lm_examples(
    trajectories: Iterable[Trajectory], tokenizer: Any, *, max_length: int | None = None
) -> list[TokenSeq]:
    """Render trajectories for a language-model warm-up: every token is learned.

    The same ids as `sft_examples`, with the mask set on the observations and instructions too:
    many more tokens to learn from per episode, and most of an episode's repetition (each page
    repeats the instruction, an item page repeats the title it was opened from) is in the
    observations. Measured on nano shop models it lowers the SFT loss and fixes the reply
    format, but does not yet make them copy product ids (benchmarks/results/learning.md).
    """
    from coevo.render import render

    out = []
    for t in trajectories:
        ids = render(t, tokenizer, max_length=max_length).input_ids
        seq = Tokens(tuple(ids), (1,) * len(ids))
        check_seq(seq, f"Trajectory of task {t.task.id!r} (agent {t.agent!r})")
        out.append(seq)
    return out


def dpo_examples(
    pairs: Iterable[Pair], tokenizer: Any, *, max_length: int | None = None
) -> list[DpoExample]:
    """Render pairs for DPO, carrying each pair's weight and SFT weight."""
    from coevo.render import render

    out = []
    for p in pairs:
        chosen = render(p.chosen, tokenizer, max_length=max_length)
        rejected = render(p.rejected, tokenizer, max_length=max_length)
        check_seq(chosen, f"Chosen side of a {p.kind!r} pair on task {p.task.id!r}")
        check_seq(rejected, f"Rejected side of a {p.kind!r} pair on task {p.task.id!r}")
        out.append(DpoExample(chosen, rejected, weight=p.weight, sft_weight=p.sft_weight))
    return out
