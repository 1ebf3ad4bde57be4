"""Run by test_ddp.py in one process, or in two under torchrun: SFT then DPO, losses to JSON."""

from __future__ import annotations

import json
import os
import random
import sys
from dataclasses import replace

from coevo.run.processes import Processes
from coevo.train.batches import DpoExample
from coevo.train.dpo import DpoConfig, train_dpo
from coevo.train.settings import Optim
from coevo.train.sft import SftConfig, train_sft
from tests.train.conftest import random_seq, tiny_llama


def main(out: str, batch_size: int, grad_accum: int) -> None:
    rng = random.Random(1)
    seqs = [random_seq(rng) for _ in range(16)]
    pairs = [DpoExample(random_seq(rng), random_seq(rng), 0.5, 0.1) for _ in range(8)]
    common = dict(batch_size=batch_size, grad_accum=grad_accum, progress=False, epochs=1)
    sft_config = SftConfig(optim=Optim(lr=3e-3), **common)
    sft = train_sft(tiny_llama(), seqs, sft_config, output_dir=f"{out}/sft")
    dpo_config = DpoConfig(optim=replace(DpoConfig().optim, lr=1e-3), **common)
    dpo = train_dpo(sft.model, pairs, dpo_config, output_dir=f"{out}/dpo")
    if os.environ.get("RANK", "0") == "0":  # one writer
        summary = {
            "sft": [r["loss"] for r in sft.history if "loss" in r],
            "dpo": [r["loss"] for r in dpo.history if "loss" in r],
            "weight_sum": float(sum(p.detach().sum() for p in dpo.model.parameters())),
        }
        with open(f"{out}/summary.json", "w") as f:
            json.dump(summary, f)
    # The process group goes down before the interpreter exits, as `coevo run` takes it down:
    # left to the exit, a process whose gloo threads are still joinable can abort
    # ("terminate called without an active exception", seen once in CI on a busy machine).
    Processes(int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))).end()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
