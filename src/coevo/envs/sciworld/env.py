"""`SciWorldEnv`: the real ScienceWorld benchmark behind coevo's Env contract.

    env = SciWorldEnv()                      # one JVM, reused by every episode of this env
    task = env.tasks("test_unseen")[0]
    observation, info = env.reset(task)      # task description + the room around the agent
    env.step("Thought: I need water.\nAction: teleport to kitchen")

Reward: the best score the episode reached / 100, clipped to [0, 1], given when it ends.
`terminated` when the simulator says the task is over (solved, or failed with a negative
score); `truncated` when the task type's step budget runs out. Invalid actions get the
simulator's own answer ("No known action matches that input."). If the JVM hangs past `timeout`
seconds or dies, it is restarted and the episode ends (truncated) with `info["error"]` set.
"""

from __future__ import annotations

import logging
from typing import Any

from coevo.envs.base import EnvError, EpisodeClock, NoDemonstrationError, StepResult, check_split
from coevo.envs.evolve import Candidate
from coevo.envs.react import FORMAT_ERROR, format_reply, parse
from coevo.envs.sciworld import evolve, protocol
from coevo.envs.sciworld.manifest import (
    GoldCache,
    GoldRecord,
    gold_name,
    load_manifest,
    version_dir,
)
from coevo.envs.sciworld.simulator import JAVA_HEAP, Simulator, SimulatorError
from coevo.envs.sciworld.thoughts import thought_for
from coevo.trajectory import Task, Trajectory, Turn

log = logging.getLogger(__name__)

INSTRUCTION_PROMPT = """\
You are a helpful assistant doing a science experiment in a text world. Each turn, reply with \
one line 'Thought: <your reasoning>' and one line 'Action: <one action>'. Available actions:
open OBJ / close OBJ: open or close a container or door
activate OBJ / deactivate OBJ: turn a device on or off
connect OBJ to OBJ / disconnect OBJ: electrical connections
use OBJ / use OBJ on OBJ: use a device or item
look around: describe the current room
look at OBJ / look in OBJ / examine OBJ / read OBJ: inspect something
move OBJ to OBJ / pick up OBJ / put down OBJ: move things around
pour OBJ into OBJ / dunk OBJ into OBJ / mix OBJ: handle substances
eat OBJ / flush OBJ: eat food, flush a toilet
teleport to LOC / go to LOC: move to another room
wait / wait1: let time pass (10 steps / 1 step)
focus on OBJ: mark the object the task is about (focusing on the wrong object fails the task)
inventory: list what you carry
task: show the task again
When an action is ambiguous the world lists numbered choices: answer with the number."""


# How the simulator answers an action it cannot parse or carry out.
UNKNOWN_ACTION = "No known action matches that input"


class SciWorldEnv:
    """ScienceWorld tasks under the agent papers' protocol (see `protocol.py` and `eto.py`)."""

    name = "sciworld"
    instruction_prompt = INSTRUCTION_PROMPT
    text_dedup = False
    """Variations of one type have near-identical descriptions (a colour, a room): the task name
    and variation alone (`task_key`) say whether two tasks are the same (coevo.envs.evolve)."""

    def __init__(
        self,
        max_steps: int | None = None,
        timeout: float = 30.0,
        cache_dir: str | None = None,
        data: str | None = None,
        splits: str = "eto",
        java_heap: str | None = JAVA_HEAP,
    ) -> None:
        """`max_steps` overrides every type's budget; `timeout` bounds one simulator call (s);
        `java_heap` caps each JVM's heap (a JVM runs per concurrent episode; null: java's own
        default, a quarter of the machine's memory);
        `cache_dir` (or `data`, the CLI's --data) is the cache root instead of $COEVO_CACHE
        (the manifest and gold verdicts go to `<root>/sciworld/<version>/`); `splits` is
        `eto` (ETO's published task lists and budgets) or `sampled` (coevo's own draw)."""
        if max_steps is not None and max_steps < 1:
            raise EnvError(f"max_steps must be at least 1, got {max_steps}.")
        if splits not in protocol.SPLITS:
            raise EnvError(f"splits must be 'eto' or 'sampled', got {splits!r}.")
        self._override = max_steps
        self.splits = splits
        self.sim = Simulator(timeout=timeout, heap=java_heap)
        root = cache_dir or data
        try:
            self.manifest, self.manifest_source = load_manifest(self.sim, root, splits=splits)
        except BaseException:
            self.sim.close()
            raise
        self.types: dict[str, dict[str, Any]] = self.manifest["types"]
        self.gold = GoldCache(
            version_dir(self.sim.version, root) / gold_name(self.sim.deterministic)
        )
        self._tasks: dict[str, tuple[int, list[Task]]] = {}
        """split -> (gold cache writes when listed, tasks): relisted after a new verdict."""
        self._excluded_logged = False
        self._clock = EpisodeClock(self._default_budget())
        self._task: Task | None = None
        self._best = 0
        self._score = 0

    # -- tasks -----------------------------------------------------------------------------

    def _default_budget(self) -> int:
        if self._override is not None:
            return self._override
        return max((t["budget"] for t in self.types.values() if not t["excluded"]), default=120)

    def budget(self, task: Task) -> int:
        """The step budget of `task`: its type's budget unless `max_steps` overrides it."""
        return self._override or int(task.data["max_steps"])

    @property
    def max_steps(self) -> int:
        """The budget of the current episode (before any reset: the largest type budget)."""
        return self._clock.max_steps

    def excluded(self) -> dict[str, str]:
        """Task id -> why its gold path is excluded, from the manifest and this machine's cache."""
        budgets = {t["id"]: self.types[t["task_name"]]["budget"] for t in self.manifest["tasks"]}
        # Only verdicts reached under the task's current budget count.
        reasons = {
            k: v["reason"]
            for k, v in self.manifest["gold"].items()
            if not v["valid"] and v.get("budget") == budgets.get(k)
        }
        for task_id in self.gold.invalid_ids():
            record = self.gold.get(task_id)
            if record is not None and record.budget == budgets.get(task_id):
                reasons[task_id] = record.reason or "invalid gold path"
        return reasons

    def tasks(self, split: str) -> list[Task]:
        """The split's tasks in round-robin order over types. `sampled` leaves out the tasks whose
        gold path is known not to reach 1.0 within the budget; `eto` keeps ETO's lists whole
        (such a task is scored like any other; only `expert()` refuses it)."""
        check_split(split)
        cached = self._tasks.get(split)
        if cached is None or cached[0] != self.gold.writes:
            excluded = self.excluded() if self.splits == "sampled" else {}
            if excluded and not self._excluded_logged:
                self._excluded_logged = True
                log.info("sciworld: %d tasks excluded for their gold paths", len(excluded))
            rows = [t for t in self.manifest["tasks"] if t["split"] == split]
            listed = [
                Task(
                    id=t["id"],
                    env=self.name,
                    split=split,
                    instruction=t["instruction"],
                    data={
                        "task_name": t["task_name"],
                        "variation": t["variation"],
                        "max_steps": self.types[t["task_name"]]["budget"],
                    },
                )
                for t in interleave(rows)
                if t["id"] not in excluded
            ]
            self._tasks[split] = cached = (self.gold.writes, listed)
        return list(cached[1])

    # -- episodes --------------------------------------------------------------------------

    def reset(self, task: Task, *, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        """Load the task's variation (the simulator is deterministic: `seed` is unused)."""
        return self._start(task, self.budget(task))

    def _start(self, task: Task, budget: int) -> tuple[str, dict[str, Any]]:
        name, variation = task.data.get("task_name"), task.data.get("variation")
        if not isinstance(name, str) or not isinstance(variation, int):
            raise EnvError(
                f"Task {task.id!r} is not a sciworld task (its data needs task_name and "
                "variation): take tasks from SciWorldEnv.tasks(split)."
            )
        try:
            look = self.sim.load(name, variation, protocol.SIMPLIFICATION)
        except SimulatorError:
            # The JVM was replaced: one more try on the fresh one before giving up.
            try:
                look = self.sim.load(name, variation, protocol.SIMPLIFICATION)
            except SimulatorError as exc:
                raise EnvError(f"Could not load {task.id} on a fresh simulator: {exc}.") from exc
        self._task, self._best, self._score = task, 0, 0
        self._clock = EpisodeClock(budget)
        self._clock.start()
        observation = f"Task: {task.instruction}\n\n{look.strip()}"
        return observation, {"task_name": name, "variation": variation, "max_steps": self.max_steps}

    def step(self, action: str) -> StepResult:
        step = self._clock.tick()
        parsed = parse(action)
        if not parsed.ok:
            return self._result(FORMAT_ERROR, False, {"step": step, "valid_format": False})
        try:
            observation, score, done = self.sim.step(parsed.action)
        except SimulatorError as exc:
            # The episode's world is gone with the old JVM: end it, keeping what was scored.
            self._clock.finish(True)
            info = {"step": step, "error": exc.kind, "error_message": str(exc)}
            return StepResult(
                f"The simulator failed ({exc}). This episode is over.",
                self._reward(), False, True, {**info, **self._score_info()},
            )  # fmt: skip
        self._score = score
        self._best = max(self._best, score)
        # The simulator always answers with text; should it not, the agent is still told.
        observation = observation.strip() or "(The simulator gave no answer to that action.)"
        info: dict[str, Any] = {"step": step}
        if observation.startswith(UNKNOWN_ACTION):
            info["error"] = "unknown action"
        return self._result(observation, done, info)

    def _reward(self) -> float:
        return min(1.0, max(0.0, self._best / 100))

    def _score_info(self) -> dict[str, Any]:
        return {"score": self._score, "best_score": self._best}

    def _result(self, observation: str, terminated: bool, info: dict[str, Any]) -> StepResult:
        truncated = self._clock.finish(terminated)
        reward = self._reward() if terminated or truncated else 0.0
        return StepResult(
            observation, reward, terminated, truncated, {**info, **self._score_info()}
        )

    # -- expert ----------------------------------------------------------------------------

    def expert(self, task: Task) -> list[Turn]:
        """The gold action sequence with short thoughts; raises if its replay does not score 1.0.

        Paths come checked with the shipped manifest; any other path is generated and replayed
        here (ending any episode in progress) and the verdict cached, so it is checked once.
        """
        record = self.gold_record(task)
        if not record.valid:
            listed = (
                "ETO's task lists keep the task; it has no demonstration"
                if self.splits == "eto"
                else "tasks() leaves it out once checked; pick another task"
            )
            raise NoDemonstrationError(
                f"The gold path of {task.id} is excluded: {record.reason}. {listed}."
            )
        return [Turn("assistant", format_reply(thought_for(a), a)) for a in record.actions]

    def gold_record(self, task: Task) -> GoldRecord:
        """The task's gold path and its replay verdict, from the cache or checked now."""
        budget = int(task.data["max_steps"])
        record = self.gold.get(task.id)
        if record is not None and record.budget == budget:
            return record
        shipped = self.manifest["gold"].get(task.id)
        if record is None and shipped is not None and shipped.get("budget") == budget:
            # Checked when the manifest was made, on this same scienceworld version.
            return GoldRecord.from_dict(shipped)
        if record is not None:
            actions = record.actions  # known path, new budget: replay only
        else:
            name, variation = task.data["task_name"], task.data["variation"]
            try:
                actions = tuple(self.sim.gold_actions(name, variation, protocol.SIMPLIFICATION))
            except SimulatorError as exc:
                raise EnvError(f"Could not get the gold path of {task.id}: {exc}.") from exc
        record = self._replay_gold(task, actions)
        self.gold.put(record)
        if not record.valid:
            log.warning("sciworld: excluding the gold path of %s: %s", task.id, record.reason)
        return record

    def _replay_gold(self, task: Task, actions: tuple[str, ...]) -> GoldRecord:
        # Judged against the type's own budget, whatever `max_steps` override this env has.
        budget = int(task.data["max_steps"])
        if not actions:
            return GoldRecord(task.id, actions, False, 0.0, 0, "no gold path", budget)
        self._start(task, budget)
        result: StepResult | None = None
        for action in actions:
            result = self.step(action)
            if result.done:
                break
        self._clock = EpisodeClock(self._clock.max_steps)  # the replay is not the caller's episode
        assert result is not None
        steps = int(result.info["step"])
        if result.reward >= 1.0 and result.terminated:
            return GoldRecord(task.id, actions, True, result.reward, steps, None, budget)
        if "error" in result.info:
            # A JVM failure says nothing about the path: not cached, checked again next time.
            raise EnvError(
                f"Could not replay the gold path of {task.id}: {result.info['error_message']}."
            )
        if result.truncated:
            reason = (
                f"its {len(actions)} steps exceed the type's budget of {budget} "
                f"(score {result.info['best_score']} when the budget ran out)"
            )
        elif result.terminated:
            reason = f"the episode ended at step {steps} with score {result.info['best_score']}"
        else:
            reason = f"all {len(actions)} actions replayed, best score {result.info['best_score']}"
        return GoldRecord(task.id, actions, False, result.reward, steps, reason, budget)

    # -- agent-data co-evolution: coevo.envs.evolve's capabilities, done in evolve.py ------

    def action_pattern(self, action: str) -> str:
        return evolve.action_pattern(action)

    def valid_actions(self) -> list[str]:
        """The simulator's valid actions now, less `focus on ...` (none between episodes)."""
        if self._task is None or not self._clock.running:
            return []
        return evolve.valid_actions(self.sim)

    def tasks_from_exploration(self, trajectory: Trajectory) -> list[Candidate]:
        return evolve.tasks_from_exploration(self.sim, self.types, self.tasks("train"), trajectory)

    def task_key(self, task: Task) -> str:
        return evolve.task_key(task)

    def close(self) -> None:
        self.sim.close()

    def __enter__(self) -> SciWorldEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def interleave(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tasks in round-robin order over types, so any prefix of a split covers many types."""
    rank: dict[str, int] = {}
    keyed = []
    for row in rows:
        n = rank.get(row["task_name"], 0)
        rank[row["task_name"]] = n + 1
        keyed.append((n, row["task_name"], row["variation"], row))
    return [k[-1] for k in sorted(keyed, key=lambda k: k[:3])]
