"""The real ScienceWorld benchmark (the `scienceworld` package, a Java simulator) as a coevo env.

Modules: `eto` (ETO's published task lists and budgets, the default splits), `protocol` (the
papers' task protocol as pure functions), `simulator` (the guarded JVM),
`manifest` (task lists and gold verdicts, computed once per scienceworld version),
`thoughts` (the expert's one-line thoughts), `env` (`SciWorldEnv`). The package itself is only
imported when an env is built, so `import coevo.envs.sciworld` works without it.
"""

from coevo.envs.sciworld.env import SciWorldEnv

__all__ = ["SciWorldEnv"]
