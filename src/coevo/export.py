"""Exporters: a run's store as JSONL, Parquet, ShareGPT (ETO's layout) or TRL DPO data.

- `jsonl`: `trajectories.jsonl` and `pairs.jsonl`, one `to_dict()` per line plus the row `id`
  and `iteration`; `Trajectory.from_dict` / `Pair.from_dict` read the lines back unchanged.
- `parquet`: `trajectories.parquet` (flat columns, `turns` as a list of role/text structs with
  the sampled `token_ids` and `logprobs` where a turn kept them) and `pairs.parquet` (chosen and
  rejected as trajectory JSON); `read_parquet_*` read them back.
- `sharegpt`: `sharegpt.json`, a JSON array of `{"id", "conversations": [{"from": "human" |
  "gpt" | "system", "value"}], ...}` as in ETO's data files, one item per trajectory.
- `trl-dpo`: `trl_dpo.jsonl`, TRL's conversational preference layout: `prompt` (the messages
  both trajectories share, ending with a user message), `chosen` and `rejected` (the rest of
  each), plus our `kind`, `weight` and `sft_weight`.

Whatever the format, a run that synthesized tasks (`agent_data`) also gets
`synthesized_tasks.jsonl`: one task per line (`Task.to_dict()`) with the `stage` and `round`
that made it and its `provenance` (signal, exploration episode), so every one can be audited.

A `Selection` narrows what is written (ETO-style SFT data is usually the experts and the
successes: `Selection(min_reward=1.0)`); `export` says, per file, how many rows it wrote.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coevo.store import Store, StoredPair, StoredTrajectory
from coevo.trajectory import Pair, Task, Trajectory, Turn

FORMATS = ("jsonl", "parquet", "sharegpt", "trl-dpo")
SHAREGPT_ROLE = {"user": "human", "assistant": "gpt", "system": "system"}


# What each format writes: ShareGPT has no place for a pair, TRL's DPO data none for a lone
# trajectory.
WRITES = {
    "jsonl": ("trajectories", "pairs"),
    "parquet": ("trajectories", "pairs"),
    "sharegpt": ("trajectories",),
    "trl-dpo": ("pairs",),
}


@dataclass(frozen=True)
class Selection:
    """Which rows to export; None selects all. `stage` names a stage or a stage's prefix
    (`eval-1` selects eval-1-test_seen and eval-1-test_unseen) and selects pairs too; the
    other filters select trajectories."""

    agent: str | None = None
    split: str | None = None
    min_reward: float | None = None
    stage: str | None = None

    def trajectories(self, store: Store) -> list[StoredTrajectory]:
        return [
            row
            for stage in self._stages(store.stages())
            for row in store.stored_trajectories(
                stage=stage, agent=self.agent, split=self.split, min_reward=self.min_reward
            )
        ]

    def pairs(self, store: Store) -> list[StoredPair]:
        return [
            row
            for stage in self._stages(store.stages("pairs"))
            for row in store.stored_pairs(stage=stage)
        ]

    def check(self, store: Store) -> None:
        """A stage or agent the store does not hold is a mistake (a typo would otherwise
        export empty files): ValueError naming the ones it holds."""
        if self.agent is not None and self.agent not in (agents := store.agents()):
            raise ValueError(
                f"no trajectories of agent {self.agent!r} in this run; its agents: "
                f"{', '.join(agents) or 'none'}."
            )
        if self.stage is not None:
            known = sorted({*store.stages(), *store.stages("pairs")})
            if not self._stages(known):
                raise ValueError(
                    f"no stage {self.stage!r} in this run; its stages: {', '.join(known) or 'none'}."
                )

    def _stages(self, known: list[str]) -> list[str | None]:
        if self.stage is None:
            return [None]
        return [s for s in known if s == self.stage or s.startswith(f"{self.stage}-")]


@dataclass(frozen=True)
class Written:
    """One file an export wrote, and how many rows of what it holds."""

    path: Path
    rows: int
    what: str
    """`trajectories`, `pairs` or `synthesized tasks`."""

    @property
    def counted(self) -> str:
        """`1 pair`, `12 trajectories`: the rows and what they are, in words."""
        if self.rows == 1:
            return f"1 {ONE[self.what]}"
        return f"{self.rows:,} {self.what}"


ONE = {"trajectories": "trajectory", "pairs": "pair", "synthesized tasks": "synthesized task"}


def export(
    store: Store, fmt: str, out: Path | str, selection: Selection | None = None
) -> list[Written]:
    """Write the store's contents (those `selection` selects) in `fmt` under directory `out`;
    the files written."""
    if fmt not in FORMATS:
        raise ValueError(f"Unknown export format {fmt!r}: use one of {', '.join(FORMATS)}.")
    selection = selection or Selection()
    selection.check(store)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    return _written(store, fmt, out, selection) + synthesized_tasks(store, out)


def synthesized_tasks(store: Store, out: Path) -> list[Written]:
    """`synthesized_tasks.jsonl` when the run synthesized tasks (none: no file)."""
    rows = store.synthesized()
    if not rows:
        return []
    lines = (
        {**r.task.to_dict(), "stage": r.stage, "round": r.round, "provenance": r.provenance}
        for r in rows
    )
    path = _write_lines(out / "synthesized_tasks.jsonl", lines)
    return [Written(path, len(rows), "synthesized tasks")]


def _written(store: Store, fmt: str, out: Path, selection: Selection) -> list[Written]:
    trajectories = selection.trajectories(store) if "trajectories" in WRITES[fmt] else []
    pairs = selection.pairs(store) if "pairs" in WRITES[fmt] else []
    if fmt == "jsonl":
        return [
            Written(
                _write_lines(out / "trajectories.jsonl", map(_trajectory_line, trajectories)),
                len(trajectories),
                "trajectories",
            ),
            Written(_write_lines(out / "pairs.jsonl", map(_pair_line, pairs)), len(pairs), "pairs"),
        ]
    if fmt == "parquet":
        return [
            Written(
                write_parquet_trajectories(trajectories, out / "trajectories.parquet"),
                len(trajectories),
                "trajectories",
            ),
            Written(write_parquet_pairs(pairs, out / "pairs.parquet"), len(pairs), "pairs"),
        ]
    if fmt == "sharegpt":
        items = [to_sharegpt(s.trajectory, f"{s.trajectory.task.id}#{s.id}") for s in trajectories]
        path = out / "sharegpt.json"
        path.write_text(json.dumps(items, ensure_ascii=False, indent=1), encoding="utf-8")
        return [Written(path, len(items), "trajectories")]
    rows = ({**to_trl_dpo(s.pair), "id": s.id, "iteration": s.iteration} for s in pairs)
    return [Written(_write_lines(out / "trl_dpo.jsonl", rows), len(pairs), "pairs")]


def _write_lines(path: Path, rows: Any) -> Path:
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def _trajectory_line(s: StoredTrajectory) -> dict[str, Any]:
    return {"id": s.id, "iteration": s.iteration, **s.trajectory.to_dict()}


def _pair_line(s: StoredPair) -> dict[str, Any]:
    return {"id": s.id, "iteration": s.iteration, **s.pair.to_dict()}


def read_jsonl(path: Path | str) -> list[dict[str, Any]]:
    with Path(path).open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


# -- ShareGPT (ETO) -------------------------------------------------------------------


def to_sharegpt(trajectory: Trajectory, item_id: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "conversations": [
            {"from": SHAREGPT_ROLE[t.role], "value": t.text} for t in trajectory.turns
        ],
        "reward": trajectory.reward,
        "agent": trajectory.agent,
        "task": trajectory.task.id,
    }


def turns_from_sharegpt(item: dict[str, Any]) -> tuple[Turn, ...]:
    role = {v: k for k, v in SHAREGPT_ROLE.items()}
    return tuple(Turn(role[m["from"]], m["value"]) for m in item["conversations"])


# -- TRL DPO ------------------------------------------------------------------------


def _messages(turns: Sequence[Turn]) -> list[dict[str, str]]:
    return [{"role": t.role, "content": t.text} for t in turns]


def to_trl_dpo(pair: Pair) -> dict[str, Any]:
    """The pair as TRL's conversational prompt/chosen/rejected (shared prefix as prompt)."""
    a, b = pair.chosen.turns, pair.rejected.turns
    shared = 0
    while shared < min(len(a), len(b)) and a[shared] == b[shared]:
        shared += 1
    # The prompt ends on a user message, so both completions start with an agent turn.
    while shared > 0 and a[shared - 1].role != "user":
        shared -= 1
    return {
        "prompt": _messages(a[:shared]),
        "chosen": _messages(a[shared:]),
        "rejected": _messages(b[shared:]),
        "kind": pair.kind,
        "weight": pair.weight,
        "sft_weight": pair.sft_weight,
        "task": pair.task.id,
    }


# -- Parquet ------------------------------------------------------------------------


def write_parquet_trajectories(rows: list[StoredTrajectory], path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    turn = pa.struct(
        [
            ("role", pa.string()),
            ("text", pa.string()),
            ("token_ids", pa.list_(pa.int64())),
            ("logprobs", pa.list_(pa.float64())),
        ]
    )
    t = [s.trajectory for s in rows]
    table = pa.table(
        {
            "id": pa.array([s.id for s in rows], pa.int64()),
            "iteration": pa.array([s.iteration for s in rows], pa.int64()),
            "agent": pa.array([x.agent for x in t], pa.string()),
            "task_id": pa.array([x.task.id for x in t], pa.string()),
            "env": pa.array([x.task.env for x in t], pa.string()),
            "split": pa.array([x.task.split for x in t], pa.string()),
            "instruction": pa.array([x.task.instruction for x in t], pa.string()),
            "task_data": pa.array(
                [json.dumps(x.task.data, ensure_ascii=False) for x in t], pa.string()
            ),
            "reward": pa.array([x.reward for x in t], pa.float64()),
            "terminated": pa.array([x.terminated for x in t], pa.bool_()),
            "truncated": pa.array([x.truncated for x in t], pa.bool_()),
            "steps": pa.array([x.steps for x in t], pa.int64()),
            "sample": pa.array([x.sample for x in t], pa.int64()),
            "turns": pa.array([[u.to_dict() for u in x.turns] for x in t], pa.list_(turn)),
            "metadata": pa.array(
                [json.dumps(x.metadata, ensure_ascii=False) for x in t], pa.string()
            ),
        }
    )
    pq.write_table(table, path)
    return path


def read_parquet_trajectories(path: Path | str) -> list[Trajectory]:
    import pyarrow.parquet as pq

    return [
        Trajectory(
            task=Task(
                r["task_id"], r["env"], r["split"], r["instruction"], json.loads(r["task_data"])
            ),
            agent=r["agent"],
            turns=tuple(Turn.from_dict(u) for u in r["turns"]),
            reward=r["reward"],
            terminated=r["terminated"],
            truncated=r["truncated"],
            steps=r["steps"],
            metadata=json.loads(r["metadata"]),
            sample=r.get("sample") or 0,
        )
        for r in pq.read_table(path).to_pylist()
    ]


def write_parquet_pairs(rows: list[StoredPair], path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table(
        {
            "id": pa.array([s.id for s in rows], pa.int64()),
            "iteration": pa.array([s.iteration for s in rows], pa.int64()),
            "kind": pa.array([s.pair.kind for s in rows], pa.string()),
            "weight": pa.array([s.pair.weight for s in rows], pa.float64()),
            "sft_weight": pa.array([s.pair.sft_weight for s in rows], pa.float64()),
            "chosen_id": pa.array([s.chosen_id for s in rows], pa.int64()),
            "rejected_id": pa.array([s.rejected_id for s in rows], pa.int64()),
            "chosen": pa.array([s.pair.chosen.to_json() for s in rows], pa.string()),
            "rejected": pa.array([s.pair.rejected.to_json() for s in rows], pa.string()),
            "metadata": pa.array(
                [json.dumps(s.pair.metadata, ensure_ascii=False) for s in rows], pa.string()
            ),
        }
    )
    pq.write_table(table, path)
    return path


def read_parquet_pairs(path: Path | str) -> list[Pair]:
    import pyarrow.parquet as pq

    return [
        Pair(
            chosen=Trajectory.from_json(r["chosen"]),
            rejected=Trajectory.from_json(r["rejected"]),
            kind=r["kind"],
            weight=r["weight"],
            sft_weight=r["sft_weight"],
            metadata=json.loads(r["metadata"]),
        )
        for r in pq.read_table(path).to_pylist()
    ]
