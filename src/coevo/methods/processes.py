"""The processes of one run under `accelerate launch -m coevo run RECIPE --out DIR`.

Every process walks the same stages. Training stages use every process (the trainers are
accelerate loops: DDP, FSDP or DeepSpeed as `accelerate config` says). Exploration and
evaluation split their tasks over the processes, each playing its share with its own replica
of the model, and gather the episodes; every other stage (expert demonstrations, the model's
set-up) runs on the main process alone while the others wait. Only the main process writes the
store, the manifests and the run's files; the others open the store read-only and read each
finished stage's record from its manifest, so every process goes on with the same values.

A process's episodes do not depend on which process plays them (each episode has its own
seeds, `coevo.rollout`), so the run plays the episodes one process plays.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class Processes:
    """This process's place among the run's processes."""

    rank: int = 0
    count: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    def share(self, items: Sequence[T]) -> list[T]:
        """This process's part of `items`: every count-th one, from its rank on."""
        return list(items[self.rank :: self.count])

    def gather(self, items: list[T]) -> list[T]:
        """Every process's `items`, in rank order, on every process."""
        if self.count == 1:
            return items
        import torch.distributed as dist

        parts: list[Any] = [None] * self.count
        dist.all_gather_object(parts, items)
        return [item for part in parts for item in part]

    def from_main(self, value: T) -> T:
        """The main process's `value`, on every process (so all take the same branch)."""
        if self.count == 1:
            return value
        import torch.distributed as dist

        box = [value]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def barrier(self) -> None:
        if self.count > 1:
            import torch.distributed as dist

            dist.barrier()

    def end(self) -> None:
        """Wait for every process, then take the process group down: a group left to the
        interpreter's exit can abort a process whose gloo threads are still joinable."""
        if self.count > 1:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.barrier()
                dist.destroy_process_group()

    def device(self, configured: str) -> str:
        """The generation device: each process's own GPU when `auto` picks GPUs."""
        if configured != "auto" or self.count == 1:
            return configured
        import torch

        return f"cuda:{self.local_rank}" if torch.cuda.is_available() else "cpu"


def start() -> Processes:
    """This process's place; with several processes, their process group is set up once
    here (accelerate's, which the trainers then share)."""
    count = int(os.environ.get("WORLD_SIZE", "1"))
    if count == 1:
        return Processes()
    from accelerate import PartialState
    from accelerate.utils import parse_flag_from_env

    # As the trainers' Accelerator makes it (the state is shared): on the CPU only when asked.
    state = PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU"))
    return Processes(state.process_index, state.num_processes, state.local_process_index)
