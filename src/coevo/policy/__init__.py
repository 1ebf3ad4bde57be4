"""How an agent acts: the Policy contract, Hugging Face and server policies, model sources.

`coevo.policy.base` needs no torch; `coevo.policy.hf` and `coevo.policy.tiny` load torch and
transformers, so import them where they are used. Chat rendering is `coevo.render`, beside the
Trajectory it renders, so trainers need nothing from this package.
"""
