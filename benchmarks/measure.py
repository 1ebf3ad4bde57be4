"""How the speed benchmarks time and weigh one training call: CPU and wall time, peak memory,
and (untimed) the ops it dispatches.

On the CPU the memory is the growth of the process's peak RSS; on cuda it is the peak GPU
memory torch allocated during the call, and the wall clock waits for the GPU's queued work at
both ends of every timed region (CUDA kernels run asynchronously: without the waits a region
would time only their launches).

`Ops` counts the aten ops a call dispatches, views included, backward and optimizer too: on a
GPU each is host work, and most a kernel launch, so a trainer that dispatches more ops per step
than another is slower there wherever the GPU waits on the host (small models; issue 37). The
count is a property of the code, not of the machine: measured here on the CPU, it holds for a
GPU run of the same code except where a path differs by device (varlen attention kernels, the
flash kernels' backward).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

from machine import DEVICES


def rss_mb() -> float:
    """Current resident set size in MB (Linux /proc)."""
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KB


def sync(device: str) -> None:
    """Wait for the GPU's queued work on cuda; nothing on the CPU."""
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


@contextmanager
def clock(device: str = "cpu") -> Iterator[dict[str, float]]:
    """Time the block: the yielded dict gets its `cpu` and `wall` seconds when it ends."""
    took: dict[str, float] = {}
    sync(device)
    cpu, wall = time.process_time(), time.perf_counter()
    try:
        yield took
    finally:
        sync(device)
        took["cpu"] = time.process_time() - cpu
        took["wall"] = time.perf_counter() - wall


def timed_calls(
    call: Callable[[], Any],
    repeats: int,
    device: str = "cpu",
    around: Callable[[str], AbstractContextManager] | None = None,
):
    """Call `call` once to warm up, then `repeats` times, each timed by `clock`, inside
    `around(device)` when given (e.g. `gpu_peak`: the timed calls' peak, not the warm-up's):
    (the warm-up's wall seconds, each timed call's wall seconds, the last call's result, what
    `around` yielded)."""
    with clock(device) as warm:
        call()
    times, out = [], None
    with around(device) if around is not None else nullcontext() as measured:
        for _ in range(repeats):
            with clock(device) as took:
                out = call()
            times.append(took["wall"])
    return warm["wall"], times, out, measured


@contextmanager
def gpu_peak(device: str) -> Iterator[dict[str, float]]:
    """On cuda, the peak GPU memory torch allocated in the block, in MB, put in the yielded
    dict as `peak_gpu_mb` (from a reset at its start: what was already allocated counts, as
    `before_gpu_mb` says); on the CPU the dict stays empty."""
    got: dict[str, float] = {}
    if device != "cuda":
        yield got
        return
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    got["before_gpu_mb"] = torch.cuda.memory_allocated() / 2**20
    try:
        yield got
    finally:
        torch.cuda.synchronize()
        got["peak_gpu_mb"] = torch.cuda.max_memory_allocated() / 2**20


def resident_note(runs: dict[str, list[dict]]) -> str:
    """What each side's timed call found allocated on the GPU when it began (its weights, and
    whatever an untimed warm-up left), counted in its peak: `runs` maps a label to its runs."""
    return "GPU memory allocated when the timed call began (part of its peak): " + ", ".join(
        f"{label} {min(r['before_gpu_mb'] for r in found):,.0f} MB"
        for label, found in runs.items()
        if found and all("before_gpu_mb" in r for r in found)
    )


class Ops:
    """A context that counts the aten ops dispatched inside it (`n`); `paused()` leaves a part
    out (a checkpoint's copies)."""

    def __init__(self) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        counter = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                counter.n += counter.counting
                return func(*args, **(kwargs or {}))

        self.n = 0
        self.counting = True
        self._mode = Mode()

    def __enter__(self) -> Ops:
        self._mode.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._mode.__exit__(*exc)

    @contextmanager
    def paused(self) -> Iterator[None]:
        self.counting = False
        try:
            yield
        finally:
            self.counting = True


def measure(train, device: str = "cpu") -> dict:
    """Wall time, CPU time and peak RSS growth of one training call; on cuda also its peak GPU
    memory (`peak_gpu_mb`), with the wall clock waiting for the GPU."""
    if device == "cuda":
        before = rss_mb()
        with gpu_peak(device) as peak, clock(device) as took:
            train()
        return {**took, "peak_growth_mb": peak_rss_mb() - before, **peak}
    before = rss_mb()
    wall, cpu = time.perf_counter(), time.process_time()
    train()
    return {
        "wall": time.perf_counter() - wall,
        "cpu": time.process_time() - cpu,
        "peak_growth_mb": peak_rss_mb() - before,
    }


def trainer_call(trainer, model, examples, config, out, device: str = "cpu"):
    """`train(net=model, folder=out)`: one call of coevo's `trainer` (train_sft, train_dpo) as
    the speed benchmarks time it, with no resume and no model saved beside the final
    checkpoint. On cuda the model moves there now, before any clock (as TRL's trainer does in
    its constructor), and accelerate picks the device."""
    if device != "cpu":
        model.to("cuda")

    def train(net=model, folder=out) -> None:
        trainer(
            net,
            examples,
            config,
            output_dir=folder,
            device="cpu" if device == "cpu" else "auto",
            resume=False,
            save_model=False,
        )

    return train


def warm_up(run, folder, device: str = "cpu") -> float:
    """`run(folder)` once, untimed, `folder` removed after: a timed run after it finds the
    compilation done (`compute.compile`, a compiled decode step), as a long run pays it once.
    Its wall seconds."""
    import shutil

    with clock(device) as took:
        run(folder)
    shutil.rmtree(folder, ignore_errors=True)
    return took["wall"]


def trainer_arguments(
    parser: argparse.ArgumentParser, children: Sequence[str], *, compile: bool = True
) -> None:
    """The arguments the trainer benchmarks (model, DPO and GRPO speed) take alike: the device,
    `--compile` where ours can compile, `--no-record`, and the hidden two a child run gets
    (`run_child`)."""
    parser.add_argument(
        "--device",
        choices=DEVICES,
        default="cpu",
        help="cpu (fp32, CPU seconds) or cuda (bf16 mixed precision, wall seconds, peak GPU memory)",
    )
    if compile:
        parser.add_argument(
            "--compile",
            action="store_true",
            help="ours with compute.compile, after an untimed warm-up run that compiles (TRL as is)",
        )
    parser.add_argument("--no-record", action="store_true", help="do not write the results file")
    parser.add_argument("--child", choices=list(children), help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)


def run_child(
    script: str,
    which: str,
    extra: list[str],
    threads: int,
    memory: bool,
    device: str = "cpu",
) -> dict:
    """Run `script --child which ...` in a fresh process; its last stdout line is the result.

    `memory`: large freed buffers go back to the system, so peak RSS reflects need rather
    than allocation order (slower: used for the memory runs only). On cuda the child gets
    `--device cuda` and sees one GPU (the first, unless CUDA_VISIBLE_DEVICES says which):
    TRL's Trainer would otherwise spread its batches over every visible GPU.
    """
    cmd = [sys.executable, script, "--child", which, "--threads", str(threads), *extra]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    if memory:
        env["MALLOC_MMAP_THRESHOLD_"] = "65536"
    if device != "cpu":
        cmd += ["--device", device]
        env.setdefault("CUDA_VISIBLE_DEVICES", "0")
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if out.returncode != 0:
        sys.stderr.write(out.stdout + out.stderr)
        raise SystemExit(f"the {which} run failed (exit {out.returncode})")
    return json.loads(out.stdout.strip().splitlines()[-1])
