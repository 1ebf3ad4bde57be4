"""The host's part of a lockstep rollout: what the CPU does between the model's calls.

    python benchmarks/host_speed.py                        # 64 shop tasks, a fresh nano's tokenizer
    python benchmarks/host_speed.py --model smollm2-135m   # a packaged model's tokenizer
    python benchmarks/host_speed.py --model DIR            # any local checkpoint's tokenizer

Where the model's decode step is a replayed CUDA graph, a rollout's turns wait on the host:
each episode's prompt (the chat template, tokenising its new turns), the envs' steps and the
rollout's own loop (issue 37: rendering and the loop were 1.1 of a warm graphs rollout's 6.3 s
on an H200). This runs `coevo.rollout.rollout` as a GPU run does, with the model replaced by a
policy that answers every prompt at once with --max-new-tokens random token ids (seeded, the
same in every run; decoded to text as `HFPolicy` decodes them), so every second is the
host's, on this machine's CPU. Random replies are never valid actions: every episode runs to
the env's step budget, as with the random-weight model of the GPU runs.

One rollout warms up, then --repeats are timed; the median run's seconds are split by where
they went. Prints only: the figures are this machine's (its CPU and its load, both printed).
"""

from __future__ import annotations

import argparse
import random
import tempfile
from pathlib import Path

from machine import describe
from measure import clock
from rollout_speed import Breakdown
from transformers import AutoTokenizer

import coevo.rollout
from coevo.envs import make
from coevo.envs.pool import EnvPool
from coevo.policy.base import Completion, Sampling
from coevo.policy.models import PRETRAINED, get_model
from coevo.render import Conversation
from coevo.rollout import rollout


class RandomReplies:
    """A policy that costs nothing to run: `max_new_tokens` random ids per prompt, none of
    them special, from its own seeded stream."""

    name = "random-replies"

    def __init__(self, tokenizer, max_context: int, seed: int = 0) -> None:
        self.tokenizer, self.max_context = tokenizer, max_context
        special = set(tokenizer.all_special_ids)
        self.ids = [i for i in range(len(tokenizer)) if i not in special]
        self.rng = random.Random(seed)

    def generate(self, prompts, sampling: Sampling, seeds=None, sessions=None):
        n = sampling.max_new_tokens
        replies = [[self.rng.choice(self.ids) for _ in range(n)] for _ in prompts]
        texts = self.tokenizer.backend_tokenizer.decode_batch(replies, skip_special_tokens=True)
        return [
            Completion(text, "length", tuple(ids), (0.0,) * n)
            for text, ids in zip(texts, replies, strict=True)
        ]


PARTS = (  # (owner, method, label): where a rollout's host seconds go
    (Conversation, "prompt", "prompts (header, budget, assembly)"),
    (coevo.rollout, "tokenize", "tokenising the turns"),
    (Conversation, "append", "appending turns (the chat template)"),
    (EnvPool, "step_all", "env steps"),
    (RandomReplies, "generate", "the policy (random ids, decoded to text)"),
)


def tokenizer_of(model: str | None, tmp: Path):
    if model is None:
        from coevo.policy.tiny import init_model

        model_dir = tmp / "nano"
        init_model(make("shop"), "nano", model_dir, seed=0)
    elif model in PRETRAINED:
        model_dir = get_model(model)
    else:
        model_dir = Path(model)
    return AutoTokenizer.from_pretrained(model_dir), model_dir


def main(argv: list[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a packaged model's name or a checkpoint dir")
    parser.add_argument("--tasks", type=int, default=64)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--max-context", type=int, default=8192)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer, model_dir = tokenizer_of(args.model, Path(tmp))
    tasks = make("shop").tasks("train")[: args.tasks]
    sampling = Sampling(temperature=1.0, max_new_tokens=args.max_new_tokens, logprobs=True)

    # A part this coevo lacks is left out, so that the script times an earlier commit too.
    timed = tuple(part for part in PARTS if part[1] in vars(part[0]))

    def one_rollout() -> tuple[float, dict[str, float], dict[str, int], int]:
        policy = RandomReplies(tokenizer, args.max_context)
        with Breakdown("cpu", timed) as parts, clock() as took:
            episodes = rollout(
                policy,
                lambda: make("shop"),
                tasks,
                sampling=sampling,
                batch_size=args.batch_size,
                progress=False,
            )
        return took["wall"], parts.seconds, parts.calls, sum(e.steps for e in episodes)

    one_rollout()  # warm-up: the template's compile, the envs' first searches
    runs = sorted((one_rollout() for _ in range(args.repeats)), key=lambda run: run[0])
    total, seconds, calls, steps = runs[len(runs) // 2]
    walls = [run[0] for run in runs]
    host = total - seconds["the policy (random ids, decoded to text)"]
    rest = total - sum(seconds.values())
    lines = [
        f"Host seconds of a lockstep shop rollout: {describe()}; {len(tasks)} tasks, batch "
        f"{args.batch_size}, {steps:,} env steps, replies of {args.max_new_tokens} random ids; "
        f"tokenizer of {model_dir.name}; median of {args.repeats} runs after one warm-up "
        f"({min(walls):.3f}-{max(walls):.3f} s).",
        "",
        "| where the median run's seconds went | seconds | share | calls |",
        "|---|---:|---:|---:|",
        *(
            f"| {label} | {seconds[label]:.3f} | {seconds[label] / total:.0%} | {calls[label]:,} |"
            for _, _, label in timed
        ),
        f"| the rest (the rollout's loop, env resets) | {rest:.3f} | {rest / total:.0%} | |",
        f"| whole rollout | {total:.3f} | 100% | |",
        "",
        f"host: {host:.3f} s ({1000 * host / steps:.3f} ms per env step; the policy's replies "
        f"left out)",
    ]
    print("\n".join(lines))
    return lines


if __name__ == "__main__":
    main()
