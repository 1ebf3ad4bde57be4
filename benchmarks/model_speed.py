"""Our SFT against TRL's SFTTrainer on a pretrained model: tokens/s and peak memory, same tokens.

    python benchmarks/model_speed.py                          # 64 sql episodes, SmolLM2-135M
    python benchmarks/model_speed.py --examples 4 --no-record # a smoke test: one step each

Setup: the packaged SmolLM2-135M-Instruct (`coevo.policy.models.get_model`, float32, ChatML
template with its default system message) and the expert trajectories of the first N train
tasks of the `sql` env. Ours trains `coevo.train.train_sft` on `sft_examples(...)`: the loss
is on the assistant tokens only (each reply's text and its `<|im_end|>`). TRL's SFTTrainer gets
the same conversations as a conversational dataset ("messages") with `assistant_only_loss=True`.
That needs `{% generation %}` markers, which the stock SmolLM2 template lacks and TRL cannot
patch in by itself (it raises "patching is not supported for this template"), so TRL gets the
stock template with the markers added around each assistant message's content and
`<|im_end|>` (`training_template`). The markers write no text: the parent checks that both
templates render every conversation to the same string, and the TRL child checks that its
tokenised dataset has the same token ids as ours and learns exactly the same positions; both
counts are printed and recorded. TRL SFT's own defaults that would change the work are set
like ours: no truncation (`max_length` above the longest example), fp32 (`bf16=False`), the
same gradient-checkpointing setting. Same batch size, epochs, learning rate, warm-up ratio and
constant schedule, AdamW, gradient clipping at 1.0. Ours groups examples of similar length into
batches (its only data order); TRL keeps its default (random order, each batch padded to its
longest).

Each trainer runs in fresh subprocesses (`--child`) with `--threads` torch threads (default 2,
the fastest for this model on a 2-core machine), so neither inherits the other's memory.
Speed and memory come from separate runs, measured the same way for both:
- tokens/s: the examples' tokens (every token of every sequence, padding excluded) times
  epochs, divided by the CPU time of the whole training call, and by its wall time. Tokenising
  is outside the call on both sides (ours renders before it, TRL in its constructor). Ours
  always writes a checkpoint (since the twenty-second session the weights alone) at the end of
  the run; that is inside its call, and its time is shown on its own line. TRL is run with
  `save_strategy="no"`.
- peak memory: the growth of the process's peak RSS (`ru_maxrss`) over its RSS just before the
  training call, in runs with MALLOC_MMAP_THRESHOLD_=65536 so that freed large buffers leave
  RSS (see benchmarks/dpo_speed.py for why).

With --repeats N every run is repeated N times (interleaved) and the best of each is kept.
The last two lines are `speedup: N.NN` (ours / TRL tokens per CPU second) and
`memory ratio: N.NN` (ours / TRL peak growth). Goal: speedup >= 1.3 at memory ratio <= 1.0.
The final checkpoint's time is also left out of ours on a line of its own (tokens/s and
speedup without it), as TRL writes none.

`--packing on|off|both` (default: SftConfig's default) runs ours with `packing` (each batch's
sequences in one row, no pads; `coevo.train.batches.collate_packed`), without it, or both side
by side in one invocation (then the last `speedup:` line is the default setting's). TRL keeps
its default padded batches either way.

`--compile` trains ours with `compute.compile` (its decoder layers compiled, `CompiledLayers`)
and first runs the same training untimed on a copy of the model, so that the timed run finds
the compilation done (a long run pays it once); the warm-up's seconds are printed apart. TRL
runs as always, uncompiled. Peak GPU memory is the timed run's; on the CPU the peak RSS growth
can hold the warm-up's (its copy of the model), an upper bound there.

    python benchmarks/model_speed.py --device cuda --examples 128 --batch-size 16

`--device cuda` (default cpu) runs both sides on the GPU in bf16 mixed precision (fp32
weights, bf16 autocast: ours `Compute(mixed_precision="bf16")` and `device="auto"`, TRL
`bf16=True`). There the clock is the wall clock, waiting for the GPU at both ends of the
training call (and of ours' final checkpoint); tokens/s and the speedup are per wall second.
Both sides run SDPA on the same kernels (`coevo.attention.sdpa_backends`: flash,
memory-efficient or math; not cuDNN, which plans anew for every new shape).
Memory is each side's peak GPU memory (`torch.cuda.max_memory_allocated`, reset just before
the call), taken in the speed runs: no separate memory runs. The GPU's name is printed and
recorded, in results/model_speed-cuda.md (CPU runs keep results/model_speed.md).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

from machine import check_device, describe, gpu_name, results_file
from measure import (
    clock,
    measure,
    resident_note,
    run_child,
    trainer_arguments,
    trainer_call,
    warm_up,
)

# The stock per-message expression of SmolLM2's ChatML template, and the assistant branch
# that replaces it for TRL: the same text, with the learned part inside generation markers.
STOCK_MESSAGE = (
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
)
MARKED_MESSAGE = (
    "{% if message['role'] == 'assistant' %}{{ '<|im_start|>assistant\n' }}{% generation %}"
    "{{ message['content'] + '<|im_end|>' }}{% endgeneration %}{{ '\n' }}"
    "{% else %}" + STOCK_MESSAGE + "{% endif %}"
)


def training_template(template: str) -> str:
    """The stock SmolLM2 template with `{% generation %}` markers around what the agent learns."""
    if STOCK_MESSAGE not in template:
        raise SystemExit(
            "This model's chat template is not the SmolLM2 ChatML one this benchmark knows how to "
            "mark for TRL's assistant_only_loss: extend training_template() for it."
        )
    return template.replace(STOCK_MESSAGE, MARKED_MESSAGE)


def messages(trajectory) -> list[dict[str, str]]:
    return [{"role": t.role, "content": t.text} for t in trajectory.turns]


def load_inputs(work: Path) -> tuple:
    """The tokenizer, a fresh copy of the model and the trajectories both trainers get."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from coevo.trajectory import Trajectory

    model_dir = (work / "model_dir").read_text()
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    lines = (work / "trajectories.jsonl").read_text().splitlines()
    return tok, model, [Trajectory.from_json(line) for line in lines]


def run_ours(work: Path, args: argparse.Namespace) -> dict:
    from coevo.train import Checkpoints, Compute, Optim, SftConfig, sft_examples, train_sft
    from coevo.train.loop import CheckpointDir

    cpu = args.device == "cpu"
    tok, model, trajectories = load_inputs(work)
    examples = sft_examples(trajectories, tok, max_length=args.max_length)
    out = work / f"ours-{os.getpid()}"
    config = SftConfig(
        epochs=args.epochs,
        batch_size=args.batch_size,
        packing=args.packing == "on",
        progress=False,
        optim=Optim(lr=args.lr, warmup_ratio=0.1, schedule="constant", max_grad_norm=1.0),
        compute=Compute(
            mixed_precision="no" if cpu else "bf16",
            gradient_checkpointing=args.checkpointing == "on",
            compile=args.compile,
        ),
        checkpoints=Checkpoints(save_every=10**9),
    )
    train = trainer_call(train_sft, model, examples, config, out, args.device)

    warm_wall = 0.0
    if args.compile:  # compiles on a copy, untimed: the timed run reuses the compilation
        warm_wall = warm_up(
            lambda folder: train(copy.deepcopy(model), folder),
            work / f"warm-{os.getpid()}",
            args.device,
        )

    # The loop always writes a checkpoint at its last step; time it to show it apart.
    saving = {"cpu": 0.0, "wall": 0.0}
    save = CheckpointDir.save

    def timed_save(self, step: int, epoch: int) -> None:
        with clock(args.device) as took:
            save(self, step, epoch)
        saving["cpu"] += took["cpu"]
        saving["wall"] += took["wall"]

    CheckpointDir.save = timed_save
    got = measure(train, args.device)
    shutil.rmtree(out, ignore_errors=True)  # a 135M checkpoint: 1.6 GB with its AdamW state
    return {
        **got,
        "save_cpu": saving["cpu"],
        "save_wall": saving["wall"],
        "warm_wall": warm_wall,
        "tokens": sum(len(e.input_ids) for e in examples),
        "learned": sum(sum(e.action_mask[1:]) for e in examples),
    }


def run_trl(work: Path, args: argparse.Namespace) -> dict:
    import torch
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    from coevo.attention import sdpa_backends
    from coevo.train import sft_examples

    tok, model, trajectories = load_inputs(work)
    ours = sft_examples(trajectories, tok, max_length=args.max_length)  # only to compare
    tok.chat_template = training_template(tok.chat_template)
    dataset = Dataset.from_list([{"messages": messages(t)} for t in trajectories])
    config = SFTConfig(
        output_dir=str(work / f"trl-{os.getpid()}"),
        assistant_only_loss=True,
        learning_rate=args.lr,
        num_train_epochs=args.epochs,
        per_device_train_batch_size=args.batch_size,
        warmup_steps=0.1,  # a float below 1 is a ratio of the steps
        lr_scheduler_type="constant_with_warmup",
        max_grad_norm=1.0,
        gradient_checkpointing=args.checkpointing == "on",
        max_length=args.max_length,
        use_cpu=args.device == "cpu",
        bf16=args.device == "cuda",
        report_to=[],
        save_strategy="no",
        logging_steps=10**9,
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=0,
    )
    trainer = SFTTrainer(model=model, args=config, train_dataset=dataset, processing_class=tok)
    rows = trainer.train_dataset
    same = all(
        list(row["input_ids"]) == list(e.input_ids)
        and [int(label != -100) for label in row["labels"]] == list(e.action_mask)
        for row, e in zip(rows, ours, strict=True)
    )
    with sdpa_backends(torch.device(args.device)):  # the kernels ours may use, no cuDNN
        got = measure(trainer.train, args.device)
    return {
        **got,
        "tokens": sum(len(row["input_ids"]) for row in rows),
        "learned": sum(sum(label != -100 for label in row["labels"][1:]) for row in rows),
        "same_as_ours": same,
    }


def child(
    which: str,
    work: Path,
    args: argparse.Namespace,
    checkpointing: str,
    memory: bool,
    packing: str = "off",
):
    extra = ["--work", str(work), "--checkpointing", checkpointing, "--packing", packing]
    extra += ["--epochs", str(args.epochs), "--batch-size", str(args.batch_size)]
    extra += ["--lr", str(args.lr), "--max-length", str(args.max_length)]
    extra += ["--compile"] if args.compile and which != "trl" else []
    return run_child(__file__, which, extra, args.threads, memory, args.device)


def prepare(work: Path, args: argparse.Namespace) -> dict:
    """Write the model's location and the trajectories for the children; describe them."""
    from transformers import AutoConfig, AutoTokenizer

    from coevo.envs import make
    from coevo.envs.conversation import expert_trajectory
    from coevo.policy.models import get_model, packaged
    from coevo.train import sft_examples

    model_dir = get_model(args.model)
    env = make("sql")
    trajectories = [expert_trajectory(env, task) for task in env.tasks("train")[: args.examples]]
    (work / "model_dir").write_text(str(model_dir))
    (work / "trajectories.jsonl").write_text("\n".join(t.to_json() for t in trajectories) + "\n")

    tok = AutoTokenizer.from_pretrained(model_dir)
    marked = training_template(tok.chat_template)
    for t in trajectories:
        stock = tok.apply_chat_template(messages(t), tokenize=False)
        if tok.apply_chat_template(messages(t), tokenize=False, chat_template=marked) != stock:
            raise SystemExit("the marked template renders a conversation differently: fix it")
    full = sft_examples(trajectories, tok)
    longest = max(len(e.input_ids) for e in full)
    if longest > args.max_length:
        raise SystemExit(
            f"the longest example has {longest} tokens, more than --max-length "
            f"{args.max_length}: raise it so that neither side cuts anything."
        )
    config = AutoConfig.from_pretrained(model_dir)
    return {
        "about": packaged(args.model).about,
        "vocab": config.vocab_size,
        "tokens": sum(len(e.input_ids) for e in full),
        "learned": sum(sum(e.action_mask[1:]) for e in full),
        "longest": longest,
        "n": len(full),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m", help="a packaged pretrained model")
    parser.add_argument("--examples", type=int, default=64, help="sql expert episodes")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--max-length", type=int, default=2048, help="must fit every example")
    parser.add_argument("--threads", type=int, default=2, help="torch threads per run")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument(
        "--checkpointing",
        choices=["on", "off", "both"],
        default="off",
        help="gradient checkpointing, set the same on both sides",
    )
    parser.add_argument(
        "--packing",
        choices=["on", "off", "both"],
        default=None,
        help="ours with sft.packing on, off, or both side by side (default: SftConfig's)",
    )
    trainer_arguments(parser, ["ours", "trl"])
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    if args.child:
        import torch

        torch.set_num_threads(args.threads)
        run = run_ours if args.child == "ours" else run_trl
        print(json.dumps(run(args.work, args)))
        return

    check_device(args.device)
    from rich.console import Console

    from coevo.train import SftConfig

    cpu = args.device == "cpu"
    console = Console(stderr=True)
    modes = ["off", "on"] if args.checkpointing == "both" else [args.checkpointing]
    auto = SftConfig().packing
    default = "on" if (cpu if auto is None else auto) else "off"  # None: packed on the CPU only
    other = "off" if default == "on" else "on"
    # Ours once per packing setting (the default last), then TRL: (name, packing) each.
    packings = [other, default] if args.packing == "both" else [args.packing or default]
    sides = [(f"ours-packing-{p}", p) for p in packings] + [("trl", "off")]
    # On cuda the speed runs also give the peak GPU memory: no separate memory runs.
    kinds = ("speed", "memory") if cpu else ("speed",)
    with tempfile.TemporaryDirectory(prefix="model_speed_") as tmp:
        work = Path(tmp)
        with console.status(f"loading {args.model} and the sql expert episodes"):
            info = prepare(work, args)
        results: dict[tuple[str, str, str], list[dict]] = {}
        for i in range(args.repeats):
            for mode in modes:
                for kind in kinds:
                    for name, packing in sides:
                        which = "trl" if name == "trl" else "ours"
                        label = f"{name}, checkpointing {mode}, {kind} run {i + 1}"
                        with console.status(f"training: {label}"):
                            got = child(which, work, args, mode, kind == "memory", packing)
                        results.setdefault((name, mode, kind), []).append(got)

    trl = results[("trl", modes[0], "speed")][0]
    ours = results[(sides[0][0], modes[0], "speed")][0]
    same = "identical" if trl["same_as_ours"] else "DIFFERENT"
    compute = "fp32 CPU" if cpu else f"bf16 mixed precision (fp32 weights) on {gpu_name()}"
    setup = (
        f"{info['n']} sql expert episodes (first train tasks), {info['about']}, vocab "
        f"{info['vocab']:,}; {args.epochs} epoch(s), batch {args.batch_size} sequences, "
        f"lr {args.lr:g}, 10% warm-up then constant, AdamW, clip 1.0, {compute}, "
        f"{args.threads} torch threads per run; {info['tokens']:,} tokens per epoch (mean "
        f"sequence {info['tokens'] / info['n']:.0f}, longest {info['longest']}); learned tokens "
        f"per epoch: ours {ours['learned']:,}, TRL {trl['learned']:,} ({same} token ids and "
        f"learned positions; TRL: assistant_only_loss=True with generation markers added to the "
        f"stock template); best of {args.repeats}"
    )
    if args.compile:
        setup += "; ours with its decoder layers compiled (compute.compile, warmed up untimed)"
    memory_column = "peak RSS growth MB" if cpu else "peak GPU memory MB"
    rows = [
        "| trainer | gradient checkpointing | CPU s | wall s | tokens/s (CPU) | "
        f"tokens/s (wall) | {memory_column} |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    notes, ratios = [], {}
    clock_kind = "cpu" if cpu else "wall"  # what the speedup divides by
    labels = {"trl": "TRL SFTTrainer"}
    labels.update({f"ours-packing-{p}": f"coevo train_sft, packing {p}" for p in packings})
    for mode in modes:
        best = {}
        for name, _ in sides:
            speed = results[(name, mode, "speed")]
            memory = results[(name, mode, kinds[-1])]
            best[name] = {
                "cpu": min(r["cpu"] for r in speed),
                "wall": min(r["wall"] for r in speed),
                "mb": min(r["peak_growth_mb" if cpu else "peak_gpu_mb"] for r in memory),
                "tokens": speed[0]["tokens"] * args.epochs,
            }
        trl_rate = best["trl"]["tokens"] / best["trl"][clock_kind]
        if not cpu:
            runs = {labels[name]: results[(name, mode, kinds[-1])] for name, _ in sides}
            notes.append(f"checkpointing {mode}: {resident_note(runs)}")
        for name, _ in sides:
            b, tokens = best[name], best[name]["tokens"]
            rows.append(
                f"| {labels[name]} | {mode} | {b['cpu']:.1f} | {b['wall']:.1f} | "
                f"{tokens / b['cpu']:,.0f} | {tokens / b['wall']:,.0f} | {b['mb']:.0f} |"
            )
            if name == "trl":
                continue
            speed = results[(name, mode, "speed")]
            # The same runs without the final checkpoint, which TRL does not write.
            unsaved = {k: min(r[k] - r[f"save_{k}"] for r in speed) for k in ("cpu", "wall")}
            notes.append(
                f"checkpointing {mode}, {labels[name]}: the final checkpoint took "
                f"{min(r['save_cpu'] for r in speed):.1f} s CPU, "
                f"{min(r['save_wall'] for r in speed):.1f} s wall; without it "
                f"{tokens / unsaved['cpu']:,.0f} tokens/s (CPU), "
                f"{tokens / unsaved['wall']:,.0f} (wall): speedup "
                f"{tokens / unsaved[clock_kind] / trl_rate:.2f}"
            )
            if args.compile:
                notes.append(
                    f"checkpointing {mode}, {labels[name]}: ours with compute.compile; its untimed "
                    f"warm-up run (compiling) took {min(r['warm_wall'] for r in speed):.1f} s wall"
                )
            ratios[(mode, labels[name])] = (
                (tokens / b[clock_kind]) / trl_rate,
                b["mb"] / best["trl"]["mb"],
            )
    print(setup)
    print(describe(args.device))
    print("\n".join(rows))
    print("\n".join(notes))
    for (mode, label), (speed_ratio, mem_ratio) in list(ratios.items())[:-1]:
        print(
            f"checkpointing {mode}, {label}: speedup {speed_ratio:.2f}, memory ratio "
            f"{mem_ratio:.2f}"
        )
    speedup, memory_ratio = list(ratios.values())[-1]
    if not args.no_record:
        record(setup, rows, notes, ratios, args.device)
    print(f"speedup: {speedup:.2f}")
    print(f"memory ratio: {memory_ratio:.2f}")


def record(setup: str, rows: list[str], notes: list[str], ratios: dict, device: str) -> None:
    """Append this run's figures to the device's results file (earlier runs are kept)."""
    stamp = time.strftime("%Y-%m-%d %H:%M")
    last_speedup, last_memory = ratios[list(ratios)[-1]]
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
            f"- checkpointing {mode}, {label}: speedup {r[0]:.2f} (goal >= 1.3), memory ratio "
            f"{r[1]:.2f} (goal <= 1.0)"
            + ("" if device == "cpu" else " (tokens per wall second, peak GPU memory)")
            for (mode, label), r in ratios.items()
        ),
        "",
        f"speedup: {last_speedup:.2f}",
        f"memory ratio: {last_memory:.2f}",
        "",
    ]
    on = "" if device == "cpu" else f" on {device}"
    header = (
        f"# Pretrained-model SFT speed{on}: coevo vs TRL\n\n"
        f"`python benchmarks/model_speed.py{'' if device == 'cpu' else f' --device {device}'}`: "
        "SFT tokens/s of `coevo.train.train_sft` and TRL's "
        "`SFTTrainer` on SmolLM2-135M-Instruct and the same sql expert episodes, loss on the same "
        "(assistant) tokens, in fresh subprocesses (see the script's docstring for the set-up). "
        "Goal: ours >= 1.3x TRL's tokens/s at <= its peak memory.\n\n## Runs\n"
    )
    results = results_file("model_speed", device)
    results.parent.mkdir(parents=True, exist_ok=True)
    text = results.read_text() if results.exists() else header
    results.write_text(text.rstrip("\n") + "\n\n" + "\n".join(block))


if __name__ == "__main__":
    main()
