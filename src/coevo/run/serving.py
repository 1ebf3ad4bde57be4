"""Keeping the generation server's weights current (`model.backend: server`).

The server starts out serving the run's base model under `server.model`. Before a stage's
model is played, the server is made to serve it:

- LoRA: the stage's adapter is loaded into the server at run time through vLLM's documented
  endpoint (`POST /v1/load_lora_adapter` with `lora_name` and `lora_path`; the server runs with
  `--enable-lora` and `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`), and requests name the adapter.
  A stage starts from the one before it with that one's adapters merged, so its own adapter
  is a change to the *previous* stage's weights; the server adds adapters to its base model
  only. Each LoRA stage therefore also writes `served-adapter`: its adapter stacked on its
  start's (ranks concatenated, scales folded in), exactly the change from the base model.
- Full fine-tuning: `server.reload_command` (with `{model}` the stage's checkpoint directory)
  is run, and coevo waits until the server's model list names that directory as its root.

The server's state is checked each time a model is played, so a resumed run (or a restarted
server) gets the right weights too.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from coevo.policy.base import PolicyError

SERVED_ADAPTER = "served-adapter"


def stack_adapter(start: Path, stage_dir: Path) -> None:
    """Write `stage_dir/served-adapter`: the stage's own adapter (`stage_dir/adapter`) on top of
    the served adapter of the model it started from (`start`, none for the base model)."""
    import torch
    from safetensors.torch import load_file, save_file

    own = stage_dir / "adapter"
    below = start.parent / SERVED_ADAPTER
    layers = [own] if not below.is_dir() else [below, own]
    configs = [json.loads((p / "adapter_config.json").read_text()) for p in layers]
    weights = [load_file(p / "adapter_model.safetensors") for p in layers]
    modules = sorted({k.rsplit(".lora_", 1)[0] for w in weights for k in w})
    stacked: dict[str, torch.Tensor] = {}
    for module in modules:
        a_parts, b_parts = [], []
        for config, w in zip(configs, weights, strict=True):
            r = config["r"]
            scale = config["lora_alpha"] / (r**0.5 if config.get("use_rslora") else r)
            a, b = w.get(f"{module}.lora_A.weight"), w.get(f"{module}.lora_B.weight")
            if a is None:  # a layer this adapter leaves alone: a zero block of its rank
                shape = next(x for x in weights if f"{module}.lora_A.weight" in x)
                a_in = shape[f"{module}.lora_A.weight"].shape[1]
                b_out = shape[f"{module}.lora_B.weight"].shape[0]
                a, b = torch.zeros(r, a_in), torch.zeros(b_out, r)
            # B @ A * scale of each, as one adapter of rank r1 + r2 with scale 1.
            a_parts.append(a.float())
            b_parts.append(b.float() * scale)
        stacked[f"{module}.lora_A.weight"] = torch.cat(a_parts, 0).contiguous()
        stacked[f"{module}.lora_B.weight"] = torch.cat(b_parts, 1).contiguous()
    rank = sum(c["r"] for c in configs)
    targets = sorted({m.rsplit(".", 1)[-1] for m in modules})  # e.g. q_proj, v_proj
    config = {
        **configs[-1],
        "r": rank,
        "lora_alpha": rank,
        "use_rslora": False,
        "target_modules": targets,
        "rank_pattern": {},
        "alpha_pattern": {},
    }
    out = stage_dir / SERVED_ADAPTER
    out.mkdir(exist_ok=True)
    save_file(stacked, out / "adapter_model.safetensors")
    (out / "adapter_config.json").write_text(json.dumps(config, indent=2))


def served_name(server: Any, model_dir: Path, *, main: bool = True) -> str:
    """Make the server of `server` (the recipe's section) serve `model_dir`; the model name
    requests must give for it. Of several processes of one run (`main` False for the others),
    only the main one runs the reload command; every one waits for the server."""
    model_dir = model_dir.resolve()  # the server resolves paths from elsewhere
    if server.reload_command:
        reload(server, model_dir, run_command=main)
        return str(server.model)
    adapter = model_dir.parent / SERVED_ADAPTER
    if not adapter.is_dir():  # the base model, which the server serves from the start
        return str(server.model)
    # Named after the adapter's place, so runs sharing one server do not mix up their stages.
    digest = hashlib.blake2b(str(adapter).encode(), digest_size=4).hexdigest()
    name = f"{model_dir.parent.name}-{digest}"
    if name not in _served(server):
        try:
            _request(server, "/load_lora_adapter", {"lora_name": name, "lora_path": str(adapter)})
        except PolicyError as exc:
            if "already" not in str(exc):  # another process of the run loaded it first
                raise
    return name


def reload(server: Any, model_dir: Path, *, run_command: bool = True) -> None:
    """Run the reload command for `model_dir` unless the server serves it already, then wait
    until it does."""
    if _served(server).get(str(server.model)) == str(model_dir):
        return
    if run_command:
        _run(server.reload_command, model_dir)
    deadline = time.monotonic() + server.reload_timeout
    while time.monotonic() < deadline:
        try:
            if _served(server).get(str(server.model)) == str(model_dir):
                return
        except PolicyError:  # restarting: not answering yet
            pass
        time.sleep(1.0)
    raise PolicyError(
        f"The server did not serve {model_dir} as {server.model!r} within "
        f"server.reload_timeout={server.reload_timeout:g}s after server.reload_command."
    )


def _run(command: str, model_dir: Path) -> None:
    command = command.replace("{model}", shlex.quote(str(model_dir)))
    done = subprocess.run(command, shell=True, capture_output=True, text=True)
    if done.returncode != 0:
        raise PolicyError(
            f"server.reload_command failed (exit {done.returncode}) for {model_dir}: "
            f"{(done.stderr or done.stdout)[-500:]}"
        )


def _served(server: Any) -> dict[str, str]:
    """What the server serves: model name -> its root (the path vLLM loaded it from)."""
    reply = _request(server, "/models", None)
    return {m["id"]: str(m.get("root") or "") for m in reply.get("data", [])}


def _request(server: Any, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
    url = str(server.url).rstrip("/") + path
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="GET" if body is None else "POST")
    request.add_header("Content-Type", "application/json")
    key = os.environ.get(server.api_key_env) if server.api_key_env else None
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=server.timeout) as response:
            text = response.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:500].decode(errors="replace")
        hint = (
            " (vLLM loads adapters at run time only with --enable-lora and "
            "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True)"
            if path == "/load_lora_adapter"
            else ""
        )
        raise PolicyError(f"{url} answered {exc.code} {exc.reason}: {detail}{hint}") from None
    except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
        raise PolicyError(f"Cannot reach {url} ({getattr(exc, 'reason', exc)}).") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError:  # vLLM answers the adapter loading in plain text
        return {"text": text}
