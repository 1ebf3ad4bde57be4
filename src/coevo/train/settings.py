"""The settings every trainer shares: optimiser and schedule, LoRA, checkpoints, compute.

Each trainer config (`SftConfig`, `DpoConfig`, `GrpoConfig`) is a `TrainerConfig`: it nests
these groups rather than repeating their fields, so a setting is written and documented once:

    SftConfig(optim=Optim(lr=5e-5), lora=Lora(r=16), checkpoints=Checkpoints(save_every=50))

and in a recipe `sft.optim.lr=5e-5 sft.lora.r=16`. The loop helpers take the group they need
(`loop.make_optimizer(net, config.optim, device)`, `model.trainable(model, config.compute,
config.lora)`, `loop.CheckpointDir(out, accelerator, config.checkpoints)`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Literal

Schedule = Literal["cosine", "constant", "linear"]
Precision = Literal["auto", "no", "bf16", "fp16"]
LLAMA_LINEAR = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class Optim:
    """AdamW and its learning-rate schedule (defaults: the paper's SFT)."""

    lr: float = 1e-5
    """Peak AdamW learning rate."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    warmup_ratio: float = 0.03
    """Share of the steps spent in linear warm-up."""
    schedule: Schedule = "cosine"
    """After warm-up: `cosine` (to 0), `linear` (to 0) or `constant`."""
    max_grad_norm: float = 1.0
    """Gradient clipping by global norm; 0 disables it."""

    def check(self, where: str) -> None:
        if not 0 <= self.warmup_ratio < 1:
            raise ValueError(f"{where}.warmup_ratio must be in [0, 1), got {self.warmup_ratio}.")


@dataclass(frozen=True)
class Lora:
    """LoRA adapters (PEFT); the trained model is saved with them merged into its weights."""

    r: int = 0
    """Rank; 0 trains every weight (no adapters)."""
    alpha: int = 16
    """Scaling numerator (scale = alpha / r)."""
    dropout: float = 0.0
    """Dropout on the adapters' input."""
    target_modules: tuple[str, ...] = field(default=LLAMA_LINEAR)
    """Names of the linear layers that get adapters (`["all-linear"]` for all of them)."""


@dataclass(frozen=True)
class Checkpoints:
    """When a run saves its state and how many states it keeps. Whether a call resumes,
    stops early or writes its model is the caller's to say: `train_*(resume=...,
    stop_after_steps=..., save_model=...)` (`coevo.train.loop`)."""

    save_every: int = 200
    """Checkpoint every this many optimizer steps; one is always written at the end (the
    weights alone: `coevo.train.loop`)."""
    save_every_minutes: float = 3.0
    """Also checkpoint once the last checkpoint is this old, so a kill costs minutes of
    training at most, however far apart `save_every` steps are (0: by steps only). A
    checkpoint holds the weights and the AdamW state: about 12 bytes per trained weight."""
    save_total_limit: int = 2
    """Checkpoints kept (oldest deleted first)."""
    keep_stage_ends: bool = False
    """Also keep, past `save_total_limit`, the checkpoint where a call stops before the run's
    last step (`stop_after_steps`: the end of each GRPO evaluation interval), so that another
    run whose steps up to there are the same starts from it (`init_from`:
    `coevo.methods.runner.adopt`). Each costs about 12 bytes per trained weight on disk."""

    def check(self, where: str) -> None:
        for name in ("save_every", "save_total_limit"):
            if getattr(self, name) < 1:
                raise ValueError(f"{where}.{name} must be >= 1, got {getattr(self, name)}.")
        if not self.save_every_minutes >= 0:
            raise ValueError(
                f"{where}.save_every_minutes must be >= 0 (0: by steps only), got "
                f"{self.save_every_minutes}."
            )


@dataclass(frozen=True)
class Compute:
    """How a step is computed: precision, activation memory, how deep the backward pass goes."""

    mixed_precision: Precision = "auto"
    """`auto` (bf16 on a GPU that has it, else off), `no`, `bf16` or `fp16`."""
    gradient_checkpointing: bool = False
    """Recompute activations in the backward pass: far less memory, about a third more time."""
    compile: bool | Literal["auto"] = "auto"
    """Run the decoder layers compiled while training (`torch.compile`, shapes dynamic;
    `coevo.train.model.CompiledLayers`): fewer kernel launches on a GPU, where a small model's
    step waits on them, for a compilation at the first step (20-90 s on a GPU). Measured on an
    H100 and an H200: DPO 2.6-3.0x TRL's tokens/s compiled against 1.1x eager, SFT 2.7-3.3x
    (benchmarks/results/*-cuda.md). `auto` compiles where that pays back: on a GPU, for a
    stage that plans at least `coevo.train.model.COMPILE_TOKENS` tokens (`compiling`); never
    on the CPU, nor for GRPO (its tokens are not known ahead). true / false: always / never."""
    train_layers: int = 0
    """Train only the top N decoder layers (with LoRA: put adapters only there); 0 trains all.
    The backward pass stops below them, so a step costs much less (measured in
    benchmarks/results/learning.md). Embeddings (tied to the LM head in small models) stay frozen when N > 0."""

    def check(self, where: str) -> None:
        if self.train_layers < 0:
            raise ValueError(
                f"{where}.train_layers must be >= 0 (0: all), got {self.train_layers}."
            )


@dataclass(frozen=True)
class Tracking:
    """Where a trainer's metrics go besides `metrics.jsonl`: accelerate's experiment trackers."""

    log_with: str | None = None
    """Trackers, several joined by commas: tensorboard, wandb, mlflow, comet_ml, aim, clearml,
    dvclive, trackio, swanlab, or all (every one installed); None: metrics.jsonl only. Those
    that write files write them into the stage's folder (tensorboard: `<stage>/<project>/`)."""
    project: str = "coevo"
    """The project name the trackers file the runs under."""

    def names(self) -> list[str]:
        return [n.strip() for n in (self.log_with or "").split(",") if n.strip()]

    def check(self, where: str) -> None:
        from accelerate.tracking import get_available_trackers
        from accelerate.utils import LoggerType

        known = [t.value for t in LoggerType]
        available = {str(t) for t in get_available_trackers()}
        for name in self.names():
            if name not in known:
                raise ValueError(
                    f"{where}.log_with: unknown tracker {name!r}; use {', '.join(known)}."
                )
            if name != "all" and name not in available:
                raise ValueError(
                    f"{where}.log_with: {name} is not installed here (pip install {name}), so "
                    "nothing would be logged to it."
                )


@dataclass(frozen=True)
class TrainerConfig:
    """The groups every trainer config has (`SftConfig`, `DpoConfig`, `GrpoConfig` add their
    own settings and may give a group other defaults), and the checks they share."""

    progress: bool = True
    """Show rich progress bars."""
    optim: Optim = field(default_factory=Optim)
    """AdamW and its learning-rate schedule."""
    lora: Lora = field(default_factory=Lora)
    checkpoints: Checkpoints = field(default_factory=Checkpoints)
    compute: Compute = field(default_factory=Compute)
    tracking: Tracking = field(default_factory=Tracking)
    """Experiment trackers beside metrics.jsonl (`tracking.log_with: tensorboard`); off."""

    COUNTS: ClassVar[tuple[str, ...]] = ()
    """The settings that count something, each >= 1."""

    def validate(self) -> None:
        """The checks every trainer config shares: its counts and its groups (a subclass adds
        its own after these)."""
        name = type(self).__name__
        for count in self.COUNTS:
            value = getattr(self, count)
            if value < 1:
                raise ValueError(f"{name}.{count} must be >= 1, got {value}.")
        self.optim.check(f"{name}.optim")
        self.checkpoints.check(f"{name}.checkpoints")
        self.compute.check(f"{name}.compute")
        self.tracking.check(f"{name}.tracking")


# What a call of a trainer decides, no longer settings: `train_*(resume=..., stop_after_steps=...,
# save_model=...)`. A recipe that sets one is told so; a run saved with them reads on.
RUN_DECIDES: dict[str, str] = {
    name: f"the stage decides it (train_*'s `{arg}` argument); a run resumes after a kill, "
    "stops with Ctrl-C and always hands its model on"
    for name, arg in (
        ("resume", "resume"),
        ("stop_after_steps", "stop_after_steps"),
        ("save_final_model", "save_model"),
    )
}

# Where the settings of a trainer config went when they moved into the groups (old -> new),
# so a recipe written before names the new place rather than failing as a typo.
MOVED_INTO_GROUPS: dict[str, str] = {
    **{name: f"optim.{name}" for name in ("lr", "weight_decay", "warmup_ratio", "schedule")},
    "max_grad_norm": "optim.max_grad_norm",
    **{f"lora_{name}": f"lora.{name}" for name in ("r", "alpha", "dropout", "target_modules")},
    **{
        name: f"checkpoints.{name}"
        for name in ("save_every", "save_every_minutes", "save_total_limit")
    },
    **{
        name: f"compute.{name}"
        for name in ("mixed_precision", "gradient_checkpointing", "train_layers")
    },
}


def settings_record(config: Any, seed: int) -> dict[str, Any]:
    """What a run trained with, as written beside its model: the config and the seed."""
    return {**asdict(config), "seed": seed}
