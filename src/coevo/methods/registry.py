"""The methods by name: each one's loop and the recipe sections it reads.

The one place a method is named: `RunConfig.method` is checked against it, the runner calls
its loop, and the saved recipe of a run keeps the sections its method reads and drops those
only other methods read (an SFT run's `config.yaml` has no `dpo` or `eto` section).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from coevo.config import ConfigError
from coevo.methods import plan
from coevo.methods.agent_data.loop import run_agent_data
from coevo.methods.eto import run_eto
from coevo.methods.failure_agent import run_failure_agent, run_frozen_failure, run_positive_agent
from coevo.methods.grpo import run_grpo
from coevo.methods.plan import Scope
from coevo.methods.rft import run_rft
from coevo.methods.sft import run_base, run_sft
from coevo.run.context import Run
from coevo.run.estimate import Planned

EXPLORING = ("explore", "analysis")
PREFERENCE = ("iterations", "dpo", *EXPLORING, "eto")
CO_EVOLVING = (*PREFERENCE, "failure_agent")


@dataclass(frozen=True)
class Method:
    loop: Callable[[Run], None]
    """Runs the method's stages, top to bottom."""
    plan: Callable[[Scope], list[Planned]]
    """The stages `loop` will run, in its order, with their sizes (`coevo.methods.plan`)."""
    reads: tuple[str, ...] = ()
    """Recipe keys it reads beyond those every method reads (method, name, seed, init_from,
    env, model, server, sft, eval)."""

    @property
    def explores(self) -> bool:
        """Whether it samples with the explore settings (so explore.sampling.max_new_tokens
        must fit too; GRPO samples with its own, grpo.sampling)."""
        return "explore" in self.reads


METHODS: dict[str, Method] = {
    "base": Method(run_base, plan.plan_base),
    "sft": Method(run_sft, plan.plan_sft),
    "rft": Method(run_rft, plan.plan_rft, (*EXPLORING, "rft")),
    "eto": Method(run_eto, plan.plan_eto, PREFERENCE),
    "failure_agent": Method(run_failure_agent, plan.co_evolving("failure", "failure"), CO_EVOLVING),
    "positive_agent": Method(
        run_positive_agent, plan.co_evolving("positive", "expert"), CO_EVOLVING
    ),
    "frozen_failure": Method(run_frozen_failure, plan.co_evolving("failure", None), CO_EVOLVING),
    "grpo": Method(run_grpo, plan.plan_grpo, ("grpo",)),
    "agent_data": Method(run_agent_data, plan.plan_agent_data, ("grpo", "agent_data")),
}
# Keys only some methods read: a run's saved recipe keeps those its method reads.
OPTIONAL = sorted({key for method in METHODS.values() for key in method.reads})


def method(name: str) -> Method:
    """The method called `name`, or a ConfigError naming the ones there are."""
    if name not in METHODS:
        raise ConfigError(f"method must be one of {', '.join(map(repr, METHODS))}, not {name!r}.")
    return METHODS[name]
