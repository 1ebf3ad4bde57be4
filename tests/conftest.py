"""Fixtures shared across the test suite: a nano model made locally on the toy env's corpus."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`gpu` tests are skipped where torch sees no CUDA device (the summary counts them)."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (tests/test_gpu.py); none here")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread():
    """The whole suite on one torch thread: on the 2-core reference machine a nano model trains
    3x and decodes 13x faster on one thread than on two (thread contention dominates)."""
    import torch

    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _eager_decoding_outside_gpu_tests(request: pytest.FixtureRequest, monkeypatch):
    """Tests not marked `gpu` decode with the eager loop unless COEVO_DECODE says otherwise.
    On a GPU machine `auto` means CUDA graphs (`coevo.policy.hf.resolve_decode`): every small
    model of the suite would compile its own decode step, minutes that test nothing the
    tests of the graphs (tests/policy/test_static_decode.py, tests/test_gpu.py) do not."""
    if "gpu" not in request.keywords and "COEVO_DECODE" not in os.environ:
        monkeypatch.setenv("COEVO_DECODE", "eager")


@pytest.fixture(scope="session")
def nano_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A `coevo model init`-style nano checkpoint (tokenizer + random Llama) for the toy env.

    Made once per test session; treat it as read-only (copy it before training in place).
    """
    from coevo.policy.tiny import init_model
    from tests.toy_env import ToyEnv

    out = tmp_path_factory.mktemp("nano_toy")
    init_model(ToyEnv(), "nano", out, seed=0)
    return out


@pytest.fixture
def one_thread():
    """Run a test with one torch thread: tiny models gain nothing from more, and on a shared
    machine the threads' contention makes them many times slower."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def toy_agent_dir(nano_model_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The nano model after a short SFT (40 steps) on the toy env's train expert episodes.

    It writes well-formed "Thought: ... Action: ..." replies that end with its end-of-turn
    token (its first reply on a train task is the expert's), so episodes end by themselves,
    with rewards that vary from task to task. Made once per session; read-only.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from coevo.envs.conversation import expert_trajectory
    from coevo.render import render
    from tests.toy_env import ToyEnv

    tokenizer = AutoTokenizer.from_pretrained(nano_model_dir)
    model = AutoModelForCausalLM.from_pretrained(nano_model_dir, dtype=torch.float32)
    env = ToyEnv()
    rendered = [render(expert_trajectory(env, task), tokenizer) for task in env.tasks("train")]
    width = max(len(r.input_ids) for r in rendered)
    ids = torch.full((len(rendered), width), tokenizer.pad_token_id)  # (batch, seq)
    labels = torch.full((len(rendered), width), -100)  # loss only on the agent's tokens
    for i, r in enumerate(rendered):
        ids[i, : len(r.input_ids)] = torch.tensor(r.input_ids)
        mask = torch.tensor(r.action_mask, dtype=torch.bool)
        labels[i, : len(r.input_ids)] = torch.tensor(r.input_ids).masked_fill(~mask, -100)
    torch.manual_seed(0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny matrices: threads only contend, worst on a busy machine
    try:
        for _ in range(40):
            attention = ids != tokenizer.pad_token_id
            model(input_ids=ids, attention_mask=attention, labels=labels).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    finally:
        torch.set_num_threads(threads)
    out = tmp_path_factory.mktemp("toy_agent")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
