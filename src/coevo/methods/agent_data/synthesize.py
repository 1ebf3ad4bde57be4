"""Synthesis: recorded explorations -> candidate tasks, each with its provenance.

The env turns an exploration into zero or more candidates (`coevo.envs.evolve`); here they get
run-unique ids and the record of where they came from (the signal, the exploration episode).
An exploration the env cannot read costs only itself, counted as `malformed`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from coevo.envs.base import Env
from coevo.envs.evolve import Candidate, tasks_from_exploration
from coevo.trajectory import Trajectory

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Synthesized:
    candidates: list[Candidate]
    malformed: int
    """Explorations whose reading raised (a hostile or broken exploration)."""


def synthesize(
    env: Env,
    explorations: Sequence[Trajectory],
    provenance: Sequence[dict[str, Any]],
    *,
    prefix: str,
) -> Synthesized:
    """Candidates from `explorations` (each with its `provenance`: signal, exploration row),
    named `<env>/synth/<prefix>-<n>`, split `train`."""
    out: list[Candidate] = []
    malformed = 0
    for exploration, origin in zip(explorations, provenance, strict=True):
        try:
            found = tasks_from_exploration(env, exploration)
        except Exception as exc:  # one bad exploration must not stop the round
            log.warning("agent_data: exploration %s gave no task: %s", exploration.task.id, exc)
            malformed += 1
            continue
        for c in found:
            task = replace(c.task, id=f"{c.task.env}/synth/{prefix}-{len(out)}", split="train")
            out.append(Candidate(task, {**origin, **c.origin}))
    return Synthesized(out, malformed)
