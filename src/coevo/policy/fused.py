"""Projections that read the same input, run as one matrix product in the fixed-shape decode step.

A decode step of a small model at batch 64 is many small kernels (SmolLM2-135M: 30 layers of
14 each, 7 of them matrix products, counted in the step inductor compiles on the CPU), and on
a GPU its time follows their count more than their work. A layer's q, k and v projections read
the same hidden states, as do its MLP's gate and up: `FusedProjections` stacks each group's
weights into one matrix, and the first projection of a group called on an input computes the
group's product and keeps it; the others slice their rows out of it. The step then runs 4
products a layer where it ran 7. (The compiler would not merge three identical products for
us: its common-subexpression pass runs on training graphs only.) The kept product is the
step's: `forget` drops it before the next.

The stacked weights are copies, refreshed in place before every decoding call (`refresh`): a
captured graph reads them by address, so an optimizer's update reaches the next replay with no
recapture, and so does a weight changed behind autograd's back (`.data`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))
"""Names of linear layers of one module that read the same input."""


class FusedProjections:
    """Each `GROUPS` group found in `model` (plain `torch.nn.Linear`s of one input size, all
    with a bias or none: LoRA-wrapped layers are left as they are), with a stacked weight and
    the forwards that read it."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.groups: list[list[torch.nn.Linear]] = []
        for module in model.modules():
            for names in GROUPS:
                found = [getattr(module, name, None) for name in names]
                if fusable(found):
                    self.groups.append(found)  # type: ignore[arg-type]
        # The stacked tensors, made by the first `refresh`.
        self.weights: list[torch.Tensor | None] = [None] * len(self.groups)
        self.biases: list[torch.Tensor | None] = [None] * len(self.groups)
        # Per group, the input its product was computed on and the product's parts.
        self.held: list[tuple[torch.Tensor, tuple[torch.Tensor, ...]] | None]
        self.held = [None] * len(self.groups)
        # Made once: a compiled step guards on the forwards it traced being these.
        self.forwards = [
            [self._forward(g, i) for i in range(len(group))] for g, group in enumerate(self.groups)
        ]

    def __len__(self) -> int:
        return len(self.groups)

    def _forward(self, g: int, i: int) -> Callable[[torch.Tensor], torch.Tensor]:
        """Group `g`'s `i`-th projection: its rows of the group's product on `x`."""
        sizes = [linear.out_features for linear in self.groups[g]]

        def forward(x: torch.Tensor) -> torch.Tensor:
            held = self.held[g]
            if held is None or held[0] is not x:
                out = torch.nn.functional.linear(x, self.weights[g], self.biases[g])
                held = self.held[g] = (x, out.split(sizes, dim=-1))
            return held[1][i]

        return forward

    def forget(self) -> None:
        """Drop the kept products (before every step: a compiled step expects none)."""
        for g in range(len(self.held)):
            self.held[g] = None

    @torch.no_grad()
    def refresh(self) -> None:
        """Copy every group's current weights (and biases) into its stacked ones."""
        for g, group in enumerate(self.groups):
            self.weights[g] = stacked(self.weights[g], [linear.weight for linear in group])
            if group[0].bias is not None:
                self.biases[g] = stacked(self.biases[g], [linear.bias for linear in group])

    def pointers(self) -> tuple[int, ...]:
        """Where the stacked tensors are: a graph captured over them reads these addresses."""
        return tuple(t.data_ptr() for t in (*self.weights, *self.biases) if t is not None)

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Inside the block the grouped projections run their stacked forwards."""
        linears = [linear for group in self.groups for linear in group]
        before = [linear.__dict__.get("forward") for linear in linears]
        for linear, forward in zip(linears, (f for fs in self.forwards for f in fs), strict=True):
            linear.forward = forward  # type: ignore[method-assign]
        self.forget()
        try:
            yield
        finally:
            self.forget()
            for linear, was in zip(linears, before, strict=True):
                if was is None:
                    del linear.forward  # the class's forward again
                else:
                    linear.forward = was  # type: ignore[method-assign]


def stacked(into: torch.Tensor | None, parts: list[torch.Tensor]) -> torch.Tensor:
    """`parts` stacked along their first dimension into `into`, or into a new tensor where
    `into` is missing or of another shape, dtype or device."""
    shape = (sum(p.shape[0] for p in parts), *parts[0].shape[1:])
    like = parts[0]
    if (
        into is None
        or into.shape != shape
        or (into.dtype, into.device) != (like.dtype, like.device)
    ):
        into = like.new_empty(shape)
    return torch.cat([p.detach() for p in parts], out=into)


def fusable(found: list[Any]) -> bool:
    """Whether linears found by name can share one product: plain linears, one input size,
    one dtype and device, all with a bias or none."""
    if not all(type(f) is torch.nn.Linear for f in found):
        return False
    first = found[0]
    return all(
        f.in_features == first.in_features
        and (f.weight.dtype, f.weight.device) == (first.weight.dtype, first.weight.device)
        and (f.bias is None) == (first.bias is None)
        for f in found
    )
