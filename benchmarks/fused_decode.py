"""Probes for issue 37's decode goal: would fusing the projections that read the same input
(q/k/v, gate/up), or compiling the prefill, cut a decoding call enough to matter?

    python benchmarks/fused_decode.py --device cuda --model DIR     # a SmolLM2-shaped checkpoint
    python benchmarks/fused_decode.py                                # a fresh nano, on the CPU

A decode step of a small model at batch 64 is many small kernels (30 layers of about a dozen
each on SmolLM2-135M), so its time is their count more than their work. Fusing q, k and v into
one matrix product and gate and up into another takes three of a layer's seven products away.
The prefill (one eager forward over every prompt's new tokens) is launch-bound the same way,
and no capture plays it: a compiled forward launches fewer, fused kernels.

This times `HFPolicy.generate` (decode `graphs` on cuda: compiled and captured; `static` on
the CPU) on the opening prompts of --batch-size shop tasks, greedy, as `rollout_speed.py`'s
decode table does, three ways: as it is; on a second copy of the model whose fused layers read
one matrix product (its weights copied once, before the first call: a probe, not a way to
train); and as it is with the prefill's forwards run through `torch.compile` (shapes symbolic,
as every turn's rows and widths would need; the decode steps stay the decoder's). Each way is
warmed up by one call, then timed --repeats times (the median shown), then split once into its
prefill and its decode loop; the replies of each way are compared token by token with the
first's. Prints only.

The compiled prefill is timed on the decode table's prompts (no sessions, empty caches); a
rollout's later turns (cached tokens, other widths) compile it a few times more, measured on the
CPU (torch 2.13, SmolLM2-135M in float32, 8 shop episodes, eager decoding with the whole model
compiled): 4 graphs, about 7 minutes of compiling, and the prefill no faster (31.3 s against
32.0 and 32.5 uncompiled; the rollout 98.9 s against 67.5 and 71.2, its compiled eager decode
steps slower): on a CPU the matrix products are the time, so whether it pays is a GPU question. (Until 2026-11-27 it failed outright at a second turn: the cache handed the
compiler a buffer and a view of it, one of them written.)
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from statistics import median

import torch
from machine import DEVICES, check_device, describe
from measure import timed_calls
from rollout_speed import decode_split, opening_prompts

from coevo.envs import make
from coevo.policy.base import Sampling
from coevo.policy.hf import HFPolicy

GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))
"""Linear layers of one module that read the same input, called in this order."""


def fuse(linears: Sequence[torch.nn.Linear]) -> None:
    """Make `linears` (called in order, on the same input) run one matrix product: the first
    computes every output and keeps the others' parts for their calls."""
    weight = torch.cat([layer.weight.detach() for layer in linears])
    biases = [layer.bias for layer in linears]
    bias = None if biases[0] is None else torch.cat([b.detach() for b in biases])  # type: ignore[union-attr]
    sizes = [layer.out_features for layer in linears]
    parts: list[torch.Tensor] = []

    def first(x: torch.Tensor) -> torch.Tensor:
        parts[:] = torch.nn.functional.linear(x, weight, bias).split(sizes, dim=-1)
        return parts[0]

    def part(i: int) -> Callable[[torch.Tensor], torch.Tensor]:
        return lambda x: parts[i]

    linears[0].forward = first  # type: ignore[method-assign]
    for i, layer in enumerate(linears[1:], start=1):
        layer.forward = part(i)  # type: ignore[method-assign]


def fuse_model(model: torch.nn.Module) -> int:
    """Fuse every group of `GROUPS` found in `model`'s modules; returns how many."""
    count = 0
    for module in model.modules():
        for names in GROUPS:
            found = [getattr(module, n, None) for n in names]
            if all(isinstance(f, torch.nn.Linear) for f in found):
                fuse(found)  # type: ignore[arg-type]
                count += 1
    return count


def compile_prefill(policy: HFPolicy) -> None:
    """Run `policy`'s prefill through `torch.compile`, its shapes symbolic from the start (a
    rollout's every turn feeds other rows and widths). Its decode steps stay the decoder's,
    which holds the module itself; a probe, not a setting."""
    policy.model = torch.compile(policy.model, dynamic=True)


def compiler_counts() -> tuple[int, int]:
    """Graphs dynamo has compiled and graph breaks it has met, in this process so far."""
    from torch._dynamo.utils import counters

    return counters["stats"]["unique_graphs"], sum(counters["graph_break"].values())


def main(argv: list[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a checkpoint dir; default: a fresh nano")
    parser.add_argument("--device", choices=DEVICES, default="cpu")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch's CPU threads (default 1)")
    args = parser.parse_args(argv)
    check_device(args.device)
    torch.set_num_threads(args.threads)
    cpu = args.device == "cpu"
    env = make("shop")
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(args.model) if args.model else Path(tmp) / "nano"
        if args.model is None:
            from coevo.policy.tiny import init_model

            init_model(env, "nano", model_dir, seed=0)
        load = dict(
            dtype="float32" if cpu else "bfloat16",
            device=args.device,
            decode="static" if cpu else "graphs",
        )
        plain = HFPolicy(model_dir, **load)
        fused = HFPolicy(model_dir, **load)
    groups = fuse_model(fused.model)
    if not groups:
        raise SystemExit("No q/k/v or gate/up projections found to fuse in this model.")
    tasks = env.tasks("train")[: args.batch_size]
    prompts = opening_prompts(plain, env, tasks, args.max_new_tokens)
    sampling = Sampling(temperature=0.0, max_new_tokens=args.max_new_tokens, logprobs=True)
    lines = [
        f"Decode probes: {describe(args.device)}; decode {plain.decode}; {len(prompts)} shop "
        f"opening prompts, greedy, max_new_tokens {args.max_new_tokens}; {groups} groups fused; "
        f"each way warmed up once, then the median of {args.repeats} calls.",
        "",
        "| way | warm-up s | seconds | fastest-slowest s | decode steps | ms per decode step "
        "| the decoder's fallback |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    ways = (
        ("as it is", plain, None),
        ("q/k/v and gate/up fused", fused, None),
        ("prefill compiled", plain, compile_prefill),  # last: it changes `plain`
    )
    replies, splits, compiled = [], [], ""
    for label, policy, change in ways:
        before = compiler_counts()
        if change is not None:
            change(policy)

        def call(policy=policy):
            return [c.token_ids for c in policy.generate(prompts, sampling)]

        warm, times, reply, _ = timed_calls(call, args.repeats, args.device)
        sec, fast, slow = median(times), min(times), max(times)
        steps = max(map(len, reply))
        replies.append(reply)
        splits.append(f"{label}: {decode_split(args.device, lambda c=call, n=steps: (n, c()))}")
        if change is not None:
            graphs, breaks = (b - a for a, b in zip(before, compiler_counts(), strict=True))
            compiled = f"The prefill compiled into {graphs} graph(s), {breaks} graph break(s)."
        # A step that failed to compile or capture ran uncompiled: its time is not the probe's.
        fallback = policy.decoder.fallback if policy.decoder is not None else None
        lines.append(
            f"| {label} | {warm:.1f} | {sec:.3f} | {fast:.3f}-{slow:.3f} | {steps} | "
            f"{1000 * sec / steps:.2f} | {fallback or 'none'} |"
        )
    lines += ["", *splits, ""]
    first = replies[0]
    for (label, _, _), reply in zip(ways[1:], replies[1:], strict=True):
        pairs = list(zip(first, reply, strict=True))
        same = sum(x == y for a, b in pairs for x, y in zip(a, b, strict=False))
        total = sum(max(len(a), len(b)) for a, b in pairs)
        lines.append(f"Replies, {label}: {same:,} of {total:,} tokens as it is.")
    lines.append(compiled)
    print("\n".join(lines))
    return lines


if __name__ == "__main__":
    main()
