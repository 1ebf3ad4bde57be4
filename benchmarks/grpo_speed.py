"""Our GRPO step against TRL's GRPOTrainer: tokens/s of the rollout and of the update.

    python benchmarks/grpo_speed.py                    # 4 prompts x 8 samples, 32 tokens, 3 steps
    python benchmarks/grpo_speed.py --prompts 8 --steps 5 --repeats 3

The comparison is single-turn, the part TRL's trainer expresses the same way: TRL's
environment loop is a tool-calling protocol, not our text env contract, so a shop episode of
several turns has no counterpart there. Both trainers get the same prompts (the opening user
message of the first shop train tasks: the env's instructions and its search page, rendered by
the model's chat template), the same model (a `coevo model init`-style nano model, tokenizer
trained on shop episodes), K samples per prompt, the same number of new tokens, temperature
1, the same reward function of the reply text (the share of the letter "a", capped at 6: a
dense toy reward, so groups have signal), group-std advantages, clip 0.2 / 0.28, token-mean
over the batch (TRL: `loss_type="dapo"`), the same KL coefficient (a reference model on both
sides when > 0), lr and constant schedule, one optimizer step per rollout batch accumulated
over micro-batches of the same size, fp32 on the CPU. Ours plays through `rollout` (lockstep
episodes of one step each, HFPolicy with its own decoding loop), TRL through
`model.generate`.

Each trainer runs in a fresh subprocess (`--child`) with `--threads` torch threads. Timed in
both: the whole training call (CPU and wall seconds), and inside it the generation alone
(ours: the `play` callback; TRL: `_generate_single_turn`). update = whole - generation: for
both it holds the reward, the reference and policy forward passes, the backward pass and the
optimizer step; ours also renders the episodes and writes its checkpoint at the end (timed on
its own line). tokens/s: rollout = new tokens / generation CPU seconds; update = (prompt +
new tokens) of every sample / update CPU seconds. CPU time rather than wall time, because this
machine is shared (wall time is printed too). The first step's one-time costs are included.

    python benchmarks/grpo_speed.py --device cuda --prompts 16 --samples 8 --micro-batch 16

`--device cuda` (default cpu) runs both sides on the GPU in bf16 mixed precision (fp32
weights, bf16 autocast, generation included: ours `Compute(mixed_precision="bf16")` and
`device="auto"`, TRL `bf16=True`). There every timed region (the whole call, the generation)
is timed on the wall clock, waiting for the GPU at both of its ends, and the rates and
speedups are per wall second; each side's peak GPU memory (`torch.cuda.max_memory_allocated`,
reset just before the call) is shown too. The GPU's name is printed and recorded, in
results/grpo_speed-cuda.md (CPU runs keep results/grpo_speed.md).

`--decode` is ours' decoding loop (`model.decode`), by default `auto`: graphs on cuda, the eager
loop on the CPU. Graphs compile the decode step once per process (tens of seconds with
inductor); ours then first trains one untimed step of its own, which compiles it (its seconds
printed apart), so that the timed steps show the rate of a run that has paid it, as a long run
does. `--decode eager` times the loop before graphs were the cuda default.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from machine import check_device, describe, gpu_name, results_file
from measure import clock, measure, run_child, trainer_arguments, warm_up

LETTER = "a"


def reward_of(text: str) -> float:
    """The toy reward both trainers use: how often the reply writes the letter a (6 or more: 1)."""
    return min(1.0, text.count(LETTER) / 6)


class OneReplyEnv:
    """Single-turn episodes: the task's prompt, one reply, scored by `reward_of`."""

    name = "one_reply"
    max_steps = 1

    def __init__(self, instruction_prompt: str = "") -> None:
        self.instruction_prompt = instruction_prompt

    def reset(self, task, *, seed=None):
        return task.data["observation"], {}

    def step(self, action: str):
        from coevo.envs.base import StepResult

        return StepResult("Done.", reward_of(action), True, False, {})

    def close(self) -> None:
        pass


def make_prompts(n: int, work: Path) -> None:
    """The first `n` shop train tasks' opening observations, and the env's instructions."""
    from coevo.envs import make
    from coevo.policy.tiny import init_model

    env = make("shop")
    tasks = env.tasks("train")[:n]
    prompts = [{"id": t.id, "observation": env.reset(t)[0]} for t in tasks]
    data = {"instruction_prompt": env.instruction_prompt, "prompts": prompts}
    (work / "prompts.json").write_text(json.dumps(data))
    init_model(env, "nano", work / "model", seed=0, max_tasks=200)


def load_prompts(work: Path) -> tuple[str, list[dict]]:
    data = json.loads((work / "prompts.json").read_text())
    return data["instruction_prompt"], data["prompts"]


def run_ours(work: Path, args: argparse.Namespace) -> dict:
    import torch
    from transformers import AutoTokenizer

    from coevo.methods.grpo import hf_player
    from coevo.policy.hf import resolve_decode
    from coevo.render import render
    from coevo.run.recipe import GrpoSection, SamplingSection
    from coevo.train import Checkpoints, Compute, Optim
    from coevo.train.grpo import train_grpo
    from coevo.train.loop import CheckpointDir
    from coevo.trajectory import Task

    instructions, prompts = load_prompts(work)
    tasks = [Task(p["id"], "one_reply", "train", "", {"observation": p["observation"]})
             for p in prompts]  # fmt: skip
    config = GrpoSection(
        steps=args.steps,
        tasks_per_step=len(tasks),
        samples=args.samples,
        sampling=SamplingSection(temperature=1.0, max_new_tokens=args.new_tokens),
        rollout_batch_size=len(tasks) * args.samples,
        micro_batch_size=args.micro_batch,
        kl_coef=args.beta,
        progress=False,
        optim=Optim(lr=args.lr, warmup_ratio=0.0, schedule="constant"),
        # auto: none on the CPU, as always; on cuda bf16 is asked for by name.
        compute=Compute(mixed_precision="auto" if args.device == "cpu" else "bf16"),
        checkpoints=Checkpoints(save_every=10**9, save_every_minutes=0),
    )
    tokenizer = AutoTokenizer.from_pretrained(work / "model")
    out = work / f"ours-{os.getpid()}"
    device = "cpu" if args.device == "cpu" else "auto"  # auto: accelerate's choice, the GPU

    def train(play, config=config, folder=out):
        return train_grpo(
            str(work / "model"),
            tasks,
            play,
            config,
            output_dir=folder,
            tokenizer=tokenizer,
            device=device,
            resume=False,
            save_model=False,
        )

    def player():
        return hf_player(
            work / "model", lambda: OneReplyEnv(instructions), config, decode=args.decode
        )

    # A compiled decode step (graphs, the cuda default) compiles once per process, as a long
    # run pays it once: one step of the same training compiles it untimed, every later model
    # of the same shape reuses it.
    warm_wall = 0.0
    if resolve_decode(args.decode, torch.device(args.device)) == "graphs":
        warm_wall = warm_up(
            lambda folder: train(player(), replace(config, steps=1), folder),
            work / f"warm-{os.getpid()}",
            args.device,
        )
    played_by = player()
    timed = {"gen_cpu": 0.0, "gen_wall": 0.0, "new_tokens": 0, "tokens": 0}

    def play(model, step_tasks, *, step, seed):
        with clock(args.device) as took:
            played = played_by(model, step_tasks, step=step, seed=seed)
        timed["gen_cpu"] += took["cpu"]
        timed["gen_wall"] += took["wall"]
        for t in played:
            timed["new_tokens"] += sum(len(turn.token_ids or ()) for turn in t.turns)
            timed["tokens"] += len(render(t, tokenizer).input_ids)
        return played

    # The loop always writes a checkpoint at its last step, the weights alone (TRL here: none).
    saving = {"save_cpu": 0.0, "save_wall": 0.0}
    save = CheckpointDir.save

    def timed_save(self, step: int, epoch: int) -> None:
        with clock(args.device) as took:
            save(self, step, epoch)
        saving["save_cpu"] += took["cpu"]
        saving["save_wall"] += took["wall"]

    CheckpointDir.save = timed_save
    got = measure(lambda: train(play), args.device)
    shutil.rmtree(out, ignore_errors=True)
    return {**got, **timed, **saving, "warm_wall": warm_wall}


def run_trl(work: Path, args: argparse.Namespace) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from coevo.envs.conversation import opening_message

    instructions, prompts = load_prompts(work)
    env = OneReplyEnv(instructions)
    rows = [{"prompt": [{"role": "user", "content": opening_message(env, p["observation"])}]}
            for p in prompts]  # fmt: skip
    tokenizer = AutoTokenizer.from_pretrained(work / "model")
    model = AutoModelForCausalLM.from_pretrained(work / "model", dtype=torch.float32)
    batch = len(prompts) * args.samples

    def reward(completions, **_):
        return [reward_of(c[0]["content"]) for c in completions]

    config = GRPOConfig(
        output_dir=str(work / f"trl-{os.getpid()}"),
        per_device_train_batch_size=args.micro_batch,
        gradient_accumulation_steps=batch // args.micro_batch,
        num_generations=args.samples,
        max_completion_length=args.new_tokens,
        temperature=1.0,
        beta=args.beta,
        epsilon=0.2,
        epsilon_high=0.28,
        loss_type="dapo",
        scale_rewards="group",
        num_iterations=1,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        max_steps=args.steps,
        use_cpu=args.device == "cpu",
        bf16=args.device == "cuda",
        report_to=[],
        save_strategy="no",
        logging_steps=10**9,
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=0,
    )
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[reward],
        args=config,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
    )
    timed = {"gen_cpu": 0.0, "gen_wall": 0.0, "new_tokens": 0, "tokens": 0}
    generate = trainer._generate_single_turn

    def timed_generate(prompt_ids, *rest, **kw):
        with clock(args.device) as took:
            completion_ids, logprobs = generate(prompt_ids, *rest, **kw)
        timed["gen_cpu"] += took["cpu"]
        timed["gen_wall"] += took["wall"]
        timed["new_tokens"] += sum(len(c) for c in completion_ids)
        timed["tokens"] += sum(len(p) for p in prompt_ids) + sum(len(c) for c in completion_ids)
        return completion_ids, logprobs

    trainer._generate_single_turn = timed_generate
    got = measure(trainer.train, args.device)
    return {**got, **timed}


def child(which: str, work: Path, args: argparse.Namespace) -> dict:
    extra = ["--work", str(work), "--steps", str(args.steps), "--samples", str(args.samples)]
    extra += ["--new-tokens", str(args.new_tokens), "--micro-batch", str(args.micro_batch)]
    extra += ["--beta", str(args.beta), "--lr", str(args.lr), "--decode", args.decode]
    return run_child(__file__, which, extra, args.threads, memory=False, device=args.device)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=4, help="prompts (tasks) per step")
    parser.add_argument("--samples", type=int, default=8, help="K, samples per prompt")
    parser.add_argument("--new-tokens", type=int, default=32, help="new tokens per sample")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--micro-batch", type=int, default=8, help="samples per forward pass")
    parser.add_argument("--beta", type=float, default=0.001, help="KL coefficient, both sides")
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument(
        "--decode",
        choices=("auto", "eager", "static", "graphs"),
        default="auto",
        help="ours' decoding loop (model.decode; auto: graphs on cuda, eager on the CPU); "
        "graphs first compile in an untimed step of their own",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run")
    parser.add_argument("--note", default="", help="a line recorded with the run")
    trainer_arguments(parser, ["ours", "trl"], compile=False)
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    if args.child:
        import torch

        torch.set_num_threads(args.threads)
        run = run_ours if args.child == "ours" else run_trl
        print(json.dumps(run(args.work, args)))
        return
    if (args.prompts * args.samples) % args.micro_batch:
        raise SystemExit("--prompts x --samples must be a multiple of --micro-batch")
    check_device(args.device)

    from rich.console import Console

    console = Console(stderr=True)
    results: dict[str, list[dict]] = {"ours": [], "trl": []}
    with tempfile.TemporaryDirectory(prefix="grpo_speed_") as tmp:
        work = Path(tmp)
        with console.status("preparing the nano model and the shop prompts"):
            make_prompts(args.prompts, work)
        for i in range(args.repeats):
            for which in ("ours", "trl"):
                with console.status(f"training: {which}, run {i + 1}"):
                    results[which].append(child(which, work, args))

    cpu = args.device == "cpu"
    # What the table and speedups divide by: CPU seconds on the (shared) CPU, wall on a GPU.
    t, other = ("cpu", "wall") if cpu else ("wall", "cpu")
    name, other_name = ("CPU", "wall") if cpu else ("wall", "CPU")
    compute = "fp32 CPU" if cpu else f"bf16 mixed precision (fp32 weights) on {gpu_name()}"
    setup = (
        f"{args.prompts} shop prompts x K={args.samples} samples, {args.new_tokens} new tokens, "
        f"{args.steps} steps, micro-batch {args.micro_batch}, KL coefficient {args.beta}, "
        f"nano model (random init), {compute}, ours decoding {args.decode}, "
        f"{args.threads} torch thread(s) per run, "
        f"single-turn (see the script's docstring), best of {args.repeats}"
    )
    rows = [
        f"| trainer | total {name} s | total {other_name} s | generation {name} s | "
        f"update {name} s | rollout tokens/s ({name}) | update tokens/s ({name}) | step wall s |"
        + ("" if cpu else " peak GPU memory MB |"),
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |" + ("" if cpu else " ---: |"),
    ]
    best = {}
    for which, label in (("ours", "coevo train_grpo"), ("trl", "TRL GRPOTrainer")):
        b = best[which] = min(results[which], key=lambda r: r[t])
        update = b[t] - b[f"gen_{t}"]
        b["rollout_rate"] = b["new_tokens"] / max(b[f"gen_{t}"], 1e-9)
        b["update_rate"] = b["tokens"] / max(update, 1e-9)
        rows.append(
            f"| {label} | {b[t]:.1f} | {b[other]:.1f} | {b[f'gen_{t}']:.1f} | "
            f"{update:.1f} | {b['rollout_rate']:,.0f} | {b['update_rate']:,.0f} | "
            f"{b['wall'] / args.steps:.1f} |" + ("" if cpu else f" {b['peak_gpu_mb']:,.0f} |")
        )
    ours, trl = best["ours"], best["trl"]
    notes = [
        f"of ours' time, its final checkpoint took {ours['save_cpu']:.1f} s CPU, "
        f"{ours['save_wall']:.1f} s wall",
        f"new tokens generated: ours {ours['new_tokens']:,}, TRL {trl['new_tokens']:,}; "
        f"sequence tokens trained: ours {ours['tokens']:,}, TRL {trl['tokens']:,}",
        f"speedup (ours / TRL tokens per {name} second): rollout "
        f"{ours['rollout_rate'] / trl['rollout_rate']:.2f}, update "
        f"{ours['update_rate'] / trl['update_rate']:.2f}, whole step "
        f"{(ours['tokens'] / ours[t]) / (trl['tokens'] / trl[t]):.2f}",
    ]
    if not cpu:
        notes.append(
            f"peak GPU memory ratio (ours / TRL): {ours['peak_gpu_mb'] / trl['peak_gpu_mb']:.2f}"
        )
    if ours["warm_wall"]:
        notes.append(
            f"ours decodes with graphs ({args.decode}); its untimed warm-up step (compiling the "
            f"decode step) took {ours['warm_wall']:.1f} s wall"
        )
    if args.note:
        notes.append(args.note)
    print(setup)
    print(describe(args.device))
    print("\n".join(rows))
    print("\n".join(notes))
    if not args.no_record:
        record(setup, rows, notes, args.device)


def record(setup: str, rows: list[str], notes: list[str], device: str = "cpu") -> None:
    """Add this run's figures at the end of the `## Runs` section of the device's results file."""
    stamp = time.strftime("%Y-%m-%d %H:%M")
    block = "\n".join(
        [
            f"### {stamp}",
            "",
            f"- setup: {setup}",
            f"- machine: {describe(device)}",
            "",
            *rows,
            "",
            *(f"- {note}" for note in notes),
            "",
        ]
    )
    results = results_file("grpo_speed", device)
    on = "" if device == "cpu" else f" on {device}"
    results.parent.mkdir(parents=True, exist_ok=True)
    header = f"# GRPO speed{on}: coevo vs TRL\n\n## Runs\n"
    text = results.read_text() if results.exists() else header
    results.write_text(text.rstrip("\n") + "\n\n" + block)


if __name__ == "__main__":
    main()
