"""The methods as loops that read top to bottom, and `execute`, which runs one recipe.

- `sft`, `rft`, `eto`, `failure_agent`, `grpo`, `agent_data`: the loops, each with its own
  rules, made of the stages in `coevo.stages` on the harness in `coevo.run`.
- `registry`: the methods by name; `runner`: runs one recipe in one run directory;
  `preflight` checks it first; `demo`: the quick-start demo.
"""
