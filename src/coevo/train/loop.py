"""What the trainers (SFT, DPO, GRPO) share: the start of a call (`begin`: accelerator, seeds,
output directory), the model to train and its optimizer (`prepare_model`), the optimizer step,
the steps of passes over the data with resume (`Passes`), checkpoints, the metrics history, the
progress bar, and the end (`finish`).

What a call decides, as opposed to its settings, is an argument of every `train_*`:
- `resume` (default true): continue from the newest checkpoint in `output_dir`; false starts
  over there;
- `stop_after_steps`: end this call after that optimizer step, with a checkpoint, as if cut
  off; the schedule still spans the whole run, so a later call with the same directory
  finishes the job (GRPO's evaluation intervals are such calls);
- `save_model` (default true): write the trained (LoRA-merged) model to `output_dir/model`
  once the run is complete.

Checkpoints are written every `save_every` steps and every `save_every_minutes`, whichever
comes first, so a kill costs minutes of training at most. A checkpoint lists its files with
their sizes; one that lacks a file (or cannot be loaded) is set aside with a warning and the
run resumes from the one before it, or from the stage's start. The checkpoint of the run's
last step holds the weights alone (`FINAL_KINDS`): nothing trains on from it, so the AdamW
state (two thirds of a full checkpoint's bytes) is not written; a later call on the finished
directory resumes there and trains nothing. A weights-only checkpoint whose step is not the
run's last (the run was made longer since) is set aside like a broken one.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType, load_checkpoint_in_model, set_seed
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress
from torch import nn
from torch.utils.data import DataLoader

from coevo.progress import bar
from coevo.train.batches import LengthBatches
from coevo.train.model import (
    AgentLogps,
    compiling,
    finish_model,
    frozen_copy,
    is_lora,
    load_model,
    mixed_precision,
    save_model,
    trainable,
)
from coevo.train.settings import (
    Checkpoints,
    Compute,
    Optim,
    Schedule,
    Tracking,
    TrainerConfig,
    settings_record,
)

SCHEDULES: tuple[Schedule, ...] = ("cosine", "constant", "linear")
STATE_FILE = "trainer_state.json"
CHECKPOINTS = "checkpoints"  # the folder of resumable states in a trainer's output_dir
# What accelerate writes for our one model, optimizer and scheduler; checked in checkpoints
# from before the file lists were recorded.
_ESSENTIAL = {
    "model weights": ("model*.safetensors", "pytorch_model*.bin"),
    "optimizer.bin": ("optimizer*.bin",),
    "scheduler.bin": ("scheduler*.bin",),
}

# Where the last step's checkpoint is the weights alone: one process, or DDP (every process
# holds the whole model). Sharded runs (FSDP, DeepSpeed) write their full state as at any step.
FINAL_KINDS = (DistributedType.NO, DistributedType.MULTI_GPU, DistributedType.MULTI_CPU)

console = Console(stderr=True)


class CheckpointError(RuntimeError):
    """The newest checkpoint failed to load part-way and no complete one is left to fall back on."""


def begin(
    config: TrainerConfig,
    output_dir: str | Path,
    seed: int,
    device: str,
    *,
    resume: bool = True,
    stop_after_steps: int | None = None,
) -> CheckpointDir:
    """The start of a trainer's call: `config` checked, one accelerator (`make_accelerator`),
    every RNG seeded with `seed`, and the output directory that the call's checkpoints and
    metrics go to (its `accelerator` is the call's)."""
    config.validate()
    if stop_after_steps is not None and (
        isinstance(stop_after_steps, bool)
        or not isinstance(stop_after_steps, int)
        or stop_after_steps < 1
    ):
        raise ValueError(f"stop_after_steps must be a whole number >= 1, got {stop_after_steps!r}.")
    settings = settings_record(config, seed)
    accelerator = make_accelerator(
        config.compute, config.tracking, device=device, output_dir=output_dir, settings=settings
    )
    set_seed(seed)
    return CheckpointDir(
        output_dir,
        accelerator,
        config.checkpoints,
        resume=resume,
        stop_after_steps=stop_after_steps,
        record=settings,
    )


def prepare_model(
    model: Any,
    config: TrainerConfig,
    accelerator: Accelerator,
    *,
    reference: bool = False,
    planned_tokens: int | None = None,
) -> tuple[nn.Module, nn.Module | None, torch.optim.Optimizer]:
    """(the model to train as a prepared `AgentLogps`, the frozen reference or None, AdamW).

    `reference`: the model as given, before any update, stays as the reference: a frozen copy,
    or with LoRA nothing (the base model with the adapters off is the reference, so None).
    `planned_tokens` (`planned`): what `compute.compile=auto` decides on (`compiling`).
    """
    model = load_model(model)
    ref_net = AgentLogps(frozen_copy(model)) if reference and config.lora.r == 0 else None
    model = trainable(model, config.compute, config.lora)
    setting = config.compute.compile
    compiled = compiling(setting, model, accelerator.device, planned_tokens)
    if compiled and setting == "auto":
        accelerator.print(
            f"compute.compile=auto: decoder layers compiled ({planned_tokens:,} tokens planned "
            f"per process on {accelerator.device.type}; the first steps wait for the compiler)"
        )
    net = AgentLogps(model, compile_layers=compiled)
    optimizer = make_optimizer(net, config.optim, accelerator.device)
    net, optimizer = accelerator.prepare(net, optimizer)
    if ref_net is not None:
        ref_net = ref_net.to(accelerator.device)
    return net, ref_net, optimizer


def make_accelerator(
    compute: Compute,
    tracking: Tracking | None = None,
    *,
    device: str = "auto",
    output_dir: str | Path | None = None,
    settings: dict[str, Any] | None = None,
) -> Accelerator:
    """One Accelerator per run; gradient accumulation is done by the loop (see `windows`).

    `device`: `cpu` trains on the CPU (also on a GPU machine); any other value leaves the
    choice to accelerate (this process's GPU when there is one).

    With `tracking.log_with`, its trackers are started on `output_dir` with `settings` (what
    the run trains with) as the run's configuration; `CheckpointDir.log` logs every record.
    """
    names = tracking.names() if tracking is not None else []
    cpu = device == "cpu"
    precision = mixed_precision(compute.mixed_precision, cpu=cpu)
    fit_accelerator_state(cpu, precision)
    # step_scheduler_with_optimizer=False: the schedule is counted in this process's
    # optimizer steps, so it reads the same on 1 or 8 GPUs.
    accelerator = Accelerator(
        cpu=cpu,
        mixed_precision=precision,
        step_scheduler_with_optimizer=False,
        log_with=names or None,
        project_dir=str(output_dir) if names and output_dir is not None else None,
    )
    if names:
        accelerator.init_trackers(tracking.project, config=flat_settings(settings or {}))
    return accelerator


def fit_accelerator_state(cpu: bool, precision: str) -> None:
    """Let this process's next Accelerator use `cpu` and `precision`.

    accelerate keeps one state per process and refuses an Accelerator whose device or mixed
    precision differs from the first one's. One process may well need both (a stage trained
    in bf16 on the GPU, the next with `mixed_precision: no`, or on the CPU): with a single
    process the state is rebuilt, as accelerate's own tests do between cases. Several
    processes share their process group through it, so there a change is a clear error.
    """
    from accelerate.state import AcceleratorState

    if not AcceleratorState._shared_state:
        return
    state = AcceleratorState()
    on_cpu = state.device.type == "cpu"
    if state.mixed_precision == precision and (on_cpu or not cpu):
        return
    if state.num_processes > 1:
        raise ValueError(
            f"This run's processes train with mixed_precision={state.mixed_precision!r} on "
            f"{state.device.type}; a stage asked for {precision!r}"
            f"{' on the cpu' if cpu else ''}. Give every stage the same compute.device and "
            "compute.mixed_precision in a multi-process run."
        )
    AcceleratorState._reset_state(reset_partial_state=on_cpu != cpu)


def flat_settings(settings: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested settings as the flat scalars trackers take (TensorBoard's hparams):
    {"optim": {"lr": 1e-5}} -> {"optim.lr": 1e-5}; lists and None as text."""
    flat: dict[str, Any] = {}
    for key, value in settings.items():
        if isinstance(value, dict):
            flat.update(flat_settings(value, f"{prefix}{key}."))
        elif isinstance(value, bool | int | float | str):
            flat[f"{prefix}{key}"] = value
        else:
            flat[f"{prefix}{key}"] = str(value)
    return flat


def make_optimizer(model: nn.Module, optim: Optim, device: torch.device) -> torch.optim.AdamW:
    """AdamW over the trainable parameters only (with LoRA: the adapters), fused where they will
    train on the CPU or CUDA (`device`): one op for all of them instead of a few per parameter
    tensor (on a GPU, kernel launches), as TRL's default `adamw_torch_fused`."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("The model has no trainable parameters; check the LoRA settings.")
    fused = device.type in ("cpu", "cuda") or None
    return torch.optim.AdamW(params, lr=optim.lr, weight_decay=optim.weight_decay, fused=fused)


def make_scheduler(
    accelerator: Accelerator, optimizer: torch.optim.Optimizer, optim: Optim, total_steps: int
) -> Any:
    """The prepared LambdaLR of `optim`'s schedule over `total_steps` optimizer steps."""
    factor = lr_factor(optim.schedule, round(optim.warmup_ratio * total_steps), total_steps)
    return accelerator.prepare(torch.optim.lr_scheduler.LambdaLR(optimizer, factor))


def clip(accelerator: Accelerator, net: nn.Module, optim: Optim) -> torch.Tensor:
    """Clip the gradients to `optim.max_grad_norm` (0: no clipping); their norm (NaN if not)."""
    if optim.max_grad_norm > 0:
        return accelerator.clip_grad_norm_(net.parameters(), optim.max_grad_norm)
    return torch.tensor(float("nan"))


def optimizer_step(
    accelerator: Accelerator, net: nn.Module, optimizer: Any, scheduler: Any, optim: Optim
) -> tuple[float, float]:
    """Clip, step the optimizer and the schedule, clear the gradients: (gradient norm, the
    learning rate this step used)."""
    grad_norm = clip(accelerator, net, optim)
    lr = scheduler.get_last_lr()[0]
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return float(grad_norm), lr


def lr_factor(schedule: str, warmup_steps: int, total_steps: int) -> Callable[[int], float]:
    """Multiplier of the base learning rate at each step: linear warm-up, then the schedule."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {SCHEDULES}, got {schedule!r}.")

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / (warmup_steps + 1)
        # Clamped so that rounding of the step count never restarts the cosine.
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        if schedule == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        if schedule == "linear":
            return 1.0 - progress
        return 1.0

    return factor


def windows(batches: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """Group micro-batches into optimizer steps of `size` (the last may be shorter).

    The loop needs the whole window before its first backward: the loss is divided by the
    window's total count (tokens or pairs, over all processes), so that accumulation gives
    exactly the gradient of one big batch.
    """
    window: list[Any] = []
    for batch in batches:
        window.append(batch)
        if len(window) == size:
            yield window
            window = []
    if window:
        yield window


class Passes:
    """Optimizer steps over passes of length-grouped micro-batches (SFT, DPO): `grad_accum`
    micro-batches of `batch_size` examples a step, each pass shuffled anew
    (`batches.LengthBatches`), `epochs` passes, or `steps` steps in all where the config
    has them (the last pass cut short)."""

    def __init__(
        self,
        examples: Sequence[Any],
        lengths: Sequence[int],
        collate: Callable[[list[Any]], dict[str, torch.Tensor]],
        config: Any,
        accelerator: Accelerator,
        seed: int,
    ) -> None:
        self.accelerator = accelerator
        self.grad_accum = config.grad_accum
        self.sampler = LengthBatches(lengths, config.batch_size, seed=seed)
        loader = DataLoader(list(examples), batch_sampler=self.sampler, collate_fn=collate)
        self.loader = accelerator.prepare(loader)
        self.steps_per_epoch = math.ceil(len(self.loader) / self.grad_accum)
        steps = getattr(config, "steps", None)
        self.total_steps = steps or self.steps_per_epoch * config.epochs

    def steps(self, out: CheckpointDir, start: int) -> Iterator[tuple[int, int, list[Any]]]:
        """(step, epoch, window of micro-batches) for each optimizer step after `start` up to
        the call's last (`out.last_step`); a run resumed mid-pass skips the pass's finished
        steps, so it sees what an unbroken one did."""
        step, last = start, out.last_step(self.total_steps)
        while step < last:
            epoch = step // self.steps_per_epoch
            self.sampler.epoch = epoch
            done = (step - epoch * self.steps_per_epoch) * self.grad_accum
            self.sampler.skip = done * self.accelerator.num_processes
            for window in windows(self.loader, self.grad_accum):
                step += 1
                yield step, epoch, window
                if step >= last or step % self.steps_per_epoch == 0:
                    break


def sync_unless(accelerator: Accelerator, model: nn.Module, accumulating: bool) -> Any:
    """Skip the gradient all-reduce on all but the last micro-batch of a window."""
    return accelerator.no_sync(model) if accumulating else nullcontext()


def global_sum(accelerator: Accelerator, value: float | int) -> float:
    """Sum of a number over all processes; on one process the number itself, without a trip
    to the device and back (a host sync on a GPU)."""
    if accelerator.num_processes == 1:
        return float(value)
    t = torch.tensor(float(value), device=accelerator.device)
    return float(accelerator.reduce(t, reduction="sum"))


class CheckpointDir:
    """A trainer's output directory: checkpoints (`checkpoints/step-N`) and `metrics.jsonl`."""

    def __init__(
        self,
        out_dir: str | Path,
        accelerator: Accelerator,
        settings: Checkpoints,
        *,
        resume: bool = True,
        stop_after_steps: int | None = None,
        record: dict[str, Any] | None = None,
    ) -> None:
        self.root = Path(out_dir)
        self.accelerator = accelerator
        self.settings = settings
        self.resumes = resume
        self.stop_after_steps = stop_after_steps
        self.record = record or {}
        """What the run trains with (`settings.settings_record`), written beside its model."""
        self.keep = max(1, settings.save_total_limit)
        self.metrics_path = self.root / "metrics.jsonl"
        self.history: list[dict[str, Any]] = []
        self.saved_at = time.monotonic()
        self.total_steps: int | None = None
        self.net: nn.Module | None = None
        if accelerator.is_main_process:
            (self.root / CHECKPOINTS).mkdir(parents=True, exist_ok=True)
        accelerator.wait_for_everyone()

    def start(self, net: nn.Module, total_steps: int) -> int:
        """The step to start from: the resumed checkpoint's (`resume`), else 0. `net`: the
        prepared model; `total_steps`: the run's last step (its checkpoint is `net`'s weights
        alone)."""
        self.net, self.total_steps = net, total_steps
        return self.resume() if self.resumes else self.reset()

    def last_step(self, total_steps: int) -> int:
        """The step this call ends after: the last, or `stop_after_steps` if sooner."""
        stop = self.stop_after_steps
        return total_steps if stop is None else min(total_steps, stop)

    def save_due(self, step: int, last: int) -> bool:
        """Whether to checkpoint after `step`: every `save_every` steps, at the end, on time."""
        return (
            step % self.settings.save_every == 0
            or step == last
            or self.due(self.settings.save_every_minutes)
        )

    def stage_end(self, step: int) -> bool:
        """Whether the checkpoint of `step` is kept past the rotation: it is where this call
        stops early, and the settings keep such (`Checkpoints.keep_stage_ends`)."""
        return (
            self.settings.keep_stage_ends
            and step == self.stop_after_steps
            and (self.total_steps is None or step < self.total_steps)
        )

    def step_done(self, record: dict[str, Any], epoch: int, last: int) -> None:
        """Log step `record["step"]`'s record and checkpoint when one is due."""
        self.log(record)
        if self.save_due(record["step"], last):
            self.save(record["step"], epoch)

    def checkpoints(self) -> list[tuple[int, Path]]:
        found = []
        for p in (self.root / CHECKPOINTS).glob("step-*"):
            if p.is_dir() and p.name[5:].isdigit() and (p / STATE_FILE).exists():
                found.append((int(p.name[5:]), p))
        return sorted(found)

    def resume(self) -> int:
        """Load the newest complete checkpoint if there is one; return its step (0: the start).

        A checkpoint that lacks a file is set aside (renamed `broken-step-N`) with a warning,
        and the one before it is tried. The metrics history is cut back to the step resumed
        from, so a resumed run's history reads as if it had never stopped.
        """
        found = self.checkpoints()
        step = 0
        failed: str | None = None  # a load that failed part-way may have changed the weights
        while found:
            candidate, path = found.pop()
            problem = incomplete(path)
            weights_only = problem is None and is_weights_only(path)
            if weights_only and candidate != self.total_steps:
                problem = (
                    f"holds the weights alone of a run that ended at step {candidate} (this one "
                    f"ends at {self.total_steps}): nothing to train on from"
                )
            if problem is None:
                try:
                    if weights_only:
                        # The run is over: its weights, and nothing left to train.
                        model = self.accelerator.unwrap_model(self.net)
                        load_checkpoint_in_model(model, str(path))
                    else:
                        self.accelerator.load_state(str(path))
                except Exception as exc:  # any unreadable file: the one before may do
                    problem = f"cannot be loaded ({type(exc).__name__}: {exc})"
                    failed = f"{path} {problem}"
                else:
                    step = candidate
                    break
            if failed is not None and not found:
                raise CheckpointError(
                    f"Checkpoint {failed}, and no complete checkpoint is left to resume from: "
                    "delete it to start this stage over."
                )
            since = f"step {found[-1][0]}" if found else "the start of the stage"
            self._set_aside(path, f"checkpoint {path} {problem}; resuming from {since}")
        self.accelerator.wait_for_everyone()
        self.saved_at = time.monotonic()
        old = []
        if self.metrics_path.exists():
            with self.metrics_path.open() as f:
                old = [json.loads(line) for line in f if line.strip()]
        self.history = [r for r in old if r.get("step", 0) <= step]
        if self.accelerator.is_main_process:
            with self.metrics_path.open("w") as f:
                f.writelines(json.dumps(r) + "\n" for r in self.history)
        return step

    def _set_aside(self, path: Path, warning: str) -> None:
        # Renamed, not deleted (its weights may still be of use), and out of the way of the
        # next save of the same step.
        if self.accelerator.is_main_process:
            console.print(f"[yellow]{escape(warning)}[/]", soft_wrap=True)
            aside = path.with_name(f"broken-{path.name}")
            shutil.rmtree(aside, ignore_errors=True)
            path.rename(aside)

    def reset(self) -> int:
        """Start over: forget the checkpoints and history of an earlier run in this directory."""
        if self.accelerator.is_main_process:
            shutil.rmtree(self.root / CHECKPOINTS, ignore_errors=True)
            (self.root / CHECKPOINTS).mkdir(parents=True)
            self.metrics_path.unlink(missing_ok=True)
        self.accelerator.wait_for_everyone()
        self.history = []
        self.saved_at = time.monotonic()
        return 0

    def log(self, record: dict[str, Any]) -> None:
        self.history.append(record)
        if self.accelerator.is_main_process:
            with self.metrics_path.open("a") as f:
                f.write(json.dumps(record) + "\n")
        # To the trackers too, when the run has any (`Tracking`; without, a no-op).
        numbers = {k: v for k, v in record.items() if isinstance(v, int | float) and k != "step"}
        self.accelerator.log(numbers, step=record.get("step"))

    def due(self, every_minutes: float) -> bool:
        """True when the last checkpoint is `every_minutes` old (0: never), on every process."""
        if every_minutes <= 0:
            return False
        late = time.monotonic() - self.saved_at >= every_minutes * 60
        # Clocks differ between processes; saving is collective, so one late process decides.
        return global_sum(self.accelerator, late) > 0

    def save(self, step: int, epoch: int) -> None:
        """Model, optimizer, scheduler, RNG states and the step, written atomically; at the
        run's last step the model's weights alone (`FINAL_KINDS`)."""
        final = self.root / CHECKPOINTS / f"step-{step}"
        if final.exists():
            return
        tmp = final.with_name(final.name + ".tmp")
        if self.accelerator.is_main_process and tmp.exists():
            shutil.rmtree(tmp)
        self.accelerator.wait_for_everyone()
        weights_only = (
            self.net is not None
            and step == self.total_steps
            and self.accelerator.distributed_type in FINAL_KINDS
        )
        if weights_only:
            self.accelerator.save_model(self.net, str(tmp))
        else:
            self.accelerator.save_state(str(tmp))
        self.accelerator.wait_for_everyone()
        if self.accelerator.is_main_process:
            files = {
                str(p.relative_to(tmp)): p.stat().st_size
                for p in sorted(tmp.rglob("*"))
                if p.is_file()
            }
            state = {
                "step": step,
                "epoch": epoch,
                "files": files,
                "weights_only": weights_only,
                "kept": self.stage_end(step),
            }
            (tmp / STATE_FILE).write_text(json.dumps(state))
            # A rename is atomic: a run killed mid-save leaves only a .tmp that is ignored.
            tmp.rename(final)
            # Only then the oldest go: there is always one complete checkpoint on disk.
            rotating = [path for _, path in self.checkpoints() if not is_kept(path)]
            for old in rotating[: -self.keep]:
                shutil.rmtree(old, ignore_errors=True)
        self.accelerator.wait_for_everyone()
        self.saved_at = time.monotonic()


def is_kept(path: Path) -> bool:
    """Whether checkpoint `path` ends a stage and is kept (`Checkpoints.keep_stage_ends`)."""
    return bool(json.loads((path / STATE_FILE).read_text()).get("kept"))


def is_weights_only(path: Path) -> bool:
    """Whether checkpoint `path` holds a finished run's weights alone (no optimizer state)."""
    return bool(json.loads((path / STATE_FILE).read_text()).get("weights_only"))


def incomplete(path: Path) -> str | None:
    """What is wrong with checkpoint `path` (None: every file it lists is there, whole)."""
    try:
        state = json.loads((path / STATE_FILE).read_text())
    except (OSError, ValueError) as exc:
        return f"has an unreadable {STATE_FILE} ({exc})"
    files = state.get("files") if isinstance(state, dict) else None
    if files is None:
        for label, patterns in _ESSENTIAL.items():
            if not any(next(path.glob(pattern), None) for pattern in patterns):
                return f"lacks its {label}"
        return None
    for name, size in files.items():
        file = path / name
        if not file.is_file():
            return f"lacks {name}"
        if file.stat().st_size != size:
            return f"has a cut-short {name} ({file.stat().st_size} of {size} bytes)"
    return None


def progress_bar(accelerator: Accelerator, enabled: bool) -> Progress:
    """The bar of a trainer's steps (`coevo.progress.bar`), drawn by the main process only."""
    return bar("steps {task.fields[info]}", enabled=enabled and accelerator.is_main_process)


class Meter:
    """Tokens per second between two log points."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.tokens = 0

    def rate(self, tokens: int) -> float:
        self.tokens += tokens
        now = time.perf_counter()
        rate = self.tokens / max(now - self.start, 1e-9)
        self.start, self.tokens = now, 0
        return rate


@dataclass(frozen=True)
class TrainResult:
    """What a training run hands back."""

    model: Any
    """The trained model (LoRA merged once the run is complete), unwrapped."""
    history: list[dict[str, Any]]
    """Every logged record, as in output_dir/metrics.jsonl."""
    step: int
    """Optimizer steps done in total (across resumes)."""
    output_dir: Path


def finish(
    net: nn.Module,
    out: CheckpointDir,
    step: int,
    total_steps: int,
    tokenizer: Any,
    *,
    save: bool = True,
) -> TrainResult:
    """Hand back the unwrapped model; once the run is complete, merge LoRA and (`save`) save it with what it trained with (`out.record`) as `train_config.json`."""
    accelerator = out.accelerator
    accelerator.wait_for_everyone()
    # Close the trackers, if any, so their files are complete (not `end_training`: it would
    # also end the process group that a run of several stages goes on using).
    for tracker in accelerator.trackers:
        tracker.finish()
    model = accelerator.unwrap_model(net).model
    if step >= total_steps:
        if is_lora(model) and save and accelerator.is_main_process:
            # The adapters alone too, before they are merged: what a generation server loads
            # by name to serve this stage's weights (coevo.run.serving).
            model.save_pretrained(out.root / "adapter")
        model = finish_model(model)
        if save and accelerator.is_main_process:
            final = out.root / "model"
            save_model(model, final, tokenizer)
            config_json = json.dumps(out.record, indent=2, default=list)
            (final / "train_config.json").write_text(config_json)
    accelerator.wait_for_everyone()
    release(accelerator, net)
    return TrainResult(model=model, history=list(out.history), step=step, output_dir=out.root)


def planned(lengths: Sequence[int], config: TrainerConfig, processes: int = 1) -> int:
    """The tokens one of `processes` plans to run in a stage (what its compiling pays back
    on): its share of the examples' `lengths` times the epochs, or, where `steps` sets the
    stage's length (`dpo.steps`), steps x its examples per step x their mean length."""
    steps = getattr(config, "steps", None)
    if steps:
        per_step = getattr(config, "batch_size", 1) * getattr(config, "grad_accum", 1)
        return int(steps * per_step * sum(lengths) / max(len(lengths), 1))
    return sum(lengths) * getattr(config, "epochs", 1) // max(processes, 1)


def release(accelerator: Accelerator, net: nn.Module) -> None:
    """Let the run's model go as soon as the caller drops the result.

    With mixed precision, accelerate sets the wrapper's `forward` (and `_original_forward`) on
    the instance as methods bound to the instance itself: a reference cycle, which only
    Python's cyclic collector frees, whenever it next runs; until then a finished run's
    weights would stay on the GPU beside the next run's. Here the
    instance attributes go (the class's forward again), so that dropping the result frees
    the model at once. (Found on an H200: a compiled speed benchmark's timed call began with
    one more float32 copy of the weights allocated than TRL's, its warm-up run's.)"""
    wrapper = accelerator.unwrap_model(net)
    for name in ("forward", "_original_forward"):
        wrapper.__dict__.pop(name, None)
