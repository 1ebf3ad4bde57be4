"""`coevo run` that stops itself (SIGSTOP) at a chosen call, for the kill tests.

    python -m tests.methods.stopping coevo.train.loop:CheckpointDir.log step=3 before \
        run RECIPE --out DIR

A test that polls the store and kills the run once rows appear races the run on a busy
machine: the poller may be starved until the run has finished the stage it was to cut short.
A run that stops itself at the chosen moment waits there, however late the poller looks.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
from typing import Any


def stop_at(target: str, condition: str, when: str) -> None:
    """Make `module:attr[.attr]` stop this process before or `when`=after a call that matches
    `condition` (key=value): a keyword argument of that name and value, or a mapping argument
    holding them (a trainer's log record: `CheckpointDir.log(record)`)."""
    module, path = target.split(":")
    owner: Any = importlib.import_module(module)
    *parents, name = path.split(".")
    for parent in parents:
        owner = getattr(owner, parent)
    original = getattr(owner, name)
    key, value = condition.split("=", 1)

    def stopping(*args: Any, **kwargs: Any) -> Any:
        hit = str(kwargs.get(key)) == value or any(
            isinstance(a, dict) and str(a.get(key)) == value for a in args
        )
        if hit and when == "before":
            os.kill(os.getpid(), signal.SIGSTOP)
        out = original(*args, **kwargs)
        if hit and when == "after":
            os.kill(os.getpid(), signal.SIGSTOP)
        return out

    setattr(owner, name, stopping)


if __name__ == "__main__":
    target, condition, when, *command = sys.argv[1:]
    stop_at(target, condition, when)
    from coevo.cli import app

    sys.argv = ["coevo", *command]
    app()
