"""Probes for issue 37's decode goal: do fused projections (q/k/v, gate/up), or a compiled
prefill, cut a decoding call enough to matter?

    python benchmarks/fused_decode.py --device cuda --model DIR     # a SmolLM2-shaped checkpoint
    python benchmarks/fused_decode.py                                # a fresh nano, on the CPU

A decode step of a small model at batch 64 is many small kernels (30 layers of 14 each on
SmolLM2-135M, 7 of them matrix products), so its time is their count more than their work.
`StaticDecoder(fuse=True)` (`coevo.policy.fused`) runs q, k and v as one matrix product and
gate and up as another: three of a layer's seven products fewer. The prefill (one eager forward
over every prompt's new tokens) is launch-bound the same way, and no capture plays it: a
compiled forward launches fewer, fused kernels.

This times `HFPolicy.generate` (decode `graphs` on cuda: compiled and captured; `static` on
the CPU) on the opening prompts of --batch-size shop tasks, greedy, as `rollout_speed.py`'s
decode table does, three ways: as it is; with a second decoder over the same module whose
step fuses the projections (`fuse=True`, compiled and captured as the first); and as it is
with the prefill's forwards run through `torch.compile` (shapes symbolic, as every turn's rows
and widths would need; the decode steps stay the decoder's). Each way is warmed up by one call,
then timed --repeats times (the median shown), then split once into its prefill and its
decode loop; the replies of each way are compared token by token with the first's. Prints
only. When fusing pays on a GPU, `graphs` decoding fuses by default (`decoder_for`).

The compiled prefill is timed on the decode table's prompts (no sessions, empty caches); a
rollout's later turns (cached tokens, other widths) compile it a few times more, measured on the
CPU (torch 2.13, SmolLM2-135M in float32, 8 shop episodes, eager decoding with the whole model
compiled): 4 graphs, about 7 minutes of compiling, and the prefill no faster (31.3 s against
32.0 and 32.5 uncompiled; the rollout 98.9 s against 67.5 and 71.2, its compiled eager decode
steps slower): on a CPU the matrix products are the time, so whether it pays is a GPU question.
(Until 2026-11-27 it failed outright at a second turn: the cache handed the compiler a buffer
and a view of it, one of them written.)
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from statistics import median

import torch
from machine import DEVICES, check_device, describe
from measure import timed_calls
from rollout_speed import decode_split, opening_prompts

from coevo.envs import make
from coevo.policy.base import Sampling
from coevo.policy.hf import HFPolicy
from coevo.policy.static_decode import StaticDecoder


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
        # The same module, a second decoder: compiled and captured as the first, fused.
        fused = HFPolicy(model_dir, model=plain.model, **load)
    if plain.decoder is None:
        raise SystemExit("This model does not decode over fixed shapes (SDPA, full attention).")
    fused.decoder = StaticDecoder(
        fused.model, compile=plain.decoder.compile, capture=plain.decoder.capture, fuse=True
    )
    groups = len(fused.decoder.fused)
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
