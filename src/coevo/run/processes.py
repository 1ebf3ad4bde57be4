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

The processes wait for each other and exchange episodes and records over a gloo group of their
own (on GPUs too: Python objects need no device copies there) whose waits last `WAIT`, since a
stage the main process runs alone may take hours; the trainers' gradients go over accelerate's
group. A process that stops waiting says which process it is and what it waited for.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

T = TypeVar("T")

WAIT = timedelta(hours=12)
"""How long a process waits for the others (for a stage the main process runs alone: expert
demonstrations of a large train split, a model's conversion). A process that dies is noticed
at once (its connections close); this bounds only a hang."""


class ProcessesError(RuntimeError):
    """A process of a multi-process run stopped waiting for the others."""


@dataclass(frozen=True)
class Processes:
    """This process's place among the run's processes."""

    rank: int = 0
    count: int = 1
    local_rank: int = 0
    group: Any = field(default=None, compare=False, repr=False)
    """The processes' gloo group for waits and objects (None: the default group)."""

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
        self._wait(
            "the episodes of every process",
            lambda: dist.all_gather_object(parts, items, group=self.group),
        )
        return [item for part in parts for item in part]

    def from_main(self, value: T) -> T:
        """The main process's `value`, on every process (so all take the same branch)."""
        if self.count == 1:
            return value
        import torch.distributed as dist

        box = [value]
        self._wait(
            "the main process's view",
            lambda: dist.broadcast_object_list(box, src=0, group=self.group),
        )
        return box[0]

    def barrier(self, what: str) -> None:
        """Wait until every process is here; `what` names what is waited for (a stage's end)."""
        if self.count > 1:
            import torch.distributed as dist

            self._wait(
                what, lambda: dist.monitored_barrier(self.group, timeout=WAIT, wait_all_ranks=True)
            )

    def end(self) -> None:
        """Wait for every process, then take the process groups down: a group left to the
        interpreter's exit can abort a process whose gloo threads are still joinable."""
        if self.count > 1:
            import torch.distributed as dist

            if dist.is_initialized():
                self.barrier("the end of the run")
                dist.destroy_process_group()

    def _wait(self, what: str, collective: Callable[[], Any]) -> None:
        try:
            collective()
        except (RuntimeError, ValueError) as exc:  # gloo's errors: a closed peer, a timeout
            raise ProcessesError(
                f"Process {self.rank} of {self.count} stopped waiting for {what}: {exc}. "
                "Another process probably failed first: its own log says why (torchrun "
                "--log-dir DIR --tee 3 keeps each process's log)."
            ) from exc

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
    import torch.distributed as dist
    from accelerate import PartialState
    from accelerate.utils import parse_flag_from_env

    # As the trainers' Accelerator makes it (the state is shared): on the CPU only when asked.
    state = PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU"))
    group = dist.new_group(backend="gloo", timeout=WAIT)
    return Processes(state.process_index, state.num_processes, state.local_process_index, group)
