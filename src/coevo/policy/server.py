"""An OpenAI-compatible completions server (vLLM, SGLang, ...) as a Policy.

Prompts stay token ids: `POST {base_url}/completions` takes `prompt` as a list of ints, so the
server generates from exactly the text `render_prompt` built with the same tokenizer. Each
prompt is its own request, sent concurrently, so every row can carry its own seed and the
server batches them as it likes (vLLM and SGLang batch concurrent requests continuously).

Only the standard library speaks HTTP here. `logprobs` asks for one log-prob per generated
token; `return_tokens_as_token_ids` (a vLLM extension other servers ignore) makes the server
name each token `token_id:<id>`, which is how `Completion.token_ids` is filled. A server that
gives token strings instead leaves `token_ids` as None rather than guessing them.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from coevo.policy.base import Completion, PolicyError, Sampling, cut_at_stop
from coevo.render import RenderError, check_chat_template


class ServerPolicy:
    """Generation by a completions server; the tokenizer comes from a local path."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        tokenizer: Path | str,
        name: str | None = None,
        api_key: str | None = None,
        max_context: int | None = None,
        timeout: float = 600.0,
        max_concurrency: int = 64,
    ) -> None:
        from transformers import AutoTokenizer

        self.url = base_url.rstrip("/") + "/completions"
        self.model = model
        self.name = name or model
        self.api_key = api_key
        self.timeout = timeout
        self.max_concurrency = max_concurrency
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(tokenizer)
        except OSError as exc:
            raise PolicyError(
                f"No tokenizer at {str(tokenizer)!r} ({exc}): pass the local directory of the "
                "served model's tokenizer, so prompts are the ids the server expects."
            ) from None
        try:
            check_chat_template(self.tokenizer)
        except RenderError as exc:
            raise PolicyError(str(exc)) from None
        self.max_context = max_context or int(self.tokenizer.model_max_length or 0)
        if not 0 < self.max_context < 1 << 24:  # transformers' "no limit" is a huge number
            raise PolicyError(
                "The tokenizer gives no usable context length: pass max_context= (the served "
                "model's prompt + completion limit in tokens)."
            )

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        sampling: Sampling,
        *,
        seeds: Sequence[int] | None = None,
    ) -> list[Completion]:
        if seeds is not None and len(seeds) != len(prompts):
            raise ValueError(f"seeds must give one per prompt: {len(seeds)} for {len(prompts)}.")
        if not prompts:
            return []
        row_seeds = list(seeds) if seeds is not None else [sampling.seed] * len(prompts)
        bodies = [self._body(list(p), sampling, s) for p, s in zip(prompts, row_seeds, strict=True)]
        workers = min(self.max_concurrency, len(bodies))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            replies = list(pool.map(self._post, bodies))
        return [self._completion(reply, sampling) for reply in replies]

    def _body(self, prompt: list[int], sampling: Sampling, seed: int | None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": sampling.max_new_tokens,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "n": 1,
        }
        if sampling.stop:
            body["stop"] = list(sampling.stop)
        if seed is not None and not sampling.greedy:
            body["seed"] = int(seed)
        if sampling.logprobs:
            body["logprobs"] = 1
            body["return_tokens_as_token_ids"] = True
        return body

    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(
            self.url, data=json.dumps(body).encode(), headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:500].decode(errors="replace")
            raise PolicyError(f"{self.url} answered {exc.code} {exc.reason}: {detail}") from None
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            reason = getattr(exc, "reason", exc)
            raise PolicyError(
                f"Cannot reach {self.url} ({reason}): start the server (e.g. `vllm serve "
                f"MODEL`) or fix base_url."
            ) from None
        except json.JSONDecodeError:
            raise PolicyError(f"{self.url} answered with something that is not JSON.") from None

    def _completion(self, reply: dict[str, Any], sampling: Sampling) -> Completion:
        try:
            choice = reply["choices"][0]
            text = choice["text"]
        except (KeyError, IndexError, TypeError):
            raise PolicyError(f"{self.url} gave no completion: {str(reply)[:300]}") from None
        # Servers cut at a stop string and leave it out; cut again in case one does not.
        text = cut_at_stop(text, sampling.stop)
        finish = "length" if choice.get("finish_reason") == "length" else "stop"
        token_ids = logprobs = None
        if sampling.logprobs and choice.get("logprobs"):
            logprobs = tuple(float(x) for x in choice["logprobs"].get("token_logprobs") or ())
            tokens = choice["logprobs"].get("tokens") or ()
            if all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
                token_ids = tuple(int(t.split(":", 1)[1]) for t in tokens)
        return Completion(text=text, finish_reason=finish, token_ids=token_ids, logprobs=logprobs)
