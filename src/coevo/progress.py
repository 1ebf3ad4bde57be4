"""The progress bars of long work (rollouts, training steps, the shop catalog, sciworld's gold
paths): one look everywhere. A bar shows its description, the bar, done / total, the caller's
own fields, the time elapsed and the time left at the rate so far.

    with bar("episodes, mean reward {task.fields[reward]}") as progress:
        job = progress.add_task("explore", total=n, reward="-")
"""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

LOG_WIDTH = 160
"""The width of a bar written to a file rather than a terminal: a log file's 80 columns would
cut the counts off."""


def bar(
    *fields: str,
    enabled: bool = True,
    stderr: bool = False,
    console: Console | None = None,
    transient: bool = False,
) -> Progress:
    """A rich Progress with the columns above; `fields` are text columns in rich's format
    (`"{task.fields[reward]}"`). Off (`enabled=False`): it draws nothing. To stderr, or to
    `console` when one is given; `transient`: gone once done."""
    if console is None:
        console = Console(stderr=stderr)
        if not console.is_terminal:
            console = Console(stderr=stderr, width=max(console.width, LOG_WIDTH))
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        *(TextColumn(field) for field in fields),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=transient,
        disable=not enabled,
    )
