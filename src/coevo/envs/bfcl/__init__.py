"""BFCL v4 multi-turn function calling on the `bfcl-eval` package's back-ends: `BfclEnv`."""

from coevo.envs.bfcl.env import BfclEnv

__all__ = ["BfclEnv"]
