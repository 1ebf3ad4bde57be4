"""Tiny models: sizes, a checkpoint the Auto classes load back, and `coevo model init`."""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

from coevo.cli import app
from coevo.policy.tiny import CHAT_TEMPLATE, SIZES, build_model
from coevo.render import render_prompt
from coevo.trajectory import Turn


@pytest.mark.parametrize(
    ("size", "low", "high"), [("nano", 0.8e6, 1.3e6), ("tiny", 2.5e6, 3.6e6), ("small", 9e6, 12e6)]
)
def test_sizes_have_the_advertised_parameter_counts(size, low, high):
    shape = SIZES[size]
    tokenizer = type(
        "Tok", (), {"__len__": lambda self: shape.vocab, "eos_token_id": 1, "pad_token_id": 0}
    )()
    with torch.device("meta"):  # count without allocating
        model = build_model(tokenizer, shape)
    assert low <= sum(p.numel() for p in model.parameters()) <= high
    assert model.config.model_type == "llama"


def test_checkpoint_loads_back_with_auto_classes(nano_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(nano_model_dir)
    model = AutoModelForCausalLM.from_pretrained(nano_model_dir)
    assert tokenizer.chat_template == CHAT_TEMPLATE
    assert tokenizer.eos_token == "<|end|>" and tokenizer.pad_token == "<|pad|>"
    assert model.config.vocab_size == len(tokenizer)
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id
    text = "Thought: I check the word.\nAction: look"
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text  # byte-level: lossless
    # Words of the corpus became single tokens: the tokenizer was trained on it.
    assert len(tokenizer(" word")["input_ids"]) == 1
    prompt = torch.tensor([render_prompt([Turn("user", "Type fig.")], tokenizer)])
    out = model.generate(prompt, max_new_tokens=4, do_sample=False)  # (1, seq)
    assert prompt.shape[1] < out.shape[1] <= prompt.shape[1] + 4


def test_model_init_command(tmp_path):
    runner = CliRunner()
    out = tmp_path / "m"
    result = runner.invoke(
        app, ["model", "init", "--env", "tests.toy_env:ToyEnv", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "parameters" in result.output
    assert (out / "config.json").is_file() and (out / "tokenizer.json").is_file()
    result = runner.invoke(
        app, ["model", "init", "--env", "tests.toy_env:ToyEnv", "--out", str(out), "--size", "huge"]
    )
    assert result.exit_code == 2
    assert "unknown model size 'huge'" in result.output
