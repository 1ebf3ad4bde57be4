"""The data every part of coevo passes around: tasks, turns, trajectories and preference pairs.

All four are frozen dataclasses with a lossless JSON round-trip (`to_dict` / `from_dict`,
`to_json` / `from_json`), so the store, the exporters and the tests agree on one shape.

A trajectory played by a policy that returned its tokens keeps, on each agent turn, the token
ids it sampled and their log-probs: `coevo.render` then trains on exactly those ids, lined up
with their log-probs (what policy-gradient training needs), rather than on a re-tokenisation
of the text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Literal

Role = Literal["system", "user", "assistant"]
ROLES: tuple[str, ...] = ("system", "user", "assistant")
SUCCESS = 1.0
"""The reward of a solved task: anything below is a failure (both papers)."""


def is_success(reward: float) -> bool:
    return reward >= SUCCESS


@dataclass(frozen=True)
class Task:
    """One instruction of an environment, with what the env needs to replay and score it."""

    id: str
    """Unique within its env, stable across runs (e.g. `shop/train/00042`)."""
    env: str
    """Registry name of the environment the task belongs to."""
    split: str
    """`train`, `test_seen` or `test_unseen`."""
    instruction: str
    """The natural-language instruction shown to the agent."""
    data: dict[str, Any] = field(default_factory=dict, hash=False, compare=True)
    """Env-specific payload (goal attributes, gold SQL, task variation, ...): JSON values only."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "env": self.env,
            "split": self.split,
            "instruction": self.instruction,
            "data": self.data,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Task:
        return cls(
            id=str(d["id"]),
            env=str(d["env"]),
            split=str(d["split"]),
            instruction=str(d["instruction"]),
            data=dict(d.get("data") or {}),
        )


@dataclass(frozen=True)
class Turn:
    """One message of an episode: the agent's text (`assistant`) or what it was shown (`user`)."""

    role: Role
    text: str
    token_ids: tuple[int, ...] | None = None
    """The ids the policy sampled for this reply (agent turns only; None: not kept), from the
    first generated token to the last, an end-of-turn token or a stop string's included. They
    belong to the sampling policy's tokenizer."""
    logprobs: tuple[float, ...] | None = None
    """The log-prob of each of `token_ids` under the sampling policy (temperature 1)."""

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"Turn role must be one of {ROLES}, got {self.role!r}.")
        if self.token_ids is not None:
            if self.role != "assistant":
                raise ValueError("Only an agent (assistant) turn carries sampled token ids.")
            object.__setattr__(self, "token_ids", tuple(int(i) for i in self.token_ids))
        if self.logprobs is not None:
            logprobs = tuple(float(x) for x in self.logprobs)
            if self.token_ids is None or len(logprobs) != len(self.token_ids):
                raise ValueError("A turn's logprobs need its token_ids, one log-prob per id.")
            object.__setattr__(self, "logprobs", logprobs)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"role": self.role, "text": self.text}
        if self.token_ids is not None:
            d["token_ids"] = list(self.token_ids)
        if self.logprobs is not None:
            d["logprobs"] = list(self.logprobs)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Turn:
        ids, logprobs = d.get("token_ids"), d.get("logprobs")
        return cls(
            role=d["role"],
            text=str(d["text"]),
            token_ids=tuple(ids) if ids is not None else None,
            logprobs=tuple(logprobs) if logprobs is not None else None,
        )


@dataclass(frozen=True)
class Trajectory:
    """A whole episode: what the agent saw and wrote, and how it ended.

    `turns[0]` is the user message that opens the episode (the env's instruction prompt and
    first observation); after it, assistant and user turns alternate.
    """

    task: Task
    agent: str
    turns: tuple[Turn, ...]
    reward: float
    terminated: bool
    truncated: bool
    steps: int
    metadata: dict[str, Any] = field(default_factory=dict, hash=False)
    """Free-form: sampling settings, seed, the env's final `info` (reward breakdown), errors."""
    sample: int = 0
    """Which of the samples of its task in one rollout this episode is (0: the first)."""

    @property
    def success(self) -> bool:
        return is_success(self.reward)

    @property
    def agent_texts(self) -> list[str]:
        return [t.text for t in self.turns if t.role == "assistant"]

    def with_metadata(self, **extra: Any) -> Trajectory:
        return replace(self, metadata={**self.metadata, **extra})

    def to_dict(self) -> dict[str, Any]:
        return {
            "task": self.task.to_dict(),
            "agent": self.agent,
            "turns": [t.to_dict() for t in self.turns],
            "reward": self.reward,
            "terminated": self.terminated,
            "truncated": self.truncated,
            "steps": self.steps,
            "sample": self.sample,
            "metadata": self.metadata,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Trajectory:
        return cls(
            task=Task.from_dict(d["task"]),
            agent=str(d["agent"]),
            turns=tuple(Turn.from_dict(t) for t in d["turns"]),
            reward=float(d["reward"]),
            terminated=bool(d["terminated"]),
            truncated=bool(d["truncated"]),
            steps=int(d["steps"]),
            metadata=dict(d.get("metadata") or {}),
            sample=int(d.get("sample", 0)),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)

    @classmethod
    def from_json(cls, s: str) -> Trajectory:
        return cls.from_dict(json.loads(s))


@dataclass(frozen=True)
class Pair:
    """A preference pair over two trajectories of the same task, with its training weights."""

    chosen: Trajectory
    rejected: Trajectory
    kind: str
    """Where the pair comes from, e.g. `expert_vs_target`, `failure_vs_failure`."""
    weight: float = 1.0
    """Weight of the pair's DPO term (Eq. 9)."""
    sft_weight: float = 0.0
    """Weight of the NLL term on the chosen trajectory (Eq. 9); 0 disables it."""
    metadata: dict[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if self.chosen.task.id != self.rejected.task.id:
            raise ValueError(
                f"A pair compares two attempts at one task, got {self.chosen.task.id!r} "
                f"and {self.rejected.task.id!r}."
            )

    @property
    def task(self) -> Task:
        return self.chosen.task

    def to_dict(self) -> dict[str, Any]:
        return {
            "chosen": self.chosen.to_dict(),
            "rejected": self.rejected.to_dict(),
            "kind": self.kind,
            "weight": self.weight,
            "sft_weight": self.sft_weight,
            "metadata": self.metadata,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Pair:
        return cls(
            chosen=Trajectory.from_dict(d["chosen"]),
            rejected=Trajectory.from_dict(d["rejected"]),
            kind=str(d["kind"]),
            weight=float(d.get("weight", 1.0)),
            sft_weight=float(d.get("sft_weight", 0.0)),
            metadata=dict(d.get("metadata") or {}),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)

    @classmethod
    def from_json(cls, s: str) -> Pair:
        return cls.from_dict(json.loads(s))
