"""The recipe of a run: one dataclass per part, one docstring per field.

YAML files in `configs/` overlay these defaults and `key=value` overrides overlay the YAML
(`coevo run configs/shop/eto.yaml model.size=nano iterations=2`). The resolved recipe is
saved as `config.yaml` in the run directory, with only the sections its method reads
(`coevo.methods.registry`). Defaults follow the paper's Appendix B where they fit small models
on a CPU; the YAML recipes say where they differ. Settings of one method live in a section of
that name (`eto.later_lr`, `failure_agent.lambda_sft`), read by that method's loop.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from coevo.config import (
    ConfigError,
    build,
    load,
    merge,
    parse_overrides,
    read_yaml,
    upgrade,
)
from coevo.envs.base import SPLITS
from coevo.policy.base import Sampling
from coevo.train.dpo import DpoConfig
from coevo.train.grpo import GrpoConfig
from coevo.train.settings import MOVED_INTO_GROUPS, RUN_DECIDES
from coevo.train.sft import SftConfig


@dataclass
class SamplingSection:
    """How a stage samples replies; `.sampling()` is the policy's `Sampling` with these values."""

    temperature: float = 1.0
    """0 = greedy (argmax); above 0, logits are divided by it before sampling."""
    top_p: float = 1.0
    """Nucleus sampling: keep the smallest set of tokens whose probability reaches top_p."""
    max_new_tokens: int = 96
    """Longest reply per step of an episode."""

    def sampling(self, **fixed: Any) -> Sampling:
        """The policy's `Sampling`: these values and what the stage fixes (seed, logprobs,
        another max_new_tokens)."""
        values = {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_new_tokens": self.max_new_tokens,
        }
        return Sampling(**{**values, **fixed})

    def validate(self) -> None:
        try:
            self.sampling()
        except ValueError as exc:  # config.build names the recipe key: explore.sampling.top_p
            raise ValueError(f"{type(self).__name__}.{exc}") from None


@dataclass
class ModelSource:
    """Where a model's weights come from: a pretrained model coevo installs, or a local
    checkpoint (the run's model and the agent_data explorer both say it this way)."""

    name: str | None = None
    """A pretrained model coevo can install (`coevo model get --list`), e.g. smollm2-135m:
    converted once into `$COEVO_CACHE/models/<name>` and loaded from there."""
    path: str | None = None
    """A local Hugging Face checkpoint directory (instead of `name`)."""

    def check_source(self, prefix: str) -> None:
        if self.name is not None and self.path is not None:
            raise ConfigError(f"{prefix}.name and {prefix}.path are both set: give one of them.")
        if self.name is not None:
            from coevo.policy.models import PRETRAINED

            if self.name not in PRETRAINED:
                raise ConfigError(
                    f"{prefix}.name: unknown pretrained model {self.name!r}; use one of "
                    f"{', '.join(PRETRAINED)} (or {prefix}.path for a local checkpoint)."
                )


@dataclass
class EnvSection:
    name: str = "shop"
    """Registered env name (`coevo env list`) or 'package.module:EnvClass'."""
    options: dict[str, Any] = field(default_factory=dict)
    """Keyword options of the env constructor (e.g. n_products, data, max_steps)."""
    train_tasks: int | None = None
    """Use the first N train tasks (None: all of them)."""
    eval_tasks: int | None = None
    """Evaluate on the first N tasks of each test split (None: all of them)."""
    valid_tasks: int = 0
    """Hold out the last N tasks of the env's train split as split `valid` (add it to
    eval.splits): settings are chosen on it, never on the test splits. Never trained on."""


@dataclass
class ModelSection(ModelSource):
    size: Literal["nano", "tiny", "small"] = "nano"
    """Size of the locally initialised model when neither `name` nor `path` is given (about
    1M / 3M / 10M parameters, random weights: for tests and format checks, not learning)."""
    dtype: str = "auto"
    """Generation dtype: auto (bf16 on a GPU that has it, else float32), float32, bfloat16."""
    device: str = "auto"
    """Where the run's models run: auto, cpu, cuda, cuda:1, ... Generation uses it as given
    (`auto`: each process's GPU, else the CPU); training runs on the CPU when it is `cpu` and
    otherwise where accelerate puts it (each process's GPU; CUDA_VISIBLE_DEVICES picks them)."""
    max_length: int = 2048
    """Token budget of one episode for training and generation; older turns are dropped."""
    cut_block: int = 0
    """Tokens a generation prompt drops at a time once an episode outgrows max_length (0: just
    what it must): the cut then moves about once per that many tokens instead of at every
    step, so an episode's cached prefix is not prefilled again at every step
    (`coevo.render`). It changes what the agent sees: part of a run's identity."""
    decode: Literal["auto", "eager", "static", "graphs"] = "auto"
    """How in-process generation decodes (`coevo.policy.static_decode`): eager (a growing
    cache), static (fixed shapes), graphs (fixed shapes compiled, captured as CUDA graphs on a
    GPU); auto: the COEVO_DECODE environment variable if set, else graphs on CUDA and eager
    elsewhere (docs/models.md). Not part of a run's identity: greedy replies are the
    same either way (within the tolerance tests/test_gpu.py states in bf16)."""
    pretrain_epochs: int = 0
    """Language-model warm-up of a locally initialised model (ignored with `path`): epochs over
    the expert episodes of the train tasks with the loss on every token, observations
    included, before any SFT. 0 skips it. It gives a random-init model many more tokens to
    learn from than the agent's alone: on nano shop models it lowered the SFT loss and fixed
    the reply format, but did not make them copy from their context
    (benchmarks/results/learning.md)."""
    pretrain_lr: float = 2e-3
    """Peak learning rate of the warm-up; batch size and schedule are the sft section's."""
    backend: Literal["hf", "server"] = "hf"
    """How exploration and evaluation generate: `hf` runs each stage's checkpoint in-process
    (HFPolicy); `server` sends the prompts to the OpenAI-compatible server of the `server`
    section (ServerPolicy, prompts tokenised with the stage's checkpoint's tokenizer). The
    server starts out serving the run's base model; after each training stage it is made to
    serve the new weights before they are played: with LoRA each stage's adapter is loaded by
    name (vLLM's runtime LoRA loading), otherwise `server.reload_command` is run (README,
    Scaling out)."""
    cpu_threads: int | None = None
    """torch intra-op threads on the CPU; None picks what was measured fastest for the model
    on a 2-core VM: 1 for the tiny sizes, 2 for smollm2-135m (figures in docs/models.md),
    torch's default (all cores) for a local path."""

    def threads(self) -> int | None:
        """The torch thread count to set (None: leave torch's default)."""
        if self.cpu_threads is not None:
            return self.cpu_threads
        if self.name is not None:
            from coevo.policy.models import packaged

            return packaged(self.name).cpu_threads
        return None if self.path is not None else 1


@dataclass
class ServerSection:
    """The generation server of `model.backend: server`."""

    url: str | None = None
    """Base URL of its OpenAI-compatible API, e.g. http://gpu-box:8000/v1."""
    model: str | None = None
    """The name it serves the model under (`vllm serve MODEL --served-model-name NAME`)."""
    api_key_env: str | None = None
    """Environment variable holding its API key, if it wants one (never the key itself)."""
    max_context: int | None = None
    """Prompt + completion limit in tokens (None: the tokenizer's model_max_length)."""
    timeout: float = 600.0
    """Seconds to wait for one completion."""
    max_concurrency: int = 64
    """Requests in flight at once."""
    reload_command: str | None = None
    """Shell command that makes the server serve the checkpoint a training stage wrote, with
    `{model}` replaced by its directory (e.g. a script restarting `vllm serve {model}
    --served-model-name NAME`); coevo runs it, then waits until the server's model list names
    that directory. Needed unless every trainer the method uses has LoRA (`sft.lora.r`,
    `dpo.lora.r`), whose adapters are loaded by name instead."""
    reload_timeout: float = 1800.0
    """Seconds to wait for the server to come back with the new weights after a reload."""


@dataclass
class RolloutSection:
    """Where the envs of exploration and evaluation run (not part of a run's identity: the
    episodes are the same either way, so a run may resume with other settings here)."""

    workers: int = 0
    """Env worker processes on Ray, stepping their envs in parallel (0: every env steps in this
    process). Needs Ray: pip install 'coevo[ray]'."""
    ray_address: str | None = None
    """An existing Ray cluster to join (`ray start --head` prints it, e.g. 10.0.0.1:6379);
    None starts a local Ray with `workers` CPUs."""


@dataclass
class ExploreSection:
    samples: int = 1
    """Rollouts per training task and agent in each iteration (the paper: 1)."""
    sampling: SamplingSection = field(default_factory=SamplingSection)
    """How exploration samples (temperature 0 = greedy, as ETO's scripts do)."""
    batch_size: int = 32
    """Episodes advancing together in one batched generate."""
    chunk: int = 128
    """Tasks per rollout call. Episodes are stored as they end (under accelerate launch, once
    a chunk's episodes are back from every process): a killed exploration resumes from them."""


@dataclass
class EvalSection:
    splits: list[str] = field(default_factory=lambda: ["test_seen", "test_unseen"])
    """Splits evaluated (greedy) after SFT and after every iteration."""
    batch_size: int = 32
    """Episodes advancing together in one batched generate."""
    sampling: SamplingSection = field(default_factory=lambda: SamplingSection(temperature=0.0))
    """How evaluation samples: greedy by default (the papers' evaluation)."""


@dataclass
class AnalysisSection:
    hard_negative_threshold: float = 0.6
    """Rewards in [threshold, 1) count as hard negatives in the outcome shares (Table 2)."""

    def validate(self) -> None:
        if not 0 < self.hard_negative_threshold < 1:
            raise ConfigError("analysis.hard_negative_threshold must be in (0, 1).")


@dataclass
class EtoSection:
    """ETO's schedule of preference phases, which the failure-agent methods follow too."""

    later_lr: float | None = 5e-7
    """DPO learning rate from the second iteration on (ETO: 5e-7); None keeps dpo.optim.lr."""
    later_beta: float | None = 0.5
    """DPO beta from the second iteration on (ETO: 0.5); None keeps dpo.beta."""


@dataclass
class FailureAgentSection:
    """The failure-agent co-evolution and its second-agent ablations."""

    lambda_sft: float = 0.1
    """SFT weight of the target's expert-vs-prediction pairs (Eq. 9; the paper's ablation:
    0.01, 0.1, 0.5)."""
    within_agent_pairs: bool = True
    """Also pair failures of one agent on one task (only matters when explore.samples > 1)."""


@dataclass
class RftSection:
    rounds: int = 1
    """Rejection-sampling rounds: sample, keep successes, fine-tune on experts + successes."""
    samples: int = 4
    """Samples per task per round (uniform RFT)."""
    dart: bool = False
    """DART-style difficulty-aware sampling: probe every task, spend the budget on hard ones."""
    dart_probes: int = 5
    """Probe samples per task (DART)."""
    dart_budget: int = 10
    """Total samples per task the hardest tasks may get (DART)."""


@dataclass(frozen=True)
class GrpoSection(GrpoConfig):
    """The trainer's settings (`coevo.train.grpo.GrpoConfig`) and how its episodes sample:
    the trainer reads the episodes, the method plays them."""

    sampling: SamplingSection = field(default_factory=lambda: SamplingSection(temperature=0.9))
    """How the rollouts sample (the policy's log-probs are taken at temperature 1)."""

    def validate(self) -> None:
        super().validate()
        if self.sampling.temperature <= 0:
            raise ValueError(
                "GrpoSection.sampling.temperature must be > 0: greedy samples of a task are all "
                f"alike, got {self.sampling.temperature}."
            )


SIGNAL_KINDS = ("forgetting", "boundary", "rare")
GRPO_METHODS = ("grpo", "agent_data")
"""Methods whose episodes are played inside GRPO training, by the module being trained."""


@dataclass
class EnvExplorerSection(ModelSource):
    """Who explores in `agent_data`: a model that reflects on the signals (`kind: llm`: the
    current agent, the default; another local model, `path` or `name`; or an OpenAI-compatible
    server, `server.url`), or a walk over the env's valid actions without a model (`random`,
    `guided`; coevo.methods.agent_data.walk)."""

    kind: Literal["llm", "random", "guided"] = "llm"
    """llm: a model reflects on each signal and explores under its context (the paper's way);
    random: uniform over the env's valid actions from random train tasks, no signal (the
    paper's random-exploration ablation); guided: the same actions steered by the signals
    (boundary states, forgotten attempts replayed and varied, rare patterns weighted up),
    without a model: new, not the paper's. random and guided need the env's valid_actions
    (shop, sql, sciworld, bfcl)."""
    server: ServerSection = field(default_factory=ServerSection)
    """An OpenAI-compatible server to explore with (`server.url`, `server.model`; a real
    deployment points it at a strong model, as the paper does); its tokenizer comes from
    `path`, else the current agent's."""
    sampling: SamplingSection = field(default_factory=lambda: SamplingSection(temperature=0.9))
    """How the explorer samples its reflections and exploration steps."""
    reflect_tokens: int = 128
    """Longest reflection (the exploration context)."""


@dataclass
class AgentDataSection:
    """Agent-data co-evolution (`agent_data`): GRPO (the `grpo` section) whose rollouts yield
    weakness signals that steer exploration; what it finds becomes verified train tasks."""

    synthesis_every: int = 10
    """GRPO steps between two rounds of signals, exploration and synthesis (the paper: 10)."""
    signals: list[str] = field(default_factory=lambda: list(SIGNAL_KINDS))
    """Signal kinds used: any of forgetting, boundary, rare (ablations: one alone)."""
    random_exploration: bool = False
    """Ablation: explore from random train tasks with no signal and no reflection (the llm
    explorer's; explorer.kind=random always starts at random train tasks)."""
    verify: bool = True
    """Check candidates in the env (expert replays to 1.0 twice alike, no duplicate, no test
    task); false is the ablation where every candidate joins."""
    acceptance: Literal["complete", "positive"] = "complete"
    """What a candidate's replay must score to pass: `complete` reward 1.0; `positive` any
    reward above 0 (the CoEvolve paper's rule: a re-execution that fails but scores passes)."""
    window: int = 4
    """Forgetting: the last W attempts at a task that are looked at."""
    theta: float = 5.0
    """Rare: a pattern is rare below theta percent of a step's trajectories."""
    mixture: float = 0.25
    """Share of synthesized tasks in every GRPO batch once there are some."""
    explorations: int = 8
    """Exploration episodes per round (one per chosen signal, kinds taken in turn)."""
    explorer: EnvExplorerSection = field(default_factory=EnvExplorerSection)

    def validate(self) -> None:
        unknown = [k for k in self.signals if k not in SIGNAL_KINDS]
        if unknown or not self.signals:
            raise ConfigError(
                f"agent_data.signals must be a non-empty list of {', '.join(SIGNAL_KINDS)}, "
                f"got {self.signals!r}."
            )
        for key in ("synthesis_every", "window", "explorations"):
            if getattr(self, key) < 1:
                raise ConfigError(f"agent_data.{key} must be >= 1, got {getattr(self, key)}.")
        if not 0 < self.theta <= 100:
            raise ConfigError(f"agent_data.theta must be in (0, 100], got {self.theta}.")
        if not 0 <= self.mixture < 1:
            raise ConfigError(
                f"agent_data.mixture must be in [0, 1) (a share of each batch), got {self.mixture}."
            )
        ex = self.explorer
        if ex.kind != "llm" and (ex.path, ex.name, ex.server.url) != (None, None, None):
            raise ConfigError(
                f"agent_data.explorer.kind={ex.kind} explores without a model, but "
                "explorer.path, .name or .server.url is set: drop them, or use kind=llm."
            )
        if ex.kind == "guided" and self.random_exploration:
            raise ConfigError(
                "agent_data.explorer.kind=guided follows the signals, and "
                "agent_data.random_exploration=true drops them: use explorer.kind=random for "
                "the signal-free walk."
            )
        ex.check_source("agent_data.explorer")
        if ex.server.url is not None and not ex.server.model:
            raise ConfigError(
                "agent_data.explorer.server.url is set but server.model is not: give the name "
                "the server serves the explorer model under."
            )
        if ex.server.reload_command is not None:
            raise ConfigError(
                "agent_data.explorer.server.reload_command: the explorer's server keeps its own "
                "weights (nothing is reloaded into it): drop it."
            )
        if ex.sampling.temperature <= 0 or ex.reflect_tokens < 1:
            raise ConfigError(
                "agent_data.explorer.sampling.temperature must be > 0 and reflect_tokens >= 1."
            )


@dataclass
class RunConfig:
    method: str = "failure_agent"
    """base (the model untrained), sft, rft, eto, failure_agent, grpo, agent_data, or the ablations
    (`coevo.methods.registry`)."""
    name: str | None = None
    """Row label in `coevo compare` (default: the method)."""
    seed: int = 0
    """Seed of the target agent's SFT, of exploration and of data order."""
    iterations: int = 3
    """Explore / pairs / train iterations (the paper: 3 for WebShop and ScienceWorld, 5 SQL)."""
    init_from: str | None = None
    """A finished run directory with the same env, model, sft and seed: this run starts from
    its experts, base model, target SFT and first evaluation instead of redoing them, so
    methods compared with each other share one SFT policy (as in the paper)."""
    env: EnvSection = field(default_factory=EnvSection)
    model: ModelSection = field(default_factory=ModelSection)
    server: ServerSection = field(default_factory=ServerSection)
    rollout: RolloutSection = field(default_factory=RolloutSection)
    sft: SftConfig = field(default_factory=SftConfig)
    """SFT of every agent (each stage trains in its own folder, seeded from `seed`)."""
    dpo: DpoConfig = field(default_factory=DpoConfig)
    """DPO of every preference phase (each stage trains in its own folder, seeded from
    `seed`)."""
    grpo: GrpoSection = field(default_factory=GrpoSection)
    """GRPO of the `grpo` method: its rollouts (K samples per task, temperature), loss, and
    the evaluation interval (`grpo.eval_every`)."""
    explore: ExploreSection = field(default_factory=ExploreSection)
    eval: EvalSection = field(default_factory=EvalSection)
    analysis: AnalysisSection = field(default_factory=AnalysisSection)
    rft: RftSection = field(default_factory=RftSection)
    eto: EtoSection = field(default_factory=EtoSection)
    failure_agent: FailureAgentSection = field(default_factory=FailureAgentSection)
    agent_data: AgentDataSection = field(default_factory=AgentDataSection)
    """The agent-data co-evolution around GRPO (method `agent_data`; GRPO settings in `grpo`)."""

    MOVED: ClassVar[dict[str, str]] = {
        "later_lr": "eto.later_lr",
        "later_beta": "eto.later_beta",
        "lambda_sft": "failure_agent.lambda_sft",
        "within_agent_pairs": "failure_agent.within_agent_pairs",
        "hard_negative_threshold": "analysis.hard_negative_threshold",
        **{
            f"{section}.{key}": f"{section}.sampling.{key}"
            for section in ("explore", "eval", "grpo", "agent_data.explorer")
            for key in ("temperature", "top_p", "max_new_tokens")
        },
        "agent_data.explorer.server": "agent_data.explorer.server.url",
        "agent_data.explorer.server_model": "agent_data.explorer.server.model",
        "agent_data.explorer.api_key_env": "agent_data.explorer.server.api_key_env",
        **{
            f"{section}.{old}": f"{section}.{new}"
            for section in ("sft", "dpo")
            for old, new in MOVED_INTO_GROUPS.items()
        },
    }
    RETIRED: ClassVar[dict[str, str]] = {
        **{
            f"{section}.{where}{name}": why
            for section in ("sft", "dpo", "grpo")
            for name, why in RUN_DECIDES.items()
            for where in ("", "checkpoints.")
        },
        **{
            f"{section}.seed": "the trainers are seeded from the run's `seed` (each stage's "
            "manifest records the seed it trained with)"
            for section in ("sft", "dpo")
        },
        **{
            f"{section}.output_dir": "each stage trains in its own folder, RUN_DIR/stages/<stage>"
            for section in ("sft", "dpo")
        },
    }

    def _check_served_training(self) -> None:
        """Without a reload command the server learns a stage's weights only as a LoRA
        adapter: every trainer the method uses must train one."""
        trainers = {"sft": self.sft.lora.r}
        if self.method not in ("sft", "rft", *GRPO_METHODS):
            trainers["dpo"] = self.dpo.lora.r
        full = [name for name, r in trainers.items() if r == 0]
        if self.method in GRPO_METHODS or full:
            which = ", ".join(f"{name}.lora.r" for name in full) or self.method
            raise ConfigError(
                f"model.backend is server but {which} trains every weight: set "
                "server.reload_command (how the server loads a stage's checkpoint) or train "
                "with LoRA (e.g. sft.lora.r=16), whose adapters coevo loads into the server."
            )

    @property
    def label(self) -> str:
        return self.name or self.method

    def validate(self) -> None:
        self.model.check_source("model")
        if self.iterations < 0:
            raise ConfigError(f"iterations must be >= 0, got {self.iterations}.")
        if self.model.pretrain_epochs < 0:
            raise ConfigError(
                f"model.pretrain_epochs must be >= 0, got {self.model.pretrain_epochs}."
            )
        if self.model.cut_block < 0:
            raise ConfigError(f"model.cut_block must be >= 0, got {self.model.cut_block}.")
        # Every count and sampling value a stage will use, before the first stage runs: a
        # mistake found inside a stage costs the stages before it.
        counts = {
            "explore.samples": self.explore.samples,
            "explore.batch_size": self.explore.batch_size,
            "explore.chunk": self.explore.chunk,
            "eval.batch_size": self.eval.batch_size,
            "env.train_tasks": self.env.train_tasks,
            "env.eval_tasks": self.env.eval_tasks,
        }
        for key, value in counts.items():
            if value is not None and value < 1:
                raise ConfigError(f"{key} must be >= 1, got {value}.")
        if self.model.backend == "server" and not (self.server.url and self.server.model):
            raise ConfigError(
                "model.backend is server but server.url or server.model is not set: give the "
                "server's base URL and the name it serves the model under."
            )
        if self.model.backend == "server" and not self.server.reload_command:
            self._check_served_training()
        if self.rollout.workers < 0:
            raise ConfigError(f"rollout.workers must be >= 0, got {self.rollout.workers}.")
        if self.rollout.workers and importlib.util.find_spec("ray") is None:
            from coevo.envs.workers import RAY_MISSING

            raise ConfigError(RAY_MISSING)
        if self.env.valid_tasks < 0:
            raise ConfigError(f"env.valid_tasks must be >= 0, got {self.env.valid_tasks}.")
        for split in self.eval.splits:
            if split == "valid" and not self.env.valid_tasks:
                raise ConfigError("eval.splits has valid but env.valid_tasks is 0: set it.")
            if split not in (*SPLITS, "valid"):
                raise ConfigError(
                    f"eval.splits: unknown split {split!r}; use {', '.join(SPLITS)} or valid."
                )
        for trainer in (self.sft, self.dpo, self.grpo):
            try:
                trainer.validate()
            except ValueError as exc:
                raise ConfigError(str(exc)) from None
        self.agent_data.validate()


def load_recipe(path: str | Path, overrides: list[str] | None = None) -> RunConfig:
    """The recipe in YAML file `path` with dotted `overrides` (`config.load`). A run
    directory's own `config.yaml` (beside its `run.json`), which an earlier coevo may have
    written, is first brought up to date (`config.upgrade`), so `coevo run RUN_DIR/config.yaml
    --out RUN_DIR` resumes any run; a recipe someone wrote is told what moved instead."""
    path = Path(path)
    if not (path.parent / "run.json").is_file():
        return load(RunConfig, path, overrides)
    values = merge(upgrade(read_yaml(path), RunConfig), parse_overrides(overrides or []))
    return build(RunConfig, values)
