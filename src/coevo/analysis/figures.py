"""The report's figures as PNG files (matplotlib): each function takes plain numbers and a path.

Figures are drawn on `matplotlib.figure.Figure` directly, not through pyplot, so making them
changes no global state (no backend switch, no open windows) in the process that asks.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from coevo.analysis.outcomes import OUTCOMES

DPI = 110
OUTCOME_COLOURS = {"success": "#2e7d32", "hard_negative": "#f9a825", "failure": "#c62828"}
# method -> split -> iteration -> values over seeds
Series = dict[str, dict[str, dict[int, list[float]]]]


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI, bbox_inches="tight")
    return path


def _spread(values: list[float]) -> tuple[float, float]:
    """Mean and standard deviation over seeds (0 for one seed)."""
    mean = statistics.fmean(values)
    return mean, statistics.stdev(values) if len(values) > 1 else 0.0


def floor_at_zero(ax: Any, highest: float, top: float) -> None:
    """Start the y axis at 0 (a change reads at its true size); when every value drawn is 0,
    give it `top` as its top rather than matplotlib's +-0.05 around nothing, so an all-zero
    rate reads as zero on its usual scale."""
    ax.set_ylim(bottom=0)
    if highest <= 0:
        ax.set_ylim(0, top)


def per_iteration(series: Series, ylabel: str, path: Path, *, scale: float = 100.0) -> Path:
    """One panel per split, a line per method: the mean over seeds at each iteration, with a
    band of one standard deviation where there is more than one seed."""
    splits = sorted({split for by_split in series.values() for split in by_split})
    # Constrained layout: each panel's labels get their own room (no overlap with the next).
    fig = Figure(figsize=(4.2 * max(1, len(splits)), 3.4), layout="constrained")
    axes = fig.subplots(1, max(1, len(splits)), squeeze=False)[0]
    for ax, split in zip(axes, splits, strict=False):
        highest = 0.0
        drawn: dict[tuple, list[str]] = {}  # a line's points -> the methods drawn along it
        for method, by_split in series.items():
            points = sorted(by_split.get(split, {}).items())
            if not points:
                continue
            xs = [i for i, _ in points]
            stats = [_spread(values) for _, values in points]
            means = [m * scale for m, _ in stats]
            highest = max(highest, *means)
            drawn.setdefault((tuple(xs), tuple(means)), []).append(method)
            line = ax.plot(xs, means, marker="o", label=method)[0]
            if any(len(values) > 1 for _, values in points):
                low = [(m - s) * scale for m, s in stats]
                high = [(m + s) * scale for m, s in stats]
                ax.fill_between(xs, low, high, color=line.get_color(), alpha=0.2)
        ax.set_title(split)
        # A line drawn over another hides it: say so on the panel.
        hidden = [" = ".join(names) for names in drawn.values() if len(names) > 1]
        if hidden:
            note = "lines coincide: " + "; ".join(hidden)
            ax.text(0.02, 0.02, note, transform=ax.transAxes, fontsize="small", va="bottom")
        floor_at_zero(ax, highest, scale)
        ax.set_xlabel("iteration (0: after SFT)")
        ax.set_ylabel(ylabel)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.3)
    if series:
        axes[0].legend(fontsize="small")
    return _save(fig, path)


def behaviour(series: dict[str, Series], labels: dict[str, str], path: Path) -> Path:
    """A panel per behaviour statistic (`series[stat]`, method -> split -> iteration ->
    values), a line per method and split (the split as the line style)."""
    styles = ["-", "--", ":", "-."]
    fig = Figure(figsize=(4.2 * len(series), 3.4), layout="constrained")
    axes = fig.subplots(1, len(series), squeeze=False)[0]
    for ax, (stat, by_method) in zip(axes, series.items(), strict=True):
        splits = sorted({s for by_split in by_method.values() for s in by_split})
        scale = 1.0 if stat == "mean_steps" else 100.0
        highest = 0.0
        for colour, (method, by_split) in enumerate(by_method.items()):
            for split, points in by_split.items():
                ordered = sorted(points.items())
                ys = [statistics.fmean(v) * scale for _, v in ordered]
                highest = max(highest, *ys)
                ax.plot(
                    [i for i, _ in ordered],
                    ys,
                    marker="o",
                    color=f"C{colour}",
                    linestyle=styles[splits.index(split) % len(styles)],
                    label=f"{method} {split}",
                )
        ax.set_title(labels[stat])
        floor_at_zero(ax, highest, scale)  # rates: 0-100 %; mean steps: 0-1
        ax.set_xlabel("iteration (0: after SFT)")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.3)
    # Below the panels, where it hides no line.
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncols=3)
    return _save(fig, path)


def outcome_bars(rows: Sequence[tuple[str, dict[str, float]]], path: Path) -> Path:
    """Stacked horizontal bars of outcome shares (%), one bar per labelled exploration."""
    fig = Figure(figsize=(8, 0.45 * len(rows) + 1.4))
    ax = fig.subplots()
    labels = [label for label, _ in rows]
    left = [0.0] * len(rows)
    for name in OUTCOMES:
        widths = [shares.get(name, 0.0) * 100 for _, shares in rows]
        ax.barh(labels, widths, left=left, color=OUTCOME_COLOURS[name], label=name)
        for y, (x, w) in enumerate(zip(left, widths, strict=True)):
            if w >= 6:
                ax.text(x + w / 2, y, f"{w:.0f}", ha="center", va="center", color="white")
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.invert_yaxis()  # the first exploration on top
    ax.set_xlim(0, 100)
    ax.set_xlabel("% of the exploration's episodes")
    ax.legend(ncols=3, loc="upper center", bbox_to_anchor=(0.5, -0.25 - 0.4 / len(rows)))
    return _save(fig, path)


def pair_bars(rows: Sequence[tuple[str, dict[str, float]]], path: Path) -> Path:
    """Stacked horizontal bars of pair counts by kind, one bar per labelled DPO stage."""
    kinds = sorted({kind for _, counts in rows for kind in counts})
    fig = Figure(figsize=(8, 0.45 * len(rows) + 1.4))
    ax = fig.subplots()
    labels = [label for label, _ in rows]
    left = [0.0] * len(rows)
    for i, kind in enumerate(kinds):
        widths = [counts.get(kind, 0.0) for _, counts in rows]
        ax.barh(labels, widths, left=left, color=f"C{i}", label=kind)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    for y, total in enumerate(left):
        if total == 0:  # a stage that was skipped: say so rather than leave a blank row
            ax.text(0.5, y, "no pairs", va="center", color="grey")
    ax.invert_yaxis()
    ax.set_xlabel("pairs (mean over seeds)")
    if kinds:
        ax.legend(ncols=3, loc="upper center", bbox_to_anchor=(0.5, -0.25 - 0.4 / len(rows)))
    return _save(fig, path)


def training_curves(
    panels: Sequence[str],
    rows: dict[str, dict[str, dict[str, list[tuple[int, float]]]]],
    path: Path,
) -> Path:
    """A row per method, a panel per curve (`panels`), a line per stage: `rows[method][panel]
    [stage]` is that stage's (step, value) points."""
    fig = Figure(figsize=(3.6 * len(panels), 2.8 * len(rows)))
    grid = fig.subplots(len(rows), len(panels), squeeze=False)
    for axes, (method, by_panel) in zip(grid, rows.items(), strict=True):
        for ax, panel in zip(axes, panels, strict=True):
            lines = by_panel.get(panel, {})
            for stage, points in lines.items():
                # A few points (a held-out loss per epoch) are shown as such, not as a line only.
                marker = "o" if len(points) <= 12 else None
                ax.plot([s for s, _ in points], [v for _, v in points], marker=marker, label=stage)
            ax.set_title(f"{method}: {panel}", fontsize="medium")
            if not lines:  # this method has no such stage
                ax.set_axis_off()
                ax.text(0.5, 0.5, "(no such stage)", ha="center", va="center", color="grey")
                continue
            ax.set_xlabel("optimizer step")
            ax.xaxis.get_major_locator().set_params(integer=True)
            ax.grid(alpha=0.3)
            ax.legend(fontsize="x-small")
    fig.tight_layout()
    return _save(fig, path)
