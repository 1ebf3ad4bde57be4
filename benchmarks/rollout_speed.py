"""Episodes per second: lockstep rollouts against one episode at a time (how ETO explores).

    python benchmarks/rollout_speed.py                  # 64 shop tasks, a fresh nano model
    python benchmarks/rollout_speed.py --model DIR      # any local checkpoint
    python benchmarks/rollout_speed.py --model smollm2-135m   # the packaged pretrained model

Both sides use the same model, the same 64 shop train tasks, the same sampling settings and
the same per-episode, per-step seeds. The lockstep side is `coevo.rollout.rollout` (one
batched generate per step for every live episode, continuous batching, kept key/value caches).
The one-at-a-time side plays each episode alone and re-sends the whole rendered conversation
every step, as ETO's exploration does; both sides keep a prompt within the model's context
less max_new_tokens (older exchanges dropped first, as `rollout` does). Env start-up is not
timed on either side. The model is random-initialised unless --model is given: it rarely
writes a valid action, so episodes run to the step budget with full-length replies, the
costliest case for both sides.

--model NAME takes a packaged pretrained model (`coevo.policy.models`, e.g. smollm2-135m:
SmolLM2-135M-Instruct, converted once into the cache). Its defaults are smaller, since the
model is 120 times the nano's size and an untrained-for-shop reply runs to max_new_tokens
(measured on the shared 2-core machine: about 0.7 s per decoded token alone, so one episode
of 15 steps takes minutes one at a time): 8 tasks, batch 8, and the model's own torch thread
count (2 for SmolLM2-135M).

    python benchmarks/rollout_speed.py --workers 2      # env workers on Ray vs in-process

--workers N compares something else: the same lockstep rollout (same model, tasks, seeds) with
the envs stepped in this process against the envs in N Ray worker processes
(`coevo.envs.workers`), on sciworld by default (--env), whose simulator steps cost real CPU
time. Both sides start their envs before the clock; the episodes must come out identical. Its
figures go to the section "## Env workers" of the results file.

    python benchmarks/rollout_speed.py --store runs/l6/shop/eto-s0 --model smollm2-135m

--store RUN_DIR runs no model: for the explorations a run stored (every agent but the expert)
it counts the tokens each way would run through the model, one at a time (every step's whole
prompt and its reply) and lockstep with kept caches (every step's new prompt tokens and its
reply), with --model's tokenizer. Their ratio bounds the speedup wherever a token costs both
ways alike (prefill, compute-bound on a CPU); only decoding, batched lockstep, can add to it.
With --cut-block N it counts lockstep's tokens under the run's own max_length instead, cutting
just what must go against cutting in blocks of N (`model.cut_block`).

    python benchmarks/rollout_speed.py --device cuda --model smollm2-135m --tasks 64 --batch-size 64

--device cuda (default cpu) runs the model in bfloat16 on the GPU; the clock waits for the GPU
at both ends of each timed part, and each part's peak GPU memory above what was allocated
before it (`torch.cuda.max_memory_allocated`) is shown. It then also times decoding alone on
one batch of the same tasks' opening prompts (--batch-size of them), greedy, --max-new-tokens:
ours (`HFPolicy.generate`) against transformers' own `model.generate` on a second copy of the
model (left-padded, `min_new_tokens` = `max_new_tokens` so every row decodes them all), eager
and with `cache_implementation="static"` (its own torch.compile). Each way is called once to
warm up (its seconds shown: the static cache's compile), then timed --decode-repeats times
(default 5): the median call's ms per decode step (seconds / the longest reply's tokens) and
tokens/s (generated tokens / seconds), as in issue 37, and the fastest and slowest call. One more
call of ours is split into its prefill, its decode loop and the rest; with --profile-decode
one more runs under torch.profiler (kernels per decode step, the ones that take the most time).

Writes benchmarks/results/rollout_speed.md (cuda runs: rollout_speed-cuda.md, laid out the
same way): a nano or --model DIR run rewrites the top of the file (its notes included, as
before), a pretrained model's run only its own section, "## Pretrained model: NAME"; each
keeps the other's. The last line printed is `speedup: N.NN`.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from contextlib import nullcontext
from functools import partial
from pathlib import Path
from statistics import mean, median

import torch
import yaml
from machine import DEVICES, check_device, describe, gpu_name, results_file
from measure import clock, gpu_peak, sync, timed_calls

import coevo.rollout
from coevo.envs import make
from coevo.envs.conversation import observation_message, opening_message
from coevo.envs.pool import EnvPool
from coevo.lengths import common_prefix
from coevo.policy.base import Sampling
from coevo.policy.hf import HFPolicy
from coevo.policy.models import PRETRAINED, get_model
from coevo.policy.static_decode import Decoding, StaticDecoder
from coevo.render import Conversation, render_prompt
from coevo.rollout import rollout
from coevo.seeds import derive, episode_seed
from coevo.trajectory import Turn

RESULTS = results_file("rollout_speed", "cpu")
PRETRAINED_HEADING = "## Pretrained model: "
WORKERS_HEADING = "## Env workers"


class TokensRun:
    """The tokens a model runs (rows x width of every forward, pads included), counted by a
    forward pre-hook: what each side asks of the model, next to what it takes in time.

    Only where every forward runs in Python (`decode="eager"`): a compiled step traces the
    hook, and its Python integer became a guard that failed at every call, so each decode step
    compiled anew (the H100 run of 2026-11-26: `graphs` rollouts never finished); a replayed
    CUDA graph runs no hook at all. `counting` is False there and the table says so."""

    def __init__(self, policy) -> None:
        self.tokens = 0
        self.counting = policy.decoder is None
        if self.counting:
            policy.model.register_forward_pre_hook(self._count, with_kwargs=True)

    def _count(self, module, args, kwargs) -> None:
        if torch.compiler.is_compiling():  # never part of a compiled graph (see above)
            return
        ids = kwargs.get("input_ids")
        self.tokens += (ids if ids is not None else args[0]).numel()

    def take(self) -> int:
        tokens, self.tokens = self.tokens, 0
        return tokens


def one_at_a_time(policy, env, tasks, sampling, seed):
    """ETO's exploration: each episode alone, the whole prompt rendered and sent every step."""
    budget = policy.max_context - sampling.max_new_tokens  # as `rollout` keeps its prompts
    rewards, steps = [], 0
    for task in tasks:
        ep_seed = episode_seed(seed, task.id, 0)
        observation, _ = env.reset(task, seed=ep_seed)
        turns = [Turn("user", opening_message(env, observation))]
        for step in range(env.max_steps):
            prompt = render_prompt(turns, policy.tokenizer, max_length=budget)
            (completion,) = policy.generate([prompt], sampling, seeds=[derive(ep_seed, step)])
            result = env.step(completion.text)
            steps += 1
            turns.append(Turn("assistant", completion.text))
            if result.done:
                break
            turns.append(Turn("user", observation_message(result.observation)))
        rewards.append(result.reward)
    return rewards, steps


class Breakdown:
    """Wall seconds and calls of the methods a lockstep rollout spends its time in (or the
    `targets` given), while it is open, the device synchronised before and after each call (so
    a call's seconds hold the device work it queued)."""

    TARGETS = (  # (owner, method, label)
        (HFPolicy, "generate", "generate"),
        (HFPolicy, "_prefill", "prefill"),
        (EnvPool, "step_all", "env"),
        (Conversation, "prompt", "render"),
        (coevo.rollout, "tokenize", "tokenize"),  # the prompts' new turns, all at once
        # Inside a fixed-shape generate (`decode` static or graphs; no calls when eager):
        (Decoding, "advance", "loop"),
        (HFPolicy, "_find_stop_strings", "stops"),
        (HFPolicy, "_keep_static_sessions", "sessions"),
    )

    def __init__(self, device: str, targets: tuple = TARGETS) -> None:
        self.device, self.targets = device, targets
        self.seconds = {label: 0.0 for _, _, label in targets}
        self.calls = dict.fromkeys(self.seconds, 0)

    def __enter__(self) -> Breakdown:
        self.saved = [(owner, name, owner.__dict__[name]) for owner, name, _ in self.targets]
        for owner, name, label in self.targets:
            setattr(owner, name, self._timed(owner.__dict__[name], label))
        return self

    def __exit__(self, *exc) -> None:
        for owner, name, method in self.saved:
            setattr(owner, name, method)

    def _timed(self, method, label):
        def timed(*args, **kwargs):
            with clock(self.device) as took:
                out = method(*args, **kwargs)
            self.seconds[label] += took["wall"]
            self.calls[label] += 1
            return out

        return timed

    def lines(self, total: float) -> list[str]:
        generate, prefill = self.seconds["generate"], self.seconds["prefill"]
        render = self.seconds["render"] + self.seconds["tokenize"]
        if self.calls["loop"]:  # the fixed-shape loop: its steps apart from the host's work
            decoding = [
                (name, self.seconds[key], self.calls[key])
                for name, key in (
                    ("decoding: the decode steps (the device's, host syncs)", "loop"),
                    ("decoding: stop strings, on the host", "stops"),
                    ("decoding: sessions kept (one copy of the slots used)", "sessions"),
                )
            ]
            left = generate - prefill - sum(sec for _, sec, _ in decoding)
            name = "decoding: the rest (sampling set-up, reading tokens back, texts)"
            decoding.append((name, left, self.calls["generate"]))
        else:
            name = "decoding (generate less its prefill)"
            decoding = [(name, generate - prefill, self.calls["generate"])]
        parts = [
            ("prefill (new tokens of each turn)", prefill, self.calls["prefill"]),
            *decoding,
            ("env steps", self.seconds["env"], self.calls["env"]),
            ("prompt rendering", render, self.calls["render"]),
        ]
        rest = total - generate - self.seconds["env"] - render
        return [
            "| where the lockstep seconds went | seconds | share | calls |",
            "|---|---:|---:|---:|",
            *(f"| {n} | {sec:.1f} | {sec / total:.0%} | {c:,} |" for n, sec, c in parts),
            f"| the rest (rollout's own loop) | {rest:.1f} | {rest / total:.0%} | |",
        ]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model",
        help="a checkpoint dir or a packaged pretrained model (smollm2-135m); default: a fresh nano",
    )
    parser.add_argument("--tasks", type=int, help="default: 64, or 8 for a pretrained model")
    parser.add_argument("--batch-size", type=int, help="default: 64, or 8 for a pretrained model")
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--temperature", type=float, default=1.0)
    # One thread by default: a nano model gains little from more, and on a shared machine
    # threads that contend make every matrix product many times slower. A pretrained model
    # takes its own measured best (PRETRAINED[name].cpu_threads).
    parser.add_argument("--threads", type=int, help="default: 1, or the pretrained model's own")
    parser.add_argument("--no-write", action="store_true", help="do not update the results file")
    parser.add_argument(
        "--skip-sequential",
        action="store_true",
        help="time lockstep rollouts only, not one episode at a time (which decodes every task "
        "alone: minutes at 64 tasks on a GPU); prints, writes no results file",
    )
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="print where the lockstep rollouts' seconds went: generation (its prefill apart), "
        "env steps, prompt rendering (synchronising the device around each)",
    )
    parser.add_argument(
        "--again",
        action="store_true",
        help="time the lockstep rollout a second time on the same tasks and seeds: the first "
        "run holds what a process pays once (on cuda with decode=graphs: compiling and "
        "capturing the decode step), the second the rate of every later stage",
    )
    parser.add_argument(
        "--ours-only",
        action="store_true",
        help="on cuda, leave transformers' generate out of the decode table",
    )
    parser.add_argument(
        "--decode-repeats",
        type=int,
        default=5,
        help="on cuda, timed calls of each way in the decode table (median shown; default 5)",
    )
    parser.add_argument(
        "--profile-decode",
        action="store_true",
        help="on cuda, profile one more decode call of ours (torch.profiler): kernels per "
        "decode step and the ones that take the most GPU time",
    )
    parser.add_argument(
        "--decoder",
        nargs="+",
        choices=("fuse", "prefill"),
        default=(),
        help="with decode static or graphs, the fixed-shape decoder's options "
        "(`StaticDecoder`: fused projections, the prefill over slots): issue 37's probes, not "
        "yet defaults",
    )
    parser.add_argument("--workers", type=int, help="compare N Ray env workers with in-process")
    parser.add_argument("--env", default="sciworld", help="the env of --workers (default sciworld)")
    parser.add_argument("--max-steps", type=int, default=10, help="step budget with --workers")
    parser.add_argument("--store", type=Path, help="count the tokens of a run's stored episodes")
    parser.add_argument(
        "--cut-block",
        type=int,
        help="with --store: lockstep's tokens under the run's max_length, cut in blocks of this",
    )
    parser.add_argument(
        "--device",
        choices=DEVICES,
        default="cpu",
        help="cpu (float32) or cuda (bfloat16, GPU-synchronised seconds, peak GPU memory, and "
        "transformers' generate beside ours)",
    )
    return parser.parse_args(argv)


def main() -> None:
    args = parse_args()
    if args.device != "cpu" and (args.workers or args.store):
        raise SystemExit(
            "--device cuda times the model comparison only: run --workers and --store without it."
        )
    check_device(args.device)
    if args.workers:
        workers_main(args)
        return
    if args.store:
        stored_tokens(args.store, args.model or "smollm2-135m", args.cut_block)
        return
    pretrained = args.model in PRETRAINED
    small = 8 if pretrained else 64
    args.tasks = small if args.tasks is None else args.tasks
    args.batch_size = small if args.batch_size is None else args.batch_size
    if args.threads is None:
        args.threads = PRETRAINED[args.model].cpu_threads if pretrained else 1
    torch.set_num_threads(args.threads)

    cpu = args.device == "cpu"
    env = make("shop")
    tasks = env.tasks("train")[: args.tasks]
    with tempfile.TemporaryDirectory() as tmp:
        if pretrained:
            model_dir = get_model(args.model)
        elif args.model is not None:
            model_dir = Path(args.model)
        else:
            from coevo.policy.tiny import init_model

            model_dir = Path(tmp) / "nano"
            init_model(env, "nano", model_dir, seed=0)
        policy = HFPolicy(model_dir, dtype="float32" if cpu else "bfloat16", device=args.device)
        if args.decoder:
            if policy.decoder is None:
                raise SystemExit("--decoder asks for decode static or graphs (COEVO_DECODE).")
            made = policy.decoder
            options = dict.fromkeys(args.decoder, True)
            policy.decoder = StaticDecoder(
                policy.model, compile=made.compile, capture=made.capture, **options
            )
        # transformers' own generate, timed beside ours on cuda, gets a copy of its own.
        theirs = None if cpu or args.ours_only else load_copy(model_dir, policy)
    sampling = Sampling(temperature=args.temperature, max_new_tokens=args.max_new_tokens)
    load_before = os.getloadavg()
    counter = TokensRun(policy)

    with EnvPool(lambda: make("shop")) as pool:
        started = [pool.acquire() for _ in range(min(args.batch_size, len(tasks)))]
        for e in started:  # envs are built before the clock starts
            pool.release(e)
        # With --again the same rollout runs twice: the first pays what a process pays once
        # (compiling and capturing the decode step, cuDNN plans), the second shows the rate of
        # every later stage. The breakdown and the peak memory are the last run's.
        rows = []
        way = f"{policy.decode} ({', '.join(args.decoder)})" if args.decoder else policy.decode
        names = [f"lockstep (rollout), {way}", f"lockstep (rollout), {way}, again"]
        for name in names[: 1 + args.again]:
            breakdown = Breakdown(args.device) if args.breakdown else nullcontext()
            with gpu_peak(args.device) as lock_peak, clock(args.device) as took, breakdown:
                trajectories = rollout(
                    policy, pool, tasks, sampling=sampling, batch_size=args.batch_size, seed=0
                )
            seconds, steps = took["wall"], sum(t.steps for t in trajectories)
            reward = sum(t.reward for t in trajectories) / len(trajectories)
            rows.append((name, seconds, len(tasks) / seconds, steps, counter.take(), reward))
    _, lockstep_s, lock_eps, _, lock_tokens, _ = rows[-1]
    n = len(tasks)
    if args.skip_sequential:
        seq_peak, seq_tokens, speedup = None, None, None
    else:
        with gpu_peak(args.device) as seq_peak, clock(args.device) as took:
            rewards, seq_steps = one_at_a_time(policy, env, tasks, sampling, seed=0)
        sequential_s = took["wall"]
        seq_tokens = counter.take()
        speedup = lock_eps / (n / sequential_s)
        seq_row = (sequential_s, n / sequential_s, seq_steps, seq_tokens, sum(rewards) / n)
        rows.append(("one at a time (ETO)", *seq_row))
    decoding = [] if cpu else decode_table(policy, theirs, env, tasks, args)
    load_after = os.getloadavg()
    params = sum(p.numel() for p in policy.model.parameters())
    lines = [
        "| way | seconds | episodes/s | env steps | steps/s | tokens run | mean reward |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *(
            f"| {name} | {sec:.1f} | {eps:.3f} | {steps} | {steps / sec:.1f} "
            f"| {f'{tokens:,}' if counter.counting else 'not counted'} | {reward:.3f} |"
            for name, sec, eps, steps, tokens, reward in rows
        ),
    ]
    if seq_tokens is not None and counter.counting:
        lines += [
            "",
            f"tokens run through the model, one at a time / lockstep: "
            f"{seq_tokens / max(lock_tokens, 1):.2f}",
        ]
    if args.breakdown:
        lines += ["", *breakdown.lines(lockstep_s)]
    if not cpu:
        memory = f"{lock_peak['peak_gpu_mb'] - lock_peak['before_gpu_mb']:,.0f} MB"
        if seq_peak is not None:
            memory += (
                f", one at a time {seq_peak['peak_gpu_mb'] - seq_peak['before_gpu_mb']:,.0f} MB"
            )
        lines += [f"peak GPU memory above the loaded models: lockstep {memory}", "", *decoding]
    compute = "float32 on CPU" if cpu else f"bfloat16 on {gpu_name()}"
    setup = (
        f"{n} shop train tasks (max {env.max_steps} steps), model {params:,} parameters "
        f"({'random init' if args.model is None else describe_model(args.model)}), "
        f"{compute}, {args.threads} torch threads; temperature {args.temperature}, max_new_tokens "
        f"{args.max_new_tokens}; lockstep batch size {args.batch_size}"
    )
    machine = (
        f"{describe(args.device)}; load average (1 min) {load_before[0]:.2f} before the timed "
        f"runs, {load_after[0]:.2f} after"
    )
    print(setup)
    print(machine)
    print("\n".join(lines))
    if speedup is None:  # lockstep alone: no comparison to record
        return
    if not args.no_write:
        figures = (
            f"- setup: {setup}\n- machine: {machine}\n- measured: "
            f"{time.strftime('%Y-%m-%d %H:%M')}\n\n"
            + "\n".join(lines)
            + f"\n\nspeedup: {speedup:.2f}\n"
        )
        path = results_file("rollout_speed", args.device)
        on = "" if cpu else f" --device {args.device}"
        if pretrained:
            write_section(
                f"{PRETRAINED_HEADING}{args.model}\n\n"
                f"`python benchmarks/rollout_speed.py{on} --model {args.model}`: the same "
                f"comparison on {PRETRAINED[args.model].about}.\n\n" + figures,
                path,
            )
        else:
            title = "# Rollout speed" if cpu else f"# Rollout speed on {args.device}"
            write_top(
                f"{title}\n\n"
                f"`python benchmarks/rollout_speed.py{on}`: episodes per second of lockstep "
                "rollouts against one episode at a time (ETO's way: each episode alone, the whole "
                "prompt re-sent every step)"
                + (
                    ""
                    if cpu
                    else ", then decoding alone: ours against transformers' generate, eager and "
                    "with a static cache"
                )
                + ". Goal: speedup >= 4.\n\n"
                + figures,
                path,
            )
    print(f"speedup: {speedup:.2f}")


def workers_main(args: argparse.Namespace) -> None:
    """Lockstep rollouts with the envs in this process against the envs in Ray workers."""
    from coevo.envs.workers import RayEnvPool

    torch.set_num_threads(args.threads or 1)
    options = {"max_steps": args.max_steps}
    factory = partial(make, args.env, **options)
    env = factory()
    n = args.tasks or 16
    batch = args.batch_size or n
    tasks = env.tasks("train")[:n]
    with tempfile.TemporaryDirectory() as tmp:
        from coevo.policy.tiny import init_model

        model_dir = Path(tmp) / "nano"
        # Its tokenizer learns the shop corpus: sciworld's corpus stops at a task whose gold
        # path is excluded, and a random model writes no valid action either way.
        init_model(make("shop"), "nano", model_dir, seed=0)
        policy = HFPolicy(model_dir, dtype="float32", device="cpu")
    env.close()
    sampling = Sampling(temperature=args.temperature, max_new_tokens=args.max_new_tokens)
    load_before = os.getloadavg()
    timed = {}
    for way, pool in (
        ("in-process", EnvPool(factory)),
        (f"{args.workers} Ray workers", RayEnvPool(factory, args.workers)),
    ):
        with pool:
            started = [pool.acquire() for _ in range(min(batch, n))]
            for e in started:  # envs (each a JVM for sciworld) are started before the clock
                pool.release(e)
            env_s = timed_env_calls(pool)
            t0 = time.perf_counter()
            played = rollout(policy, pool, tasks, sampling=sampling, batch_size=batch, seed=0)
            timed[way] = (time.perf_counter() - t0, played, env_s[0])
    load_after = os.getloadavg()
    (local_s, local, _), (ray_s, remote, _) = timed.values()
    same = [(t.turns, t.reward) for t in local] == [(t.turns, t.reward) for t in remote]
    steps = sum(t.steps for t in local)
    lines = [
        "| way | seconds | episodes/s | env steps | steps/s | waiting for envs (s) |",
        "|---|---:|---:|---:|---:|---:|",
        *(
            f"| {way} | {sec:.1f} | {n / sec:.3f} | {steps} | {steps / sec:.1f} | {env:.1f} |"
            for way, (sec, _, env) in timed.items()
        ),
    ]
    setup = (
        f"{n} {args.env} train tasks (max {args.max_steps} steps), a random-init nano model "
        "(tokenizer of the shop corpus), "
        f"float32 on CPU, {args.threads or 1} torch threads; temperature {args.temperature}, "
        f"max_new_tokens {args.max_new_tokens}; lockstep batch size {batch}"
    )
    machine = (
        f"{describe()}; load average (1 min) {load_before[0]:.2f} before the timed runs, "
        f"{load_after[0]:.2f} after"
    )
    print(setup, machine, *lines, f"identical episodes: {same}", sep="\n")
    if not args.no_write:
        write_section(
            f"{WORKERS_HEADING}\n\n"
            f"`python benchmarks/rollout_speed.py --workers {args.workers}`: the same lockstep "
            "rollout with the envs stepped in this process against the envs in Ray worker "
            "processes (`rollout.workers`).\n\n"
            f"- setup: {setup}\n- machine: {machine}\n- measured: "
            f"{time.strftime('%Y-%m-%d %H:%M')}\n- identical episodes: {same}\n\n"
            + "\n".join(lines)
            + f"\n\nspeedup: {local_s / ray_s:.2f}\n"
        )
    print(f"speedup: {local_s / ray_s:.2f}")


def timed_env_calls(pool) -> list[float]:
    """Seconds the rollout spends in the pool's batched resets and steps (in-process: the envs'
    own work; with workers: waiting for the slowest worker), summed into the returned box."""
    box = [0.0]
    for name in ("reset_all", "step_all"):
        call = getattr(pool, name)

        def timed(calls, call=call):
            t0 = time.perf_counter()
            try:
                return call(calls)
            finally:
                box[0] += time.perf_counter() - t0

        setattr(pool, name, timed)
    return box


def stored_tokens(run: Path, model: str, cut_block: int | None = None) -> None:
    """Print the tokens one at a time and lockstep would run for a run's stored episodes; with
    `cut_block`, lockstep's under the run's own context budget, cut as the rollout cuts it
    (just what must go, then in blocks of `cut_block` tokens)."""
    from transformers import AutoTokenizer

    from coevo.store import Store, store_path

    tokenizer = AutoTokenizer.from_pretrained(get_model(model) if model in PRETRAINED else model)
    with Store(store_path(run)) as store:
        episodes = [t for t in store.trajectories() if t.agent != "expert"]
    if not episodes:
        raise SystemExit(f"{run} stores no explorations (only expert episodes, or none).")
    if cut_block is not None:
        max_length = yaml.safe_load((run / "config.yaml").read_text())["model"]["max_length"]
        counts = [cut_tokens(episodes, tokenizer, max_length, block) for block in (0, cut_block)]
        (tokens, breaks, cut), (tokens_b, breaks_b, _) = counts
        print(
            f"{run}: {len(episodes)} episodes, max_length {max_length}, {cut} prompts cut; "
            f"lockstep tokens {tokens:,} cutting what must go ({breaks} prompts whose cached "
            f"prefix broke), {tokens_b:,} in blocks of {cut_block} ({breaks_b}): ratio "
            f"{tokens / tokens_b:.2f}"
        )
        return
    whole = new = replies = steps = 0
    for episode in episodes:
        seen = 0  # tokens a kept cache holds: the last prompt and reply
        for i, turn in enumerate(episode.turns):
            if turn.role != "assistant":
                continue
            prompt = len(render_prompt(episode.turns[:i], tokenizer))
            reply = len(turn.token_ids or tokenizer(turn.text)["input_ids"])
            whole += prompt + reply
            new += prompt - seen + reply
            replies += reply
            seen = prompt + reply
            steps += 1
    print(
        f"{run}: {len(episodes)} episodes, {steps} steps, {whole / steps:.0f} tokens a step one at "
        f"a time; tokens one at a time {whole:,}, lockstep {new:,} (replies {replies / new:.0%} "
        f"of them): ratio {whole / new:.2f}"
    )


def cut_tokens(episodes, tokenizer, max_length: int, block: int) -> tuple[int, int, int]:
    """(tokens lockstep runs with kept caches, prompts whose cached prefix broke, prompts cut)
    for `episodes` replayed under `max_length` as `rollout` prompts them, with `cut_block`."""
    tokens = breaks = cut = 0
    for episode in episodes:
        budget = max_length - episode.metadata.get("sampling", {}).get("max_new_tokens", 0)
        conversation = Conversation(tokenizer)
        cached: list[int] = []  # the last prompt and its reply
        for turn in episode.turns:
            if turn.role == "assistant":
                ids, dropped = conversation.prompt(budget, block)
                reply = turn.token_ids or tokenizer(turn.text)["input_ids"]
                kept = common_prefix(cached, ids)
                tokens += len(ids) - kept + len(reply)
                breaks += kept < len(cached)
                cut += dropped > 0
                cached = [*ids, *reply]
            conversation.append(turn)
    return tokens, breaks, cut


def load_copy(model_dir: Path, policy):
    """A second copy of the model, in the policy's dtype on its device, for transformers'
    own generate."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=policy.dtype)
    return model.to(policy.device).eval()


def opening_prompts(policy, env, tasks, max_new_tokens: int) -> list[list[int]]:
    """The tasks' first prompts, as the rollouts render them (same seeds)."""
    budget = policy.max_context - max_new_tokens
    prompts = []
    for task in tasks:
        observation, _ = env.reset(task, seed=episode_seed(0, task.id, 0))
        turns = [Turn("user", opening_message(env, observation))]
        prompts.append(render_prompt(turns, policy.tokenizer, max_length=budget))
    return prompts


def decode_table(policy, theirs, env, tasks, args: argparse.Namespace) -> list[str]:
    """Decoding alone, as issue 37's table: ours against transformers' generate (eager, static
    cache) on one batch of the same opening prompts, greedy. Run on cuda (where it runs on the
    CPU, as in the tests, its memory column is empty and the static cache is not compiled)."""
    device = policy.device.type
    prompts = opening_prompts(policy, env, tasks[: args.batch_size], args.max_new_tokens)
    n = args.max_new_tokens
    greedy = Sampling(temperature=0.0, max_new_tokens=n, logprobs=True)  # logprobs: token ids

    def ours() -> tuple[int, int]:
        lengths = [len(c.token_ids) for c in policy.generate(prompts, greedy)]
        return max(lengths), sum(lengths)  # (decode steps, generated tokens)

    width = max(len(p) for p in prompts)
    pad = policy.pad_id
    # Left-padded, as transformers' generate wants a batch. (batch, width)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=policy.device)
    real = [[0] * (width - len(p)) + [1] * len(p) for p in prompts]
    mask = torch.tensor(real, device=policy.device)

    def transformers_generate(**options):
        def call() -> tuple[int, int]:
            with torch.inference_mode():
                out = theirs.generate(
                    input_ids=ids,
                    attention_mask=mask,
                    max_new_tokens=n,
                    min_new_tokens=n,  # every row decodes all n: no early stop
                    do_sample=False,
                    pad_token_id=pad,
                    **options,
                )
            new = out.shape[1] - width
            return new, new * len(prompts)

        return call

    ways = [(f"coevo `HFPolicy.generate`, {policy.decode}", ours)]
    if not args.ours_only:
        ways += [
            ("transformers `generate`, eager", transformers_generate()),
            (
                'transformers `generate`, `cache_implementation="static"`',
                transformers_generate(cache_implementation="static"),
            ),
        ]
    repeats = args.decode_repeats
    lines = [
        f"Decoding alone: {len(prompts)} opening prompts (mean {mean(map(len, prompts)):.0f}, "
        f"longest {width} tokens), greedy, max_new_tokens {n}; each way warmed up by one call "
        f"first (its seconds: warm-up, the static cache's compile included), then timed "
        f"{repeats} times: the median call, and the fastest and slowest.",
        "",
        "| way | warm-up s | seconds | decode steps | tokens | ms per decode step | tokens/s "
        "| peak GPU MB above the loaded models | fastest-slowest s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, call in ways:
        warm, times, (steps, tokens), peak = timed_calls(call, repeats, device, around=gpu_peak)
        sec = median(times)
        memory = f"{peak['peak_gpu_mb'] - peak['before_gpu_mb']:,.0f}" if peak else ""
        lines.append(
            f"| {label} | {warm:.1f} | {sec:.3f} | {steps} | {tokens:,} | "
            f"{1000 * sec / steps:.2f} | {tokens / sec:,.0f} | {memory} | "
            f"{min(times):.3f}-{max(times):.3f} |"
        )
    lines += ["", decode_split(device, ours)]
    if args.profile_decode:
        try:
            lines += ["", *decode_profile(device, ours)]
        except Exception as exc:  # noqa: BLE001 - the profiler's failure must not cost the table
            lines += ["", f"Ours profiled: the profiler failed ({type(exc).__name__}: {exc})."]
    return lines


def decode_split(device: str, ours) -> str:
    """Where one more of ours' calls spends its time: the prefill, the decode loop (the
    fixed-shape loop's `Decoding.advance`; without it, the call less its prefill) and the
    rest of the call, the device synchronised around each part."""
    targets = (
        (HFPolicy, "generate", "generate"),
        (HFPolicy, "_prefill", "prefill"),
        (Decoding, "advance", "loop"),
    )
    with Breakdown(device, targets) as split:
        steps, _ = ours()
    ms = {label: 1000 * sec for label, sec in split.seconds.items()}
    line = (
        "Ours split, one more call (the device synchronised around each part): "
        f"prefill {ms['prefill']:.1f} ms"
    )
    if not split.calls["loop"]:  # the eager loop: the call less its prefill
        loop = ms["generate"] - ms["prefill"]
        return f"{line}, decoding (the call less it) {loop:.1f} ms ({loop / steps:.2f} ms a step)."
    rest = ms["generate"] - ms["prefill"] - ms["loop"]
    # The first token comes from the prefill's logits: the loop runs the other steps.
    per_step = ms["loop"] / max(steps - 1, 1)
    return (
        f"{line}, the decode loop {ms['loop']:.1f} ms ({per_step:.2f} ms a step over {steps - 1}"
        f" steps, {split.calls['loop']} host syncs), the rest of the call {rest:.1f} ms (setting"
        " up, reading tokens back, detokenising)."
    )


def decode_profile(device: str, ours, top: int = 12) -> list[str]:
    """One more of ours' calls under torch.profiler: how many kernels a decode step runs and
    the `top` that take the most time (on cuda the GPU's, kernels replayed from a CUDA graph
    included where CUPTI reports them; on the CPU every operator's own CPU time)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    cuda = device == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        steps, _ = ours()
        sync(device)
    if cuda:
        kernels = [e for e in prof.key_averages() if e.device_type == DeviceType.CUDA]
        own = {e.key: e.self_device_time_total for e in kernels}
        what = "GPU kernels (CUDA graph replays included where CUPTI reports them)"
    else:
        kernels = [e for e in prof.key_averages() if e.key.startswith("aten::")]
        own = {e.key: e.self_cpu_time_total for e in kernels}
        what = "aten operator calls (nested ones counted too; their own CPU time)"
    total_us = sum(own.values()) or 1.0
    calls = sum(e.count for e in kernels)
    ranked = sorted(kernels, key=lambda e: own[e.key], reverse=True)[:top]
    return [
        f"Ours profiled, one more call (torch.profiler): {calls:,} {what}, "
        f"{calls / steps:,.0f} per decode step, {total_us / 1000:.1f} ms in all; the {top} "
        "with the most time:",
        "",
        "| kernel | calls | ms | share |",
        "|---|---:|---:|---:|",
        *(
            f"| `{e.key[:90]}` | {e.count:,} | {own[e.key] / 1000:.2f} | "
            f"{own[e.key] / total_us:.0%} |"
            for e in ranked
        ),
    ]


def describe_model(model: str) -> str:
    return f"pretrained {model}" if model in PRETRAINED else model


def results_sections(path: Path = RESULTS) -> list[str]:
    """The results file cut before each `## ` heading: the top part, then one per section."""
    if not path.exists():
        return []
    chunks: list[list[str]] = [[]]
    for line in path.read_text().splitlines():
        if line.startswith("## "):
            chunks.append([])
        chunks[-1].append(line)
    return ["\n".join(c).strip("\n") + "\n" for c in chunks if any(c)]


def write_results(chunks: list[str], path: Path = RESULTS) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(chunks))


def write_top(top: str, path: Path = RESULTS) -> None:
    """Replace the top of the file and its notes; keep the pretrained models' and the env
    workers' sections."""
    kept = [
        c for c in results_sections(path) if c.startswith((PRETRAINED_HEADING, WORKERS_HEADING))
    ]
    write_results([top, *kept], path)


def write_section(section: str, path: Path = RESULTS) -> None:
    """Replace this pretrained model's section (or add it at the end); keep everything else."""
    heading = section.splitlines()[0]
    title = "# Rollout speed\n" if path == RESULTS else "# Rollout speed on cuda\n"
    chunks = results_sections(path) or [title]
    mine = [i for i, c in enumerate(chunks) if c.splitlines()[0] == heading]
    if mine:
        chunks[mine[0]] = section
    else:
        chunks.append(section)
    write_results(chunks, path)


if __name__ == "__main__":
    main()
