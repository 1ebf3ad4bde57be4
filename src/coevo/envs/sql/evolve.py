"""sql's side of agent-data co-evolution: statement shapes as action patterns, the statements
valid now (for the explorers without a model), and tasks made from the queries an explorer ran
(the query is the gold; the question is the explorer's own, written as `Task: ...` in its
thought, or a template description). `SqlEnv`'s methods of the same names (`coevo.envs.evolve`'s
capabilities) call these with the env's sandboxes and episode."""

from __future__ import annotations

import re
from collections.abc import Callable

from coevo.envs.evolve import Candidate, agent_actions
from coevo.envs.react import format_reply
from coevo.envs.sql.actions import statements
from coevo.envs.sql.sandbox import QueryResult, Sandbox, extract_sql, lead_keyword
from coevo.envs.sql.spider import tables_in_query
from coevo.trajectory import Task, Trajectory

_CLAUSES = (
    ("JOIN", re.compile(r"\bjoin\b", re.I)),
    ("WHERE", re.compile(r"\bwhere\b", re.I)),
    ("GROUP BY", re.compile(r"\bgroup\s+by\b", re.I)),
    ("HAVING", re.compile(r"\bhaving\b", re.I)),
    ("ORDER BY", re.compile(r"\border\s+by\b", re.I)),
    ("LIMIT", re.compile(r"\blimit\b", re.I)),
    ("SUBQUERY", re.compile(r"\(\s*select\b", re.I)),
    ("UNION", re.compile(r"\b(union|intersect|except)\b", re.I)),
)
_QUESTION = re.compile(r"(?:task|question)\s*:\s*(.+)", re.I | re.S)
_MAX_QUESTION = 300
_SHOW = re.compile(r"^(show\s+tables|desc(ribe)?\s)", re.I)
_INSPECT = "I look at how the database is laid out."
MIN_STEPS = 3
"""`submit` is valid from this step on (the paper: a task needs at least 3 steps that ran),
and only after a query that returned rows."""


def action_pattern(action: str) -> str:
    """The statement's shape: `SELECT+JOIN+GROUP BY`, `SHOW`, `DESC`, `SUBMIT`, ..."""
    sql = extract_sql(action)
    if sql.lower().rstrip(";").strip() == "submit":
        return "SUBMIT"
    if _SHOW.match(sql):
        return sql.split()[0].upper().replace("DESCRIBE", "DESC")
    lead = lead_keyword(sql).upper()
    if not lead:
        return "invalid"
    return "+".join([lead, *(name for name, rx in _CLAUSES if rx.search(sql))])


def valid_actions(box: Sandbox, steps: int, last: QueryResult | None) -> list[str]:
    """The statements generated from the episode's database `box` (`coevo.envs.sql.actions`),
    each with its question as `Task: ...` in the thought, and `submit` once it makes sense
    (`steps` taken, the `last` result)."""
    replies = [
        format_reply(f"Task: {s.question}" if s.question else _INSPECT, s.sql)
        for s in statements(box)
    ]
    if steps >= MIN_STEPS and last is not None and last.ok and last.rows:
        replies.append(format_reply("The last result answers a question; I submit it.", "submit"))
    return replies


def question_of(thought: str) -> str | None:
    """The explorer's `Task: ...` (or `Question: ...`) in a thought (None: it wrote none, or one unusable)."""
    found = _QUESTION.search(thought or "")
    if found is None:
        return None
    text = " ".join(found.group(1).split())
    return text if 0 < len(text) <= _MAX_QUESTION else None


def describe(db_id: str, sql: str) -> str:
    """The template question of a query the explorer wrote no question for."""
    return f"In the {db_id} database, what does this query return: {' '.join(sql.split())}"


def tasks_from_exploration(
    sandbox: Callable[[str], Sandbox], trajectory: Trajectory
) -> list[Candidate]:
    """Each distinct SELECT the explorer ran whose result is non-empty becomes a task; the
    result is recomputed in the database's sandbox (`sandbox(db_id)`: a hostile or failing
    query yields no task)."""
    db_id = trajectory.task.data.get("db_id")
    if not isinstance(db_id, str):
        return []
    box = sandbox(db_id)
    out: list[Candidate] = []
    seen: set[str] = set()
    for thought, action, _ in agent_actions(trajectory):
        sql = extract_sql(action).strip().rstrip(";").strip()
        if lead_keyword(sql) not in ("select", "with") or sql in seen:
            continue
        seen.add(sql)
        result = box.run(sql)
        if not result.ok or not result.rows:
            continue
        question = question_of(thought)
        instruction = question or describe(db_id, sql)
        data = {"db_id": db_id, "query": sql, "tables": tables_in_query(sql, box.tables())}
        origin = {"query": sql, "question": "explorer" if question else "template"}
        out.append(Candidate(Task("sql/synth", "sql", "train", instruction, data), origin))
    return out


def task_key(task: Task) -> str:
    """A task is its database and gold query (spacing and case aside)."""
    query = " ".join(str(task.data.get("query", "")).lower().rstrip(";").split())
    return f"{task.data.get('db_id')}|{query}"
