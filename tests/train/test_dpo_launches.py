"""What keeps a DPO step cheap on a GPU, where it is bound by kernel launches and host syncs:
one model forward per micro-batch, few for the reference pass, no host read inside the loss."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from coevo.train.batches import collate_forked
from coevo.train.dpo import REFERENCE_BATCHES, pair_logps, step_sums
from coevo.train.losses import DpoLoss, dpo_loss
from coevo.train.model import AgentLogps
from tests.train.conftest import EXACT, tiny_llama
from tests.train.test_dpo import dpo, losses
from tests.train.test_model import forked_pairs

# Ops after which the host waits for the device (on a GPU): a scalar read, and the indexing
# by a boolean mask (its size is known only once the mask is computed).
SYNCS = {"_local_scalar_dense", "nonzero", "equal", "masked_select"}


class NoSync(TorchDispatchMode):
    """Fails on any op that would make the host wait for the device."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        # aten.index / index_put_ take a list of indices, any of which may be a mask.
        masks = args[1] if name in ("index", "index_put_", "_index_put_impl_") else None
        if name in SYNCS or any(
            isinstance(m, torch.Tensor) and m.dtype == torch.bool for m in masks or ()
        ):
            raise AssertionError(f"{name} waits for the device")
        return func(*args, **(kwargs or {}))


def test_the_loss_and_its_step_sums_never_wait_for_the_device():
    torch.manual_seed(0)
    c, r = (-torch.rand(4, requires_grad=True) * 50 for _ in range(2))
    args = (c, r, -torch.rand(4) * 50, -torch.rand(4) * 50)
    kw = dict(beta=0.1, weights=torch.tensor([0.5, 1.0, 1.0, 0.5]))
    kw.update(sft_weights=torch.tensor([0.0, 0.1, 0.0, 0.0]), chosen_tokens=torch.arange(4) + 3)
    with NoSync():
        loss = dpo_loss(*args, **kw)
        loss.per_pair.sum().backward()
        sums = step_sums(loss, torch.tensor(17))
    # What the step records (one read of `sums` per step): each metric as the float sum the
    # loop used to make of one host read per metric and micro-batch.
    assert sums.tolist()[:-1] == pytest.approx([4 * float(v) for v in loss.metrics().values()])
    assert sums.tolist()[-1] == 17
    assert list(loss.metrics()) == list(DpoLoss.METRICS)


def test_the_sft_term_with_zero_weights_adds_exactly_nothing():
    torch.manual_seed(1)
    c, r, rc, rr = (-torch.rand(6, dtype=torch.float64) * 40 for _ in range(4))
    tokens = torch.arange(6) + 2
    plain = dpo_loss(c, r, rc, rr, beta=0.2)
    zero = dpo_loss(c, r, rc, rr, beta=0.2, sft_weights=torch.zeros(6), chosen_tokens=tokens)
    assert torch.equal(plain.per_pair, zero.per_pair)
    assert torch.equal(zero.nll, -c / tokens)  # still reported: the chosen NLL per token


class Forwards:
    """Counts the decoder forwards of a model."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.n = 0
        model.get_decoder().register_forward_pre_hook(self.count)

    def count(self, *_: object) -> None:
        self.n += 1


def test_one_forward_per_micro_batch_and_few_for_the_reference(tmp_path, model_factory, dpo_data):
    # 16 pairs in micro-batches of 2, 2 per step: 8 forwards for training, both sides of a
    # micro-batch in one (as forks); the reference pass takes REFERENCE_BATCHES micro-batches
    # a forward.
    model = model_factory()
    forwards = Forwards(model)
    out = dpo(model, dpo_data, tmp_path, batch_size=2, grad_accum=2, epochs=1, device=EXACT)
    assert out.step == 4 and len(losses(out.history)) == 4
    reference = math.ceil(len(dpo_data) / (2 * REFERENCE_BATCHES))
    assert forwards.n == len(dpo_data) // 2 + reference


class Ops(TorchDispatchMode):
    """Counts the ops dispatched (on a GPU: about one kernel launch each, views aside)."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


def forked_step(net: AgentLogps, pairs: list, mode: TorchDispatchMode) -> None:
    batch = collate_forked(pairs)
    with mode:
        logps, _ = pair_logps(net, batch)
        logps.sum().backward()


def test_forked_pairs_cost_the_same_ops_for_any_number_of_pairs_and_wait_for_nothing():
    # A call per pair in each layer would make the launches grow with the batch, forward,
    # backward and recomputation (issue 37: DPO at 0.42x TRL on an H200).
    model = tiny_llama(kv_heads=2)
    net = AgentLogps(model)
    pairs = forked_pairs()
    counts = []
    for n in (2, 5):
        ops = Ops()
        forked_step(net, pairs[:n], ops)
        counts.append(ops.n)
    assert counts[0] == counts[1]
    forked_step(net, pairs, NoSync())


class Attention(TorchDispatchMode):
    """Counts the attention kernels run forward."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        self.n += "scaled_dot_product" in name and "backward" not in name
        return func(*args, **(kwargs or {}))


def test_both_sides_of_every_pair_share_one_attention_kernel_per_layer():
    # The chosen and the rejected rows as one batch: one kernel where there were two per layer
    # (the nano's shape at 30 layers: 14,998 -> 12,912 ops per step, TRL 11,027).
    model = tiny_llama(kv_heads=2)
    net = AgentLogps(model)
    attention = Attention()
    with torch.no_grad():
        batch = collate_forked(forked_pairs())
        with attention:
            pair_logps(net, batch)
    assert attention.n == model.config.num_hidden_layers
