"""The stages the method loops are made of, each returning a typed record (`coevo.run.records`).

- `start`: the expert demonstrations, the base model and the target's SFT (every method's start).
- `training`: SFT of an agent on trajectories, DPO on pairs.
- `play`: the stages that play episodes: exploration (`explore-<i>-<agent>`) and evaluation.
"""
