"""Text environments: the contract, the registry and the built-in benchmarks."""

from coevo.envs.base import (
    SPLITS,
    Env,
    EnvError,
    EpisodeClock,
    EpisodeFinishedError,
    StepResult,
    make,
    names,
    register,
)

__all__ = [
    "SPLITS",
    "Env",
    "EnvError",
    "EpisodeClock",
    "EpisodeFinishedError",
    "StepResult",
    "make",
    "names",
    "register",
]
