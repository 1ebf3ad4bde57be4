"""InterCode-SQL-compatible environment on a sandboxed SQLite: `SqlEnv`."""

from coevo.envs.sql.env import SqlEnv

__all__ = ["SqlEnv"]
