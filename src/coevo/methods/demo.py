"""The quick-start demo: SFT, then ETO and failure-agent co-evolution from that SFT policy.

Everything is local: the built-in sql env, the pretrained SmolLM2-135M-Instruct that a registry
package ships (converted on first use), and at the end the comparison tables, with the reward
of every method after each iteration, and the report (`coevo report`) in `<out>/report`. Sized
to finish in minutes on a 2-core CPU (docs/methods.md, The demo, says what it measured and
what it shows).
"""

from __future__ import annotations

import json
from pathlib import Path

from coevo.analysis.compare import compare, to_markdown
from coevo.analysis.report import write_report
from coevo.config import build, merge, parse_overrides
from coevo.methods.runner import execute
from coevo.run.lock import FILENAME, lock_run_dir
from coevo.run.recipe import RunConfig
from coevo.run.records import SftRecord, read

DEMO: dict = {
    # sql: its episodes are half as long as shop's, and tokens are what a CPU pays for.
    # 8 train tasks held out (never trained on): SFT's loss on their demonstrations, before
    # and after, is the effect the demo can show in minutes (evaluating the untrained model's
    # rewards cannot fit: it writes 96 useless tokens every step, docs/methods.md).
    "env": {"name": "sql", "train_tasks": 20, "eval_tasks": 12, "valid_tasks": 8},
    "model": {"name": "smollm2-135m", "max_length": 1024},
    # One iteration keeps the demo short on 2 cores; iterations=2 for more.
    "iterations": 1,
    "sft": {"epochs": 3, "batch_size": 8, "optim": {"lr": 1.0e-4, "warmup_ratio": 0.1}},
    # The recipes' DPO lr is 1e-6 over 15-30 steps; the demo's 2-3 steps take 1e-5 to move the
    # policy about as far.
    "dpo": {"epochs": 1, "batch_size": 4, "grad_accum": 2, "optim": {"lr": 1.0e-5}, "beta": 0.1},
    "explore": {
        "samples": 1,
        "batch_size": 20,
        "sampling": {"temperature": 0.8, "max_new_tokens": 96},
    },
    "eval": {"batch_size": 24, "sampling": {"max_new_tokens": 96}},
}
DEMO_METHODS = ("sft", "eto", "failure_agent")


def demo_configs(out: Path, overrides: list[str]) -> list[tuple[RunConfig, Path]]:
    base = merge(DEMO, parse_overrides(overrides))
    runs = []
    for method in DEMO_METHODS:
        values = {**base, "method": method}
        if method != "sft":
            values["init_from"] = str(out / "sft")
        runs.append((build(RunConfig, values), out / method))
    return runs


def run_demo(out: str | Path = "runs/demo", overrides: list[str] | None = None) -> tuple[str, Path]:
    """Run the three methods (skipping what a previous demo in `out` finished); the tables
    (also in `<out>/compare.md`) and the path of the report's page."""
    out = Path(out)
    runs = demo_configs(out, overrides or [])
    refuse_if_in_use([run_dir for _, run_dir in runs])
    dirs = [execute(config, run_dir) for config, run_dir in runs]
    return write_results(out, dirs)


def refuse_if_in_use(run_dirs: list[Path]) -> None:
    """Raise RunDirError, naming the holder, if another process writes one of the demo's run
    directories: said first, before the recipe's model is looked up (and converted) for the
    first run, and before a later run would find it after the earlier ones. Only a directory
    with a lock file can be held; none is made here. Each run still takes its own lock."""
    for run_dir in run_dirs:
        if (run_dir / FILENAME).is_file():
            lock_run_dir(run_dir).release()


def write_results(out: Path, dirs: list[Path]) -> tuple[str, Path]:
    """The demo's tables (`<out>/compare.md`), headed by what SFT did to the held-out tasks,
    and its report (`<out>/report/index.html`)."""
    tables = held_out_effect(dirs[0]) + to_markdown(compare(dirs))
    (out / "compare.md").write_text(tables)
    return tables, write_report(dirs, out / "report")


def held_out_effect(run_dir: Path) -> str:
    """A short section on SFT's loss on the held-out demonstrations, before and after (from
    the run's `sft-target` manifest); empty when the run held none out."""
    manifest = run_dir / "stages" / "sft-target" / "manifest.json"
    stage = json.loads(manifest.read_text()) if manifest.is_file() else {}
    record = read(stage.get("outputs") or {})
    if not isinstance(record, SftRecord) or not record.held_out_loss:
        return ""
    held = (stage.get("inputs") or {}).get("held_out", "the")
    before, after = record.held_out_loss
    return (
        "### What SFT did to tasks it never saw\n\n"
        f"Loss on the demonstrations of {held} held-out train tasks (never trained on), per "
        f"agent token: {before:.3f} before SFT, {after:.3f} after it. The reward tables below "
        "start after SFT (iteration 0).\n\n"
    )
