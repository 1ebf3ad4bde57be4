"""The Policy contract: sampling settings in, completions out, over a batch of prompts.

Prompts are token-id lists made by `coevo.render` (`render_prompt` or an incremental
`Conversation`) with the policy's own `tokenizer`. Ids rather than turns because the rollout
loop keeps each conversation tokenised and only appends the new pieces, and because the text a
model is trained on must be exactly the text it generates from; an OpenAI-compatible server
(vLLM, SGLang) accepts token-id prompts too.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal, Protocol, runtime_checkable

DEFAULT_STOP: tuple[str, ...] = ("\nObservation:", "\nTask:")


class PolicyError(Exception):
    """A user-facing problem loading or running a policy: names the thing and the fix."""


@dataclass(frozen=True)
class Sampling:
    """How to decode: greedy when `temperature` is 0, else temperature / top-p sampling."""

    temperature: float = 0.0
    """0 means greedy (argmax); above 0, logits are divided by it before sampling."""
    top_p: float = 1.0
    """Nucleus sampling: keep the smallest set of tokens whose probability reaches top_p."""
    max_new_tokens: int = 128
    """Generation stops after this many tokens (finish_reason "length")."""
    stop: tuple[str, ...] = DEFAULT_STOP
    """Text that ends a reply; the completion's text stops before it (ETO's stop strings)."""
    seed: int | None = None
    """Seed of the sampling RNG when no per-prompt seeds are given; None = not reproducible."""
    logprobs: bool = False
    """Return the generated token ids and their log-probabilities under the model."""

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}.")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}.")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be at least 1, got {self.max_new_tokens}.")
        object.__setattr__(self, "stop", tuple(self.stop))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["stop"] = list(self.stop)
        return d


def cut_at_stop(text: str, stop: tuple[str, ...]) -> str:
    """`text` up to the first place any stop string starts (all of it when none occurs)."""
    cut = min((i for i in (text.find(s) for s in stop) if i >= 0), default=-1)
    return text[:cut] if cut >= 0 else text


FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class Completion:
    """One generated reply.

    `text` excludes the end-of-turn token and anything from a stop string on. `token_ids` and
    `logprobs` (when asked for) cover every generated token, the end-of-turn token or the
    stop string's tokens included; log-probs are under the model's own distribution
    (temperature 1, no top-p), which is what policy-gradient losses need.
    """

    text: str
    finish_reason: FinishReason
    token_ids: tuple[int, ...] | None = None
    logprobs: tuple[float, ...] | None = None


@runtime_checkable
class Policy(Protocol):
    """Anything that turns a batch of token-id prompts into completions."""

    name: str
    tokenizer: Any
    max_context: int
    """Longest prompt + completion the model takes, in tokens."""

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        sampling: Sampling,
        *,
        seeds: Sequence[int] | None = None,
    ) -> list[Completion]:
        """One completion per prompt; `seeds` (one per prompt) make each row reproducible
        whatever else is in the batch."""
        ...


@runtime_checkable
class SessionPolicy(Policy, Protocol):
    """A policy that can keep each episode's key/value cache between calls (`HFPolicy`).

    With `sessions` (one key per prompt, e.g. an episode), a later prompt under the same key
    that extends the tokens already seen runs the model on the new tokens only; the results
    are the same as without sessions. `end_sessions` frees the caches of finished episodes.
    """

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        sampling: Sampling,
        *,
        seeds: Sequence[int] | None = None,
        sessions: Sequence[Hashable] | None = None,
    ) -> list[Completion]: ...

    def end_sessions(self, keys: Iterable[Hashable]) -> None: ...
