"""The methods as loops that read top to bottom, and `execute`, which runs one recipe.

- `recipe`: the run's settings (`RunConfig`); `registry`: the methods by name.
- `run`: what a run's stages share (`Run`) and the model one stage hands the next.
- `start`, `training`, `rollouts`: the stages (experts and base model; SFT and DPO;
  exploration and evaluation), each recording a typed record (`coevo.records`).
- `sft`, `rft`, `eto`, `failure_agent`: the loops, each with its own rules.
- `runner`: runs one recipe in one run directory; `preflight` checks it first; `demo`.
"""
