"""Local tiny models: a tokenizer trained on an env's corpus and a small random-init Llama.

`init_model(env, size, out)` is what `coevo model init` runs and how every test and the demo
get a model without downloads. The checkpoint is a standard Hugging Face directory:
`AutoTokenizer.from_pretrained(out)` and `AutoModelForCausalLM.from_pretrained(out)` load it.

The chat template gives each role one special token, so a turn costs two tokens of markup:

    <|user|>{instruction and observation}<|end|><|assistant|>Thought: ...<|end|>
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coevo.envs.base import Env
from coevo.envs.conversation import expert_trajectory

PAD, END = "<|pad|>", "<|end|>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
SPECIAL_TOKENS = (PAD, END, *ROLE_TOKENS)

CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}<|end|>"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@dataclass(frozen=True)
class Size:
    """Shape of a tiny Llama; parameter counts are for a full vocabulary (embeddings tied)."""

    vocab: int
    hidden: int
    layers: int
    heads: int
    intermediate: int


SIZES: dict[str, Size] = {
    "nano": Size(vocab=2048, hidden=128, layers=4, heads=4, intermediate=384),  # ~1.1M
    "tiny": Size(vocab=3072, hidden=192, layers=6, heads=6, intermediate=512),  # ~3.2M
    "small": Size(vocab=4096, hidden=320, layers=8, heads=8, intermediate=768),  # ~10.5M
}


def env_corpus(env: Env, *, max_tasks: int = 500) -> Iterator[str]:
    """Texts a tokenizer for `env` should know: its instructions and expert episodes."""
    yield env.instruction_prompt
    for task in env.tasks("train")[:max_tasks]:
        yield from (turn.text for turn in expert_trajectory(env, task).turns)


def train_tokenizer(
    corpus: Iterable[str],
    *,
    vocab_size: int,
    special_tokens: tuple[str, ...] = SPECIAL_TOKENS,
    chat_template: str = CHAT_TEMPLATE,
    eos_token: str = END,
    pad_token: str = PAD,
) -> Any:
    """A byte-level BPE tokenizer (a transformers fast tokenizer) trained on `corpus`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(special_tokens),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(corpus, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token=eos_token,
        pad_token=pad_token,
        additional_special_tokens=[t for t in special_tokens if t not in (eos_token, pad_token)],
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    tokenizer.chat_template = chat_template
    return tokenizer


def build_model(tokenizer: Any, size: Size, *, seed: int = 0, max_positions: int = 4096) -> Any:
    """A random-init Llama causal LM shaped by `size`, its vocabulary fitted to `tokenizer`."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=size.hidden,
        num_hidden_layers=size.layers,
        num_attention_heads=size.heads,
        num_key_value_heads=size.heads,
        intermediate_size=size.intermediate,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = None
    return model


def save(model: Any, tokenizer: Any, out: Path | str) -> Path:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def init_model(
    env: Env,
    size: str,
    out: Path | str,
    *,
    seed: int = 0,
    max_tasks: int = 500,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Train a tokenizer on `env`'s corpus, build a `size` model and save both in `out`."""
    if size not in SIZES:
        raise ValueError(f"Unknown model size {size!r}: use one of {', '.join(SIZES)}.")
    shape = SIZES[size]
    note = progress or (lambda _: None)
    note(f"training a tokenizer on {env.name} expert episodes")
    texts = list(env_corpus(env, max_tasks=max_tasks))
    tokenizer = train_tokenizer(texts, vocab_size=shape.vocab)
    note(f"building the {size} model")
    model = build_model(tokenizer, shape, seed=seed)
    save(model, tokenizer, out)
    return {
        "out": str(out),
        "size": size,
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocab": len(tokenizer),
        "corpus_texts": len(texts),
    }
