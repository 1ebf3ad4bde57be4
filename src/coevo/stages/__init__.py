"""The stages the method loops are made of, each returning a typed record (`coevo.run.records`).

- `shared`: the expert demonstrations, the base model and the target's SFT: the stages every
  method starts with (`shared_start`), the ones `init_from` adopts.
- `training`: SFT of an agent on trajectories, DPO on pairs.
- `play`: the stages that play episodes: exploration (`explore-<i>-<agent>`) and evaluation.
"""
