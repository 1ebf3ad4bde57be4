"""Our multi-turn DPO against TRL's DPOTrainer: tokens/s and peak memory on the same pairs.

    python benchmarks/dpo_speed.py                  # 64 pairs, 1 epoch, batch 4
    python benchmarks/dpo_speed.py --pairs 128 --repeats 3
    python benchmarks/dpo_speed.py --model smollm2-135m   # 16 pairs, the pretrained model

Setup (made locally, nothing downloaded): the `shop` env, a `coevo model init`-style nano model
(tokenizer trained on shop expert episodes) or, with `--model smollm2-135m`, the packaged
pretrained SmolLM2-135M-Instruct (`coevo.policy.models.get_model`; the same pairs, tokenised
by its tokenizer and ChatML template), and pairs of expert episode (chosen) vs a replayed
failure (rejected: the expert's search, then the first other product of the results bought
as is). Ours trains on the rendered pairs with the agent-token mask; TRL gets the same
conversations packed into its prompt / chosen / rejected message lists (prompt = the opening
user turn) with `precompute_ref_log_probs=True`. Same model, same pairs, batch, epochs,
learning rate, beta, warm-up and constant schedule; both on the CPU in fp32.

Each trainer runs in fresh subprocesses (`--child`), with `--threads` torch threads each (default:
1 for the nano model, the model's own setting for a pretrained one: 2 for SmolLM2-135M), so
neither inherits the other's memory, and thread contention cannot favour one. Speed and
memory come from separate runs, measured the same way for both trainers:
- tokens/s: the pair set's tokens (chosen + rejected, as rendered by coevo) times epochs,
  divided by the CPU time of the whole training call, reference log-probs included: ours
  computes them inside `train_dpo`, TRL 1.16 in its trainer's constructor, before `train()`,
  so that pass (`_precompute_ref_logps`) is timed on its own and added to TRL's time (its
  own line says how long it took). CPU time,
  not wall time, because this machine is shared: wall time would measure the neighbours
  (both are printed; on a quiet machine they agree). Ours always writes a checkpoint (the
  weights) at the end of the run, inside the call; its time is printed on its own line.
- peak memory: the growth of the process's peak RSS (`ru_maxrss`) over its RSS just before the
  training call: what training needs on top of the loaded model and data (the Python + torch
  baseline, several hundred MB for both, would only dilute the ratio). tracemalloc does not
  see torch's allocations, so RSS it is. glibc keeps freed memory in its heap and then RSS
  says more about allocation order than about need, so the memory runs set
  MALLOC_MMAP_THRESHOLD_=65536 (large buffers go back to the system when freed); that costs
  time, which is why speed is measured in runs without it.

TRL's DPOConfig turns gradient checkpointing on by default; ours leaves it off. Settings are
compared like with like (`--checkpointing on|off|both`, default on: TRL's default).

Ours computes the tokens a pair's two sides open with once (`dpo.shared_prefix`, on by
default; the setup line says what share of the tokens that is). `--rows` also runs ours with
it off, every side in full as TRL does, to show what that saves apart from the rest.

`--ops` adds one untimed run per trainer that counts the ops it dispatches per optimizer step
(`measure.Ops`: forward, backward, optimizer and the reference pass; ours' final checkpoint
left out): a figure of the code, the same on any machine, and on a GPU about the launches a step
makes, which is what a small model's step waits on there.

`--compile` trains ours with `compute.compile` (its decoder layers compiled, `CompiledLayers`)
and first runs the same training untimed on a copy of the model, so that the timed run finds
the compilation done (a long run pays it once); the warm-up's seconds are printed apart. TRL
runs as always, uncompiled. Peak GPU memory is the timed run's; on the CPU the peak RSS growth
can hold the warm-up's (its copy of the model), an upper bound there.

With --repeats N every run is repeated N times (interleaved) and the best of each is kept.
The last two lines are `speedup: N.NN` (ours / TRL tokens/s) and `memory ratio: N.NN`
(ours / TRL peak growth). Nano runs are recorded under "## Runs" in the results file, a
pretrained model's under "## Runs: NAME".

    python benchmarks/dpo_speed.py --device cuda --model smollm2-135m --pairs 64

`--device cuda` (default cpu) runs both sides on the GPU in bf16 mixed precision (fp32
weights, bf16 autocast: ours `Compute(mixed_precision="bf16")` and `device="auto"`, TRL
`bf16=True`). There the clock is the wall clock, waiting for the GPU at both ends of the
training call (and of ours' final checkpoint); tokens/s and the speedup are per wall second.
Both sides run SDPA on the same kernels (`coevo.attention.sdpa_backends`: flash,
memory-efficient or math; not cuDNN, which plans anew for every new shape). Memory is each
side's peak GPU memory (`torch.cuda.max_memory_allocated`, reset just before the call),
taken in the speed runs: no separate memory runs. The GPU's name is printed and recorded, in
results/dpo_speed-cuda.md, in the same sections (CPU runs keep results/dpo_speed.md).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import re
import shutil
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

from machine import check_device, describe, gpu_name, results_file
from measure import (
    Ops,
    clock,
    measure,
    resident_note,
    run_child,
    trainer_arguments,
    trainer_call,
    warm_up,
)

ITEM = re.compile(r"\[(B0[A-Z0-9]{8})\]")


def make_pairs(n: int):
    """Expert (reward 1) vs a worse replayed episode, for the first shop train tasks."""
    from coevo.envs import make
    from coevo.envs.conversation import expert_trajectory, replay
    from coevo.envs.react import format_reply
    from coevo.trajectory import Pair

    env = make("shop")
    pairs = []
    for task in env.tasks("train"):
        expert = expert_trajectory(env, task)
        replies = expert.agent_texts
        if expert.reward < 1.0 or len(expert.turns) < 3:
            continue
        results = expert.turns[2].text  # the observation after the expert's search
        chosen_item = re.search(r"click\[(B0[A-Z0-9]{8})\]", replies[1])
        others = [i for i in ITEM.findall(results) if not chosen_item or i != chosen_item[1]]
        if not others:
            continue
        wrong = [
            replies[0],
            format_reply(f"{others[0]} looks right; I open it.", f"click[{others[0]}]"),
            format_reply("Good enough; I buy it.", "click[buy now]"),
        ]
        rejected = replay(env, task, wrong, agent="perturbed")
        if rejected.reward < expert.reward:
            pairs.append(Pair(expert, rejected, "expert_vs_perturbed", weight=1.0))
        if len(pairs) == n:
            return env, pairs
    return env, pairs


def trl_rows(pairs) -> list[dict]:
    """Our conversations in TRL's conversational prompt / chosen / rejected layout."""

    def messages(turns):
        return [{"role": t.role, "content": t.text} for t in turns]

    return [
        {
            "prompt": messages(p.chosen.turns[:1]),
            "chosen": messages(p.chosen.turns[1:]),
            "rejected": messages(p.rejected.turns[1:]),
        }
        for p in pairs
    ]


def load_inputs(work: Path) -> tuple:
    """The tokenizer, a fresh copy of the model and the pairs both trainers get."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from coevo.trajectory import Pair

    tok = AutoTokenizer.from_pretrained(work / "model")
    model = AutoModelForCausalLM.from_pretrained(work / "model", dtype=torch.float32)
    pairs = [Pair.from_json(line) for line in (work / "pairs.jsonl").read_text().splitlines()]
    return tok, model, pairs


def run_ours(work: Path, args: argparse.Namespace, shared_prefix: bool = True) -> dict:
    from coevo.train import Checkpoints, Compute, DpoConfig, Optim, dpo_examples, train_dpo
    from coevo.train.loop import CheckpointDir

    cpu = args.device == "cpu"
    tok, model, pairs = load_inputs(work)
    examples = dpo_examples(pairs, tok)
    out = work / f"ours-{os.getpid()}"
    config = DpoConfig(
        beta=0.1,
        epochs=args.epochs,
        batch_size=args.batch_size,
        shared_prefix=shared_prefix,
        progress=False,
        optim=Optim(lr=args.lr, warmup_ratio=0.1, schedule="constant"),
        compute=Compute(
            mixed_precision="no" if cpu else "bf16",
            gradient_checkpointing=args.checkpointing == "on",
            compile=args.compile,
        ),
        checkpoints=Checkpoints(save_every=10**9),
    )
    train = trainer_call(train_dpo, model, examples, config, out, args.device)

    warm = {"warm_wall": 0.0}
    if args.compile:  # compiles on a copy, untimed: the timed run reuses the compilation
        warm["warm_wall"] = warm_up(
            lambda folder: train(copy.deepcopy(model), folder),
            work / f"warm-{os.getpid()}",
            args.device,
        )

    # The loop always writes a checkpoint at its last step (TRL here: none), the weights alone;
    # it is part of ours' time, and timed on its own to show how much (540 MB for a 135M model).
    saving = {"save_cpu": 0.0, "save_wall": 0.0}
    save = CheckpointDir.save
    ops = Ops() if args.ops else None

    def timed_save(self, step: int, epoch: int) -> None:
        with clock(args.device) as took, ops.paused() if ops else nullcontext():
            save(self, step, epoch)
        saving["save_cpu"] += took["cpu"]
        saving["save_wall"] += took["wall"]

    CheckpointDir.save = timed_save
    if ops:  # untimed: counting slows every op
        with ops:
            train()
        got = {"ops": ops.n}
    else:
        got = measure(train, args.device)
    shutil.rmtree(out, ignore_errors=True)
    return {**got, **saving, **warm}


def run_trl(work: Path, args: argparse.Namespace) -> dict:
    import torch
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    from coevo.attention import sdpa_backends

    tok, model, pairs = load_inputs(work)
    dataset = Dataset.from_list(trl_rows(pairs))
    config = DPOConfig(
        output_dir=str(work / f"trl-{os.getpid()}"),
        beta=0.1,
        learning_rate=args.lr,
        num_train_epochs=args.epochs,
        per_device_train_batch_size=args.batch_size,
        warmup_steps=0.1,  # a float below 1 is a ratio of the steps
        lr_scheduler_type="constant_with_warmup",
        precompute_ref_log_probs=True,
        gradient_checkpointing=args.checkpointing == "on",
        max_length=None,  # no truncation, as ours
        use_cpu=args.device == "cpu",
        bf16=args.device == "cuda",
        report_to=[],
        save_strategy="no",
        logging_steps=10**9,
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=0,
    )
    reference = {"ref_cpu": 0.0, "ref_wall": 0.0}
    precompute = DPOTrainer._precompute_ref_logps
    ops = Ops() if args.ops else None

    def timed_precompute(self, *args_, **kwargs):
        with clock(args.device) as took, ops or nullcontext():
            out = precompute(self, *args_, **kwargs)
        reference["ref_cpu"] += took["cpu"]
        reference["ref_wall"] += took["wall"]
        return out

    # TRL computes the reference log-probs in the constructor: timed there, added below.
    DPOTrainer._precompute_ref_logps = timed_precompute
    with sdpa_backends(torch.device(args.device)):  # the kernels ours may use, no cuDNN
        trainer = DPOTrainer(model=model, args=config, train_dataset=dataset, processing_class=tok)
        if ops:  # the reference pass counted above, in the constructor
            with ops:
                trainer.train()
            return {"ops": ops.n}
        got = measure(trainer.train, args.device)
    got["cpu"] += reference["ref_cpu"]
    got["wall"] += reference["ref_wall"]
    return {**got, **reference}


def child(which: str, work: Path, args: argparse.Namespace, checkpointing: str, kind: str) -> dict:
    extra = ["--work", str(work), "--checkpointing", checkpointing]
    extra += ["--ops"] if kind == "ops" else []
    extra += ["--epochs", str(args.epochs), "--batch-size", str(args.batch_size)]
    extra += ["--lr", str(args.lr)]
    extra += ["--compile"] if args.compile and which != "trl" else []
    return run_child(__file__, which, extra, args.threads, kind == "memory", args.device)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model",
        default="nano",
        help="nano (a fresh nano model, the default) or a packaged pretrained model: smollm2-135m",
    )
    parser.add_argument("--pairs", type=int, help="default: 64 (nano), 16 (pretrained)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, help="torch threads per run (default: see above)")
    parser.add_argument(
        "--checkpointing",
        choices=["on", "off", "both"],
        default="on",
        help="gradient checkpointing, set the same on both sides (TRL's default is on)",
    )
    parser.add_argument(
        "--rows",
        action="store_true",
        help="also run ours with shared prefixes off (every side in full, as TRL)",
    )
    parser.add_argument(
        "--ops",
        action="store_true",
        help="also count the ops each trainer dispatches per optimizer step (one more run each, "
        "untimed; what a GPU launches: benchmarks/measure.py)",
    )
    trainer_arguments(parser, ["ours", "ours-rows", "trl"])
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    if args.child:
        import torch

        torch.set_num_threads(args.threads)
        if args.child == "trl":
            print(json.dumps(run_trl(args.work, args)))
        else:
            print(json.dumps(run_ours(args.work, args, shared_prefix=args.child == "ours")))
        return

    check_device(args.device)
    from rich.console import Console

    from coevo.policy.models import ModelError, packaged

    cpu = args.device == "cpu"
    pretrained = args.model != "nano"
    if pretrained:
        try:
            spec = packaged(args.model)
        except ModelError as e:
            raise SystemExit(f"{e} (or nano)") from None
    if args.pairs is None:
        args.pairs = 16 if pretrained else 64
    if args.threads is None:
        args.threads = spec.cpu_threads if pretrained else 1
    console = Console(stderr=True)
    # "on" last: the closing speedup / memory ratio lines are for TRL's default setting.
    modes = ["off", "on"] if args.checkpointing == "both" else [args.checkpointing]
    # On cuda the speed runs also give the peak GPU memory: no separate memory runs.
    kinds = ("speed", "memory") if cpu else ("speed",)
    counted = ("ops",) if args.ops else ()
    with tempfile.TemporaryDirectory(prefix="dpo_speed_") as tmp:
        work = Path(tmp)
        with console.status(f"preparing the {args.model} model and the shop pairs"):
            from transformers import AutoTokenizer

            from coevo.render import render
            from coevo.train.batches import DpoExample, collate_forked

            env, pairs = make_pairs(args.pairs)
            if pretrained:
                info = link_pretrained(args.model, work / "model")
                model_label = f"{spec.about} ({info['parameters']:,} parameters"
            else:
                from coevo.policy.tiny import init_model

                info = init_model(env, "nano", work / "model", seed=0, max_tasks=200)
                model_label = f"nano model ({info['parameters']:,} parameters"
            (work / "pairs.jsonl").write_text("\n".join(p.to_json() for p in pairs) + "\n")
            tok = AutoTokenizer.from_pretrained(work / "model")
            rendered = [render(t, tok) for p in pairs for t in (p.chosen, p.rejected)]
            sides = zip(rendered[::2], rendered[1::2], strict=True)
            forked = collate_forked([DpoExample(c, r) for c, r in sides])
            shared = int(forked["forks"].lengths[:, 0].sum())
        tokens = sum(len(r.input_ids) for r in rendered) * args.epochs
        agent_share = sum(sum(r.action_mask) for r in rendered) * args.epochs / tokens
        trainers = ["ours", "ours-rows", "trl"] if args.rows else ["ours", "trl"]
        results: dict[tuple[str, str, str], list[dict]] = {}
        for i in range(args.repeats):
            for mode in modes:
                for kind in kinds + (counted if i == 0 else ()):
                    for which in trainers:
                        label = f"{which}, checkpointing {mode}, {kind} run {i + 1}"
                        with console.status(f"training: {label}"):
                            got = child(which, work, args, mode, kind)
                        results.setdefault((which, mode, kind), []).append(got)

    setup = (
        f"{len(pairs)} shop pairs (expert vs perturbed), {model_label}, vocab {info['vocab']}), "
        f"{args.epochs} epoch(s), batch {args.batch_size} pairs, {tokens:,} tokens "
        f"({agent_share:.0%} agent tokens; the prefixes pairs share, computed once by ours: "
        f"{shared * args.epochs / tokens:.0%}), mean sequence "
        f"{tokens / args.epochs / len(rendered):.0f} tokens, {args.threads} torch thread(s) per "
        f"run, best of {args.repeats}"
    )
    if not cpu:
        setup += f"; bf16 mixed precision (fp32 weights) on {gpu_name()}"
    if args.compile:
        setup += "; ours with its decoder layers compiled (compute.compile, warmed up untimed)"
    memory_column = "peak RSS growth MB" if cpu else "peak GPU memory MB"
    rows = [
        "| trainer | gradient checkpointing | CPU s | wall s | tokens/s (CPU) | "
        f"tokens/s (wall) | {memory_column} |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    clock_kind = "cpu" if cpu else "wall"  # what the speedup divides by
    ratios, notes = {}, []
    labels = {
        "ours": "coevo train_dpo",
        "ours-rows": "coevo train_dpo, shared prefixes off",
        "trl": "TRL DPOTrainer",
    }
    for mode in modes:
        best = {}
        for which in trainers:
            label = labels[which]
            speed = results[(which, mode, "speed")]
            memory = results[(which, mode, kinds[-1])]
            b = best[which] = {
                "cpu": min(r["cpu"] for r in speed),
                "wall": min(r["wall"] for r in speed),
                "mb": min(r["peak_growth_mb" if cpu else "peak_gpu_mb"] for r in memory),
            }
            rows.append(
                f"| {label} | {mode} | {b['cpu']:.1f} | {b['wall']:.1f} | "
                f"{tokens / b['cpu']:,.0f} | {tokens / b['wall']:,.0f} | {b['mb']:.0f} |"
            )
        saves = results[("ours", mode, "speed")]
        notes.append(
            f"checkpointing {mode}: of ours' time, its final checkpoint took "
            f"{min(r['save_cpu'] for r in saves):.1f} s CPU, "
            f"{min(r['save_wall'] for r in saves):.1f} s wall"
        )
        if args.compile:
            notes.append(
                f"checkpointing {mode}: ours with compute.compile; its untimed warm-up run "
                f"(compiling) took {min(r['warm_wall'] for r in saves):.1f} s wall"
            )
        if not cpu:
            runs = {labels[w]: results[(w, mode, kinds[-1])] for w in trainers}
            notes.append(f"checkpointing {mode}: {resident_note(runs)}")
        refs = results[("trl", mode, "speed")]
        notes.append(
            f"checkpointing {mode}: of TRL's time, its reference pass (in its constructor) took "
            f"{min(r['ref_cpu'] for r in refs):.1f} s CPU, "
            f"{min(r['ref_wall'] for r in refs):.1f} s wall"
        )
        if args.ops:
            steps = math.ceil(len(pairs) / args.batch_size) * args.epochs
            counts = {w: results[(w, mode, "ops")][0]["ops"] / steps for w in trainers}
            notes.append(
                f"checkpointing {mode}: ops dispatched per optimizer step, the reference pass "
                "included, ours' final checkpoint left out (`--ops`; "
                f"{'views and optimizer included' if cpu else 'on cuda'}): "
                + ", ".join(f"{labels[w]} {n:,.0f}" for w, n in counts.items())
                + f" (ours / TRL {counts['ours'] / counts['trl']:.2f})"
            )
        if args.rows:
            what = "CPU" if cpu else "wall"
            notes.append(
                f"checkpointing {mode}: shared prefixes computed once cut ours' {what} time by "
                f"{1 - best['ours'][clock_kind] / best['ours-rows'][clock_kind]:.0%} "
                f"({best['ours-rows'][clock_kind] / best['ours'][clock_kind]:.2f}x)"
            )
        ratios[mode] = (
            # = ours / TRL tokens per CPU second (on cuda: per wall second)
            best["trl"][clock_kind] / best["ours"][clock_kind],
            best["ours"]["mb"] / best["trl"]["mb"],
        )
    print(setup)
    print(describe(args.device))
    print("\n".join(rows))
    print("\n".join(notes))
    for mode in modes[:-1]:
        print(
            f"checkpointing {mode}: speedup {ratios[mode][0]:.2f}, memory ratio {ratios[mode][1]:.2f}"
        )
    speedup, memory_ratio = ratios[modes[-1]]
    if not args.no_record:
        heading = f"## Runs: {args.model}" if pretrained else "## Runs"
        record(setup, rows, notes, ratios, heading, args.device)
    print(f"speedup: {speedup:.2f}")
    print(f"memory ratio: {memory_ratio:.2f}")


def link_pretrained(name: str, out: Path) -> dict:
    """Point `out` at the converted checkpoint of pretrained model `name`; its size and vocab."""
    from transformers import AutoModelForCausalLM
    from transformers.utils.logging import disable_progress_bar

    from coevo.policy.models import get_model

    path = get_model(name)
    out.symlink_to(path, target_is_directory=True)
    disable_progress_bar()
    model = AutoModelForCausalLM.from_pretrained(path)
    parameters = sum(p.numel() for p in model.parameters())  # tied embeddings counted once
    return {"parameters": parameters, "vocab": model.config.vocab_size}


def add_to_section(text: str, heading: str, block: str) -> str:
    """`text` with `block` added at the end of its `heading` section (made at the end if new)."""
    lines = text.rstrip("\n").split("\n")
    if heading not in lines:
        return "\n".join(lines) + f"\n\n{heading}\n\n{block}"
    start = lines.index(heading) + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    out = "\n".join(lines[:end]).rstrip("\n") + "\n\n" + block.rstrip("\n") + "\n"
    rest = "\n".join(lines[end:])
    return out + (f"\n{rest}\n" if rest else "")


def record(
    setup: str,
    rows: list[str],
    notes: list[str],
    ratios: dict[str, tuple[float, float]],
    heading: str,
    device: str = "cpu",
) -> None:
    """Add this run's figures at the end of section `heading` of the device's results file."""
    stamp = time.strftime("%Y-%m-%d %H:%M")
    block = [
        f"### {stamp}",
        "",
        f"- setup: {setup}",
        f"- machine: {describe(device)}",
        "",
        *rows,
        "",
        *(f"- {note}" for note in notes),
        *(
            f"- checkpointing {mode}: speedup {r[0]:.2f} (goal >= 1.3), memory ratio {r[1]:.2f} "
            "(goal <= 1.0)"
            + ("" if device == "cpu" else " (tokens per wall second, peak GPU memory)")
            for mode, r in ratios.items()
        ),
        "",
    ]
    results = results_file("dpo_speed", device)
    on = "" if device == "cpu" else f" on {device}"
    results.parent.mkdir(parents=True, exist_ok=True)
    text = results.read_text() if results.exists() else f"# DPO speed{on}: coevo vs TRL\n"
    results.write_text(add_to_section(text, heading, "\n".join(block)))


if __name__ == "__main__":
    main()
