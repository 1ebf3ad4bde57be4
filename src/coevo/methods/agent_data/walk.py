"""Explorers without a language model: walks over the actions the env says are valid now
(`coevo.envs.evolve.valid_actions`), chosen by `agent_data.explorer.kind`.

- `random`: the paper's random-exploration ablation, done over valid actions: each exploration
  starts at a random train task and each step picks uniformly among the valid actions (seeded,
  so a rerun walks the same way).
- `guided`: signal-guided exploration without a language model. This is new, not the paper's
  (its explorer is an LLM that reads the signals). Each exploration starts from a signal's task
  and follows a `Plan` drawn from it:
  - boundary: replay a prefix of the step's successful attempt at the task, then walk on from
    that state (the edge between what the agent can and cannot do);
  - forgetting: replay a prefix of the task's last success before it was forgotten, then vary
    the next action: same action pattern, other parameters (practise the same operation);
  - rare: replay the attempt up to where it took the rare action, then walk with that pattern
    weighted up `RARE_BOOST` times.
  After the prefix (and the varied action) a walk goes on uniformly, but for a rare signal's:
  there every step weights each valid action by how rarely the round's rollouts used its
  pattern (`rarity`), except an action that ends episodes (shop's purchase, sql's submit:
  `ending_patterns`), which keeps the share a uniform choice gives it: that action turns a
  walk into a task. (Weighing every guided step by rarity, as the first version did, steered
  shop's walks away from products and purchases, the patterns every rollout uses: 0
  candidates of 8 walks at shop seed 3, where the random walks bought once.)
  A round with fewer signals than explorations fills the rest with random starts, so every
  kind plays the same number of explorations.
The env turns the walks into candidate tasks as it does an LLM's explorations.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from coevo.envs.base import Env
from coevo.envs.conversation import replay
from coevo.envs.evolve import action_pattern, agent_actions, exploration_task, valid_actions
from coevo.envs.react import format_reply, parse
from coevo.methods.agent_data.explore import Seed, instruction, random_seeds
from coevo.methods.agent_data.signals import PASS, Found, patterns
from coevo.seeds import derive
from coevo.store import StoredTrajectory
from coevo.trajectory import Task, Trajectory

RARITY = 9.0
"""Guided: a pattern every trajectory of the round used is picked a tenth (1 / (1 + RARITY))
as often as one that none used."""
RARE_BOOST = 4.0
"""Guided, from a rare signal: its pattern is weighted up this much more."""
REPLAYED = "I do again what an earlier attempt did here."
"""The thought of a replayed action."""


@dataclass(frozen=True)
class Plan:
    """How one guided exploration goes: the actions replayed first, then how it branches."""

    prefix: tuple[str, ...] = ()
    """Actions of an earlier attempt, replayed from the task's start."""
    vary: str | None = None
    """The first action after the prefix has this pattern (forgetting)..."""
    avoid: str | None = None
    """...and is not this action, the one the attempt took there, when another one is valid."""
    weighted: bool = False
    """Choose each action after the prefix by its pattern's rarity (rare); else uniformly."""
    boost: str | None = None
    """This pattern is weighted up RARE_BOOST times more (rare)."""
    context: str | None = None
    """What the plan is, in words: the exploration's context (its provenance)."""


def rarity(
    trajectories: Sequence[Trajectory], pattern: Callable[[str], str]
) -> Callable[[str], float]:
    """Pattern -> its weight, 1 / (1 + RARITY * the share of `trajectories` that used it)."""
    counts = Counter(p for t in trajectories for p in set(patterns(t, pattern)))
    n = max(1, len(trajectories))
    return lambda p: 1.0 / (1.0 + RARITY * counts[p] / n)


def ending_patterns(
    trajectories: Sequence[Trajectory], pattern: Callable[[str], str]
) -> frozenset[str]:
    """The patterns of the actions that ended `trajectories` (those the env ended, not their
    step budget)."""
    return frozenset(
        pattern(actions[-1]) for t in trajectories if t.terminated and (actions := _actions(t))
    )


def plan_round(
    env: Env,
    chosen: Sequence[Found],
    played: dict[int, list[StoredTrajectory]],
    train: Sequence[Task],
    n: int,
    seed: int,
    interval: int,
) -> tuple[list[Seed], list[Plan]]:
    """The round's `n` explorations and their plans: one per `chosen` signal record (none for
    `random`), then random train tasks with no plan for the rest."""
    seeds: list[Seed] = []
    plans: list[Plan] = []
    if chosen:
        pattern = action_pattern(env)
        by_row = {r.id: r for rows in played.values() for r in rows}
        for k, found in enumerate(chosen):
            key = f"{interval}-{k}"
            attempts = [by_row[i].trajectory for i in found.rows]
            before = _last_success(played, found.task_id, found.step)
            rng = random.Random(derive(seed, "plan", key))
            plans.append(plan(found.kind, found.detail, attempts, before, pattern, rng))
            seeds.append(Seed(attempts[0].task, found, key))
    filler = random_seeds(train, n - len(seeds), seed, f"{interval}-r")
    return seeds + filler, plans + [Plan() for _ in filler]


def _last_success(
    played: dict[int, list[StoredTrajectory]], task_id: str, step: int
) -> Trajectory | None:
    """The task's latest successful attempt in a step before `step`."""
    for s in sorted((s for s in played if s < step), reverse=True):
        wins = [r.trajectory for r in played[s] if r.trajectory.task.id == task_id]
        wins = [t for t in wins if t.reward >= PASS]
        if wins:
            return max(wins, key=lambda t: t.reward)
    return None


def plan(
    kind: str,
    detail: dict[str, Any],
    attempts: Sequence[Trajectory],
    before: Trajectory | None,
    pattern: Callable[[str], str],
    rng: random.Random,
) -> Plan:
    """The plan of an exploration from a signal of `kind` (see the module docstring):
    `attempts` are the signal's trajectories, `before` the task's last earlier success."""
    if kind == "rare":
        rare = str(detail.get("pattern", ""))
        actions = _actions(attempts[0])
        cut = next((i for i, a in enumerate(actions) if pattern(a) == rare), 0)
        context = f"replay up to {cut} actions of an attempt, then try '{rare}' and rare actions"
        return Plan(tuple(actions[:cut]), weighted=True, boost=rare, context=context)
    if kind == "forgetting":
        actions = _actions(before or attempts[0])
        cut = rng.randrange(len(actions)) if actions else 0
        nxt = actions[cut] if cut < len(actions) else None
        vary = pattern(nxt) if nxt is not None else None
        context = (
            f"replay up to {cut} actions of the last success at this task, then vary '{vary}'"
            if vary
            else "walk again from the start of a task the agent forgot"
        )
        return Plan(tuple(actions[:cut]), vary=vary, avoid=nxt, context=context)
    best = max(attempts, key=lambda t: t.reward)
    actions = _actions(best)
    cut = rng.randrange(len(actions)) if actions else 0
    context = f"replay up to {cut} actions of an attempt scoring {best.reward:.2f}, then branch"
    return Plan(tuple(actions[:cut]), context=context)


def _actions(t: Trajectory) -> list[str]:
    return [action for _, action, _ in agent_actions(t)]


def walks(
    env: Env,
    seeds: Sequence[Seed],
    plans: Sequence[Plan],
    *,
    seed: int,
    weight: Callable[[str], float] | None = None,
    ending: frozenset[str] = frozenset(),
) -> list[Trajectory]:
    """One walk per seed from its task's start under an exploration instruction (uniform
    choices without `weight`: `random`; with it, `guided`: each plan's prefix and branch, then
    its weighted or uniform choices, the `ending` patterns at their uniform share)."""
    out = []
    for i, (s, p) in enumerate(zip(seeds, plans, strict=True)):
        task = exploration_task(env, s.task, instruction(p.context), s.key)
        rng = random.Random(derive(seed, "walk", i))
        out.append(walk(env, task, rng, plan=p, weight=weight, ending=ending))
    return out


def walk(
    env: Env,
    task: Task,
    rng: random.Random,
    *,
    plan: Plan = Plan(),
    weight: Callable[[str], float] | None = None,
    ending: frozenset[str] = frozenset(),
) -> Trajectory:
    """One episode: the plan's prefix replayed, then a valid action per step, chosen uniformly
    or, where the plan is `weighted`, by the weight of its pattern, until the episode ends.
    There an action of an `ending` pattern is weighted as the mean of the others: it is chosen
    as often as a uniform choice would choose it, whatever the weights. `weight` None: the
    `random` explorer (the plan has neither prefix nor branch)."""
    replayed = _clean_prefix(env, task, plan.prefix)
    pattern = action_pattern(env)

    def replies() -> Iterator[str]:  # read between steps: the actions valid now
        nonlocal plan
        yield from (format_reply(REPLAYED, a) for a in plan.prefix[:replayed])
        while options := valid_actions(env):
            yield _choose(options, rng, pattern, weight, plan, ending)
            plan = replace(plan, vary=None, avoid=None)  # only the branching action varies

    errors: list[bool] = []  # none in an env whose list is exact
    played = replay(
        env,
        task,
        replies(),
        agent="explorer",
        on_step=lambda r: errors.append(bool(r.info.get("error"))),
    )
    explorer = "random" if weight is None else "guided"
    extra = {"explorer": explorer, "replayed": replayed, "refused": sum(errors)}
    return replace(played, metadata={**extra, **played.metadata})


def _clean_prefix(env: Env, task: Task, actions: Sequence[str]) -> int:
    """How many of `actions` replay from the task's start without an error observation and
    without ending the episode (a dry run; the envs are deterministic, as verification asks)."""
    if not actions:
        return 0
    env.reset(task)
    for i, action in enumerate(actions):
        result = env.step(format_reply(REPLAYED, action))
        if result.done or result.info.get("error"):
            return i
    return len(actions)


def _choose(
    options: list[str],
    rng: random.Random,
    pattern: Callable[[str], str],
    weight: Callable[[str], float] | None,
    plan: Plan,
    ending: frozenset[str] = frozenset(),
) -> str:
    if weight is None:
        return rng.choice(options)
    kinds = [pattern(parse(o).action or "") for o in options]
    if plan.vary is not None:
        same = [o for o, k in zip(options, kinds, strict=True) if k == plan.vary]
        varied = [o for o in same if parse(o).action != plan.avoid] or same
        if varied:
            return rng.choice(varied)
    if not plan.weighted:
        return rng.choice(options)
    weights = [weight(k) * (RARE_BOOST if k == plan.boost else 1.0) for k in kinds]
    others = [w for w, k in zip(weights, kinds, strict=True) if k not in ending]
    if others and len(others) < len(weights):
        mean = sum(others) / len(others)
        weights = [mean if k in ending else w for w, k in zip(weights, kinds, strict=True)]
    if not sum(weights) > 0:  # every valid action weighted out: any of them
        return rng.choice(options)
    return rng.choices(options, weights=weights)[0]
