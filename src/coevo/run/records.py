"""What each stage of a run records: small typed records, one per kind of stage.

A stage returns one; the pipeline writes `to_dict()` into the stage's manifest (`outputs`), a
rerun that skips the stage reads it back with `from_dict`, and `coevo compare` reads runs
through `read`. The JSON is the shape runs have always written, `{"kind": ..., fields}`, so
runs made before these records existed read the same.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar, TypeVar

T = TypeVar("T")
P = TypeVar("P", bound="_Plain")


@dataclass(frozen=True)
class EpisodeStats:
    """How a set of episodes went (`coevo.analysis.outcomes.episode_stats`)."""

    reward: float
    """Mean final reward."""
    success: float
    """Share of episodes with reward 1."""
    n: int = 0
    """Episodes."""
    mean_steps: float | None = None
    """Mean steps per episode (None: recorded before it was kept)."""
    format_error_rate: float | None = None
    """Replies with no parsable action, per step."""
    invalid_action_rate: float | None = None
    """Actions the env could not carry out, per step."""

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EpisodeStats:
        return _from(cls, d)


def _names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def _plain(record: Any) -> dict[str, Any]:
    """`{"kind": ..., fields}` of a record (EpisodeStats inside it without their Nones)."""
    out: dict[str, Any] = {"kind": record.KIND}
    for name in _names(type(record)):
        value = getattr(record, name)
        if isinstance(value, EpisodeStats):
            value = value.to_dict()
        elif isinstance(value, dict):
            value = {k: v.to_dict() if isinstance(v, EpisodeStats) else v for k, v in value.items()}
        out[name] = value
    return out


def _stats(d: dict[str, Any]) -> dict[str, EpisodeStats]:
    return {k: EpisodeStats.from_dict(v) for k, v in d.items()}


def _from(cls: type[T], d: dict[str, Any], **convert: Callable[[Any], Any]) -> T:
    """A record of `cls` from a manifest's outputs: the fields there are (one that is not, as
    in a run from before it was recorded, keeps its default), each through its converter."""
    return cls(**{k: convert.get(k, _same)(d[k]) for k in _names(cls) if k in d})


def _same(value: Any) -> Any:
    return value


class _Plain:
    """`to_dict` / `from_dict` of a record whose manifest shape is `{"kind": ..., fields}`;
    `CONVERT` names the fields read back through a converter."""

    KIND: ClassVar[str]
    CONVERT: ClassVar[dict[str, Callable[[Any], Any]]] = {}

    def to_dict(self) -> dict[str, Any]:
        return _plain(self)

    @classmethod
    def from_dict(cls: type[P], d: dict[str, Any]) -> P:
        return _from(cls, d, **cls.CONVERT)


@dataclass(frozen=True)
class ExpertsRecord(_Plain):
    """Stage `experts`: the demonstrations of the train tasks."""

    KIND: ClassVar[str] = "experts"
    tasks: int
    solved: int
    """Tasks whose expert reached reward 1 (the others have no demonstration)."""
    refused: list[str] = field(default_factory=list)
    """The first tasks whose expert the env refused, with its reason."""


@dataclass(frozen=True)
class SftRecord(_Plain):
    """A fine-tuning stage (`sft-<agent>`, `rft-<round>`) or a model's warm-up."""

    KIND: ClassVar[str] = "sft"
    examples: int
    steps: int
    final_loss: float | None = None
    held_out_loss: list[float] | None = None
    """Loss per agent token on held-out demonstrations (the validation slice's) before
    training and at its end, where the stage had them."""


@dataclass(frozen=True)
class ModelRecord:
    """Stage `model`: a locally initialised model (sizes, vocabulary) and its warm-up."""

    KIND: ClassVar[str] = "model"
    info: dict[str, Any]
    """What `coevo.policy.tiny.init_model` reports (written flat into the manifest)."""
    pretrain: SftRecord | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {"kind": self.KIND, **self.info}
        if self.pretrain is not None:
            out["pretrain"] = self.pretrain.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ModelRecord:
        info = {k: v for k, v in d.items() if k not in ("kind", "pretrain")}
        pretrain = SftRecord.from_dict(d["pretrain"]) if d.get("pretrain") else None
        return cls(info, pretrain)


@dataclass(frozen=True)
class DpoRecord(_Plain):
    """A preference stage (`dpo-<iteration>-<agent>`)."""

    KIND: ClassVar[str] = "dpo"
    pairs: int
    pair_kinds: dict[str, int] = field(default_factory=dict)
    steps: int = 0
    final: dict[str, float] = field(default_factory=dict)
    """The numbers of the last logged step (loss, reward accuracy, margins, ...)."""
    skipped: bool = False
    """No pairs: the model carried over untrained."""


@dataclass(frozen=True)
class GrpoRecord(_Plain):
    """A GRPO interval (`grpo-<interval>`): the steps it trained and how their rollouts went."""

    KIND: ClassVar[str] = "grpo"
    steps: int
    """GRPO steps done by the end of the stage (all intervals so far)."""
    first_step: int = 1
    """The first step this stage trained."""
    reward: list[float] = field(default_factory=list)
    """Mean reward of each step's rollouts, from `first_step` on."""
    success: list[float] = field(default_factory=list)
    """Success rate of each step's rollouts."""
    no_signal: list[float] = field(default_factory=list)
    """Share of each step's task groups whose samples all scored the same."""
    final: dict[str, float] = field(default_factory=dict)
    """The numbers of the stage's last step (metrics.jsonl)."""


@dataclass(frozen=True)
class EvolveRecord(_Plain):
    """An agent-data round (`evolve-<round>`): the signals of its GRPO steps, the explorations
    they steered, and the tasks that came of them."""

    KIND: ClassVar[str] = "evolve"
    round: int
    steps: list[int] = field(default_factory=list)
    """The GRPO steps whose rollouts gave the signals."""
    signals: dict[str, int] = field(default_factory=dict)
    """Signals of each kind (forgetting, boundary, rare) over the round's steps."""
    signals_per_step: dict[str, dict[str, int]] = field(default_factory=dict)
    """Step -> kind -> signals."""
    explorations: int = 0
    candidates: int = 0
    verified: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    """Reason (malformed, test_overlap, duplicate, unsolvable, nondeterministic) -> count."""
    train_tasks: int = 0
    """Synthesized tasks in the train set after the round (all rounds so far)."""
    explorer: str = "llm"
    """Who explored: `llm` (a policy), `random` or `guided` walks (`agent_data.explorer.kind`)."""
    batch_share: float = 0.0
    """Share of the round's GRPO episodes that played a synthesized task (earlier rounds')."""
    next_batch_share: float = 0.0
    """Share of each later batch that the mixture gives synthesized tasks after the round."""


@dataclass(frozen=True)
class ExploreRecord(_Plain):
    """An exploration stage (`explore-<iteration>-<agent>`, RFT's sampling rounds)."""

    KIND: ClassVar[str] = "explore"
    CONVERT: ClassVar[dict[str, Callable[[Any], Any]]] = {"stats": _stats}
    iteration: int
    episodes: int = 0
    mean_reward: float = 0.0
    stats: dict[str, EpisodeStats] = field(default_factory=dict)
    """Agent -> how its episodes went."""
    outcomes: dict[str, dict[str, float]] = field(default_factory=dict)
    """Agent -> share of success, hard negative and failure (the paper's Table 2)."""


@dataclass(frozen=True)
class EvalRecord(_Plain):
    """An evaluation stage (`eval-<iteration>`): greedy episodes on each evaluated split."""

    KIND: ClassVar[str] = "eval"
    CONVERT: ClassVar[dict[str, Callable[[Any], Any]]] = {"splits": _stats}
    iteration: int
    """0: after SFT; i: after iteration (or RFT round) i."""
    splits: dict[str, EpisodeStats]


Record = (
    ExpertsRecord
    | ModelRecord
    | SftRecord
    | DpoRecord
    | GrpoRecord
    | EvolveRecord
    | ExploreRecord
    | EvalRecord
)
KINDS: dict[str, Any] = {
    r.KIND: r
    for r in (
        ExpertsRecord,
        ModelRecord,
        SftRecord,
        DpoRecord,
        GrpoRecord,
        EvolveRecord,
        ExploreRecord,
        EvalRecord,
    )
}


def read(outputs: dict[str, Any]) -> Record | None:
    """The record of a manifest's `outputs` (None: a kind this version does not know)."""
    kind = KINDS.get(outputs.get("kind", ""))
    return kind.from_dict(outputs) if kind is not None else None
