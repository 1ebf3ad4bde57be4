"""On a CUDA GPU in bf16, as researchers run coevo: generation with sessions, the three trainers'
steps, the gap between bf16 sampling and the trainer's forward, and a nano `coevo run`.

Marked `gpu`: skipped (and counted as skipped) where torch sees no CUDA device. Run them alone
with `pytest -m gpu`; `make test` runs them with the rest where a GPU is.
"""

from __future__ import annotations

import pytest
import torch

from coevo.config import build
from coevo.policy.base import Sampling
from coevo.render import render_prompt
from coevo.trajectory import Turn
from tests.toy_env import ToyEnv

pytestmark = pytest.mark.gpu

MISMATCH = 0.1
"""Share of greedy replies allowed to differ between two bf16 paths that compute the same
thing in another order (a session's cached prefix vs the whole prompt): near-ties flip."""


def on_cuda(model: torch.nn.Module) -> bool:
    return all(p.device.type == "cuda" for p in model.parameters())


def unmoved_trainables(before: dict[str, torch.Tensor], model: torch.nn.Module) -> list[str]:
    """Names of trainable parameters that did not move (compared on the CPU)."""
    return [
        n
        for n, p in model.named_parameters()
        if p.requires_grad and torch.equal(p.detach().cpu(), before[n])
    ]


def test_bf16_greedy_replies_with_sessions_equal_prompts_sent_whole(toy_agent_dir):
    from coevo.policy.hf import HFPolicy

    policy = HFPolicy(toy_agent_dir, dtype="bfloat16", device="cuda")
    assert policy.dtype == torch.bfloat16 and on_cuda(policy.model)
    env = ToyEnv()
    tasks = env.tasks("train") + env.tasks("test_unseen")
    firsts = [[Turn("user", f"{env.instruction_prompt}\n\n{env.reset(t)[0]}")] for t in tasks]
    sampling = Sampling(max_new_tokens=32)
    keys = [t.id for t in tasks]
    replies = policy.generate([render_prompt(t, policy.tokenizer) for t in firsts], sampling,
                              sessions=keys)  # fmt: skip
    seconds = [[*t, Turn("assistant", r.text), Turn("user", "Observation: try again.")]
               for t, r in zip(firsts, replies, strict=True)]  # fmt: skip
    prompts = [render_prompt(t, policy.tokenizer) for t in seconds]
    kept = policy.generate(prompts, sampling, sessions=keys)  # only the new turns run
    whole = policy.generate(prompts, sampling)  # no session: every token runs
    differ = sum(a.token_ids != b.token_ids for a, b in zip(kept, whole, strict=True))
    assert differ <= MISMATCH * len(prompts), f"{differ} of {len(prompts)} replies differ"


@pytest.mark.parametrize("trainer", ["sft", "dpo"])
def test_a_bf16_trainer_step_on_cuda_lowers_the_loss_and_moves_every_weight(trainer, tmp_path):
    import random

    from coevo.train.batches import DpoExample
    from coevo.train.dpo import DpoConfig, train_dpo
    from coevo.train.settings import Optim
    from coevo.train.sft import SftConfig, train_sft
    from tests.train.conftest import random_seq, tiny_llama

    rng = random.Random(1)
    sft_data = [random_seq(rng) for _ in range(24)]
    dpo_data = [DpoExample(random_seq(rng), random_seq(rng), 1.0, 0.1) for _ in range(16)]
    model = tiny_llama()
    before = {n: p.detach().cpu().clone() for n, p in model.named_parameters()}
    if trainer == "sft":
        config = SftConfig(epochs=4, batch_size=4, progress=False, optim=Optim(lr=3e-3))
        result = train_sft(model, sft_data, config, output_dir=tmp_path)
    else:
        config = DpoConfig(epochs=4, batch_size=4, progress=False, optim=Optim(lr=1e-3))
        result = train_dpo(model, dpo_data, config, output_dir=tmp_path)
    assert result.model is not None and on_cuda(result.model)
    assert unmoved_trainables(before, result.model) == []
    losses = [r["loss"] for r in result.history if "loss" in r]
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3, losses


def test_auto_compiles_a_long_sft_stage_on_cuda_and_it_learns_what_eager_learns(
    tmp_path, monkeypatch
):
    """`compute.compile=auto` on CUDA for a stage of COMPILE_TOKENS planned tokens (lowered
    here to every stage): the layers run compiled (inductor), the losses follow eager's."""
    import random

    import coevo.train.model as model_module
    from coevo.train.settings import Compute, Optim
    from coevo.train.sft import SftConfig, train_sft
    from tests.train.conftest import random_seq, tiny_llama

    rng = random.Random(2)
    data = [random_seq(rng) for _ in range(24)]

    def losses(compile_setting, folder):
        config = SftConfig(epochs=2, batch_size=4, progress=False, optim=Optim(lr=3e-3),
                           compute=Compute(compile=compile_setting))  # fmt: skip
        result = train_sft(tiny_llama(), data, config, output_dir=tmp_path / folder)
        return [r["loss"] for r in result.history if "loss" in r]

    eager = losses(False, "eager")
    monkeypatch.setattr(model_module, "COMPILE_TOKENS", 1)
    built = []
    original = model_module.CompiledLayers.__init__
    monkeypatch.setattr(model_module.CompiledLayers, "__init__",
                        lambda self, *a, **k: built.append(1) or original(self, *a, **k))  # fmt: skip
    compiled = losses("auto", "auto")
    assert built, "auto did not compile a stage over COMPILE_TOKENS on CUDA"
    assert compiled == pytest.approx(eager, rel=0.05, abs=0.02)  # bf16: orders of sums differ


def test_a_grpo_step_on_cuda_measures_its_bf16_gap_and_takes_old_logps_from_the_trainer(
    nano_model_dir, tmp_path
):
    """The trainer computes in bf16 autocast, the rollouts play the float32 module: the gap is
    measured and bounded, and over `max_logp_gap` the later minibatch's old log-probs come
    from the trainer's forward."""
    from transformers import AutoModelForCausalLM

    from tests.train.test_grpo import config, grpo

    before = AutoModelForCausalLM.from_pretrained(nano_model_dir).state_dict()
    result = grpo(nano_model_dir, tmp_path / "grpo", config(steps=2, minibatches=2))
    assert on_cuda(result.model)
    moved = [k for k, v in result.model.state_dict().items() if torch.equal(v.cpu(), before[k])]
    assert moved == []
    for record in result.history:
        assert 0 < record["sampled_logp_gap"] < 1.0, record  # measured: about 0.1 in bf16
        assert record["old_logps_from_trainer"] == (record["sampled_logp_gap"] > 1e-3)


def test_a_nano_eto_run_on_cuda_end_to_end(tmp_path):
    from coevo.methods.runner import execute
    from coevo.run.recipe import RunConfig
    from coevo.store import Store
    from tests.methods.test_run import FAST

    recipe = {**FAST, "model": {"size": "nano", "max_length": 512}, "iterations": 1}
    run = execute(build(RunConfig, {**recipe, "method": "eto"}), tmp_path / "run", quiet=True)
    assert (run / "stages" / "dpo-1-target" / "model" / "model.safetensors").is_file()
    with Store(run, readonly=True) as store:
        for split in ("test_seen", "test_unseen"):
            assert store.trajectories(stage=f"eval-1-{split}")


@pytest.mark.parametrize(
    "options", [{}, {"fuse": True}, {"prefill": True}], ids=["plain", "fused", "prefill"]
)
def test_bf16_cuda_graph_decoding_gives_the_eager_loops_replies(toy_agent_dir, options):
    """`decode="graphs"` (`auto` on CUDA: a compiled step replayed as CUDA graphs), its
    projections fused or not (`coevo.policy.fused`), its prefill over the slots, compiled, or
    transformers' (`StaticDecoder(prefill=True)`), against the eager loop in bf16: greedy
    replies, alone and over sessions, differ in at most MISMATCH of rows; the graphs are
    captured once and replayed on the next call; an in-place weight update (an optimizer step)
    reaches the replays with no new capture."""
    from coevo.policy.hf import HFPolicy
    from coevo.policy.static_decode import StaticDecoder, default_compile

    eager = HFPolicy(toy_agent_dir, dtype="bfloat16", device="cuda", decode="eager")
    graphs = HFPolicy(
        toy_agent_dir, model=eager.model, dtype="bfloat16", device="cuda", decode="graphs"
    )
    assert graphs.decode == "graphs" and graphs.decoder is not None
    if options:
        graphs.decoder = StaticDecoder(
            graphs.model, compile=default_compile, capture=True, **options
        )
        assert not options.get("fuse") or len(graphs.decoder.fused) > 0
    env = ToyEnv()
    tasks = env.tasks("train") + env.tasks("test_seen") + env.tasks("test_unseen")
    firsts = [[Turn("user", f"{env.instruction_prompt}\n\n{env.reset(t)[0]}")] for t in tasks]
    prompts = [render_prompt(t, eager.tokenizer) for t in firsts]
    sampling = Sampling(max_new_tokens=32, logprobs=True)

    def differ(a, b) -> int:
        return sum(x.token_ids != y.token_ids for x, y in zip(a, b, strict=True))

    keys = [t.id for t in tasks]
    replies = graphs.generate(prompts, sampling, sessions=keys)
    assert graphs.decoder.fallback is None, graphs.decoder.fallback
    assert differ(replies, eager.generate(prompts, sampling)) <= MISMATCH * len(prompts)
    captured = graphs.decoder.captures
    assert captured >= 1
    graphs.generate(prompts, sampling)
    assert graphs.decoder.captures == captured  # the same bucket: replayed
    seconds = [[*t, Turn("assistant", r.text), Turn("user", "Observation: try again.")]
               for t, r in zip(firsts, replies, strict=True)]  # fmt: skip
    later = [render_prompt(t, eager.tokenizer) for t in seconds]
    kept = graphs.generate(later, sampling, sessions=keys)  # only the new turns run
    assert differ(kept, eager.generate(later, sampling)) <= MISMATCH * len(later)
    captured = graphs.decoder.captures
    with torch.no_grad():
        for p in eager.model.parameters():
            p.mul_(1.25)
    moved = graphs.generate(prompts, sampling)
    assert differ(moved, eager.generate(prompts, sampling)) <= MISMATCH * len(prompts)
    assert graphs.decoder.fallback is None
    assert graphs.decoder.captures == captured  # updated in place: replayed, not recaptured


def test_sampled_multi_turn_decoding_with_graphs_keeps_its_compiled_captures(toy_agent_dir):
    """What a lockstep rollout asks of `decode="graphs"` (where the H200 run of 2026-11-26
    fell back to eager: a recompile inside the capture): sampled replies with seeds, 40 rows
    (the 64-row bucket), three turns over sessions, each turn a longer room bucket. Every
    bucket is compiled in its warm-up and captured; nothing falls back."""
    from coevo.policy.hf import HFPolicy

    graphs = HFPolicy(toy_agent_dir, dtype="bfloat16", device="cuda", decode="graphs")
    env = ToyEnv()
    tasks = (env.tasks("train") * 40)[:40]
    turns = [[Turn("user", f"{env.instruction_prompt}\n\n{env.reset(t)[0]}")] for t in tasks]
    keys = [f"episode-{i}" for i in range(len(tasks))]
    sampling = Sampling(temperature=1.0, max_new_tokens=32, logprobs=True)
    for turn in range(3):
        prompts = [render_prompt(t, graphs.tokenizer) for t in turns]
        replies = graphs.generate(prompts, sampling, seeds=range(100 * turn, 100 * turn + 40),
                                  sessions=keys)  # fmt: skip
        assert graphs.decoder.fallback is None, graphs.decoder.fallback
        assert all(1 <= len(r.token_ids) <= 32 for r in replies)
        observation = "Observation: nothing happens. " * (8 * (turn + 1))
        turns = [[*t, Turn("assistant", r.text), Turn("user", observation)]
                 for t, r in zip(turns, replies, strict=True)]  # fmt: skip
    assert graphs.decoder.captures >= 2  # a new room bucket each turn: captured, not eager
