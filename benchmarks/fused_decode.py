"""Probes for issue 37's decode goal: do fused projections (q/k/v, gate/up), or the prefill
over slots, compiled, cut a decoding call enough to matter?

    python benchmarks/fused_decode.py --device cuda --model DIR     # a SmolLM2-shaped checkpoint
    python benchmarks/fused_decode.py                                # a fresh nano, on the CPU

A decode step of a small model at batch 64 is many small kernels (30 layers of 14 each on
SmolLM2-135M, 7 of them matrix products), so its time is their count more than their work.
`StaticDecoder(fuse=True)` (`coevo.policy.fused`) runs q, k and v as one matrix product and
gate and up as another: three of a layer's seven products fewer. The prefill (transformers'
forward over every prompt's new tokens, eager: the host launches each of its kernels, on a
GPU the time of an eager step) is launch-bound the same way, and no capture plays it:
`StaticDecoder(prefill=True)` runs it over the bucket's slots instead (`forward_fed`), compiled
as the step is, with every size symbolic, so that one graph serves every call (tested on the
CPU: one row or many, a session's new turn, another room).

This times `HFPolicy.generate` (decode `graphs` on cuda: compiled and captured; `static` on
the CPU, neither) on the opening prompts of --batch-size shop tasks, greedy, as
`rollout_speed.py`'s decode table does, four ways: as it is; with a second decoder over the
same module whose step fuses the projections; with a third whose prefill runs over the slots;
with a fourth doing both (each compiled and captured as the first). Each way is warmed up by
one call, then timed --repeats times (the median shown), then split once into its prefill and
its decode loop; the replies of each way are compared token by token with the first's. Prints
only. When a way pays on a GPU, `graphs` decoding takes it by default (`decoder_for`).

`--compile` compiles the ways on the CPU too (`graphs`: inductor, no capture there): the CPU's
figures for the compiled prefill (a nano at 64 opening prompts, 1 thread) are in
docs/models.md. Until the evening of 2026-11-27 the third way was transformers' whole model
under `torch.compile(dynamic=True)`: it compiled 4 graphs across a rollout's turns on the CPU
(about 7 minutes for SmolLM2-135M in float32), and until earlier that day failed at a second
turn.
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
    parser.add_argument(
        "--compile",
        action="store_true",
        help="on the CPU, decode `graphs` (compiled, inductor) rather than `static`",
    )
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
            decode="static" if cpu and not args.compile else "graphs",
        )
        plain = HFPolicy(model_dir, **load)
        # The same module, more decoders: compiled and captured as the first.
        options = ({"fuse": True}, {"prefill": True}, {"fuse": True, "prefill": True})
        others = [HFPolicy(model_dir, model=plain.model, **load) for _ in options]
    if plain.decoder is None:
        raise SystemExit("This model does not decode over fixed shapes (SDPA, full attention).")
    for policy, option in zip(others, options, strict=True):
        policy.decoder = StaticDecoder(
            policy.model, compile=plain.decoder.compile, capture=plain.decoder.capture, **option
        )
    groups = len(others[0].decoder.fused)
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
    labels = ("q/k/v and gate/up fused", "prefill over slots", "both")
    ways = (("as it is", plain), *zip(labels, others, strict=True))
    replies, splits, compiled = [], [], []
    cut = None
    try:
        for label, policy in ways:
            before = compiler_counts()

            def call(policy=policy):
                return [c.token_ids for c in policy.generate(prompts, sampling)]

            warm, times, reply, _ = timed_calls(call, args.repeats, args.device)
            sec, fast, slow = median(times), min(times), max(times)
            steps = max(map(len, reply))
            split = decode_split(args.device, lambda c=call, n=steps: (n, c()))
            graphs, breaks = (b - a for a, b in zip(before, compiler_counts(), strict=True))
            # A step that failed to compile or capture ran uncompiled: its time is not the probe's.
            fallback = policy.decoder.fallback if policy.decoder is not None else None
            replies.append(reply)  # the way whole, or not at all
            splits.append(f"{label}: {split}")
            compiled.append(f"{label} {graphs} graph(s), {breaks} graph break(s)")
            lines.append(
                f"| {label} | {warm:.1f} | {sec:.3f} | {fast:.3f}-{slow:.3f} | {steps} | "
                f"{1000 * sec / steps:.2f} | {fallback or 'none'} |"
            )
    except KeyboardInterrupt:  # the GPU kit's timeout (SIGINT): keep the ways measured
        cut = f"Cut off by an interrupt in the way '{label}': the ways above it are whole."
    lines += ["", *splits, ""]
    first = replies[0] if replies else []
    for (label, _), reply in zip(ways[1:], replies[1:], strict=False):
        pairs = list(zip(first, reply, strict=True))
        same = sum(x == y for a, b in pairs for x, y in zip(a, b, strict=False))
        total = sum(max(len(a), len(b)) for a, b in pairs)
        lines.append(f"Replies, {label}: {same:,} of {total:,} tokens as it is.")
    lines.append(f"Compiled by each way's calls: {'; '.join(compiled)}.")
    if cut is not None:
        lines.append(cut)
    print("\n".join(lines), flush=True)
    if cut is not None:
        raise SystemExit(130)
    return lines


if __name__ == "__main__":
    main()
