"""`coevo report`: one static HTML page with figures of a set of runs.

    path = write_report(["runs/demo/sft", "runs/demo/eto"], "runs/demo/report")

The page (`index.html`, figures in `figures/`) opens with one line per method saying what it
did (`verdicts`: its reward after SFT and at its last evaluation, its paired difference from
SFT with tasks up and down, and GRPO's share of task groups without signal), then shows what a
researcher would otherwise put together by hand: reward and success per iteration and split
for each method (mean and spread over seeds), the outcome shares of every exploration (Table
2), training curves, how the agent acted per iteration (format errors, invalid actions,
steps), pair counts by kind, GRPO's signal per stage, and example episodes. Every number comes from the runs' manifests, `metrics.jsonl` files and stores, which
are only read; every text from a run is escaped, so an env's `<`, `&` or `[...]` shows as is.
"""

from __future__ import annotations

import html
import json
import statistics
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

from coevo.analysis import figures
from coevo.analysis.compare import BEHAVIOUR, cell, compare, held_out_average, per_seed_tables
from coevo.analysis.examples import Example, pick_examples
from coevo.analysis.outcomes import OUTCOMES
from coevo.analysis.paired import HEAD, paired_note, paired_rows, paired_title
from coevo.analysis.runs import RunSummary, read_runs, training_logs
from coevo.run.records import GrpoRecord, read

BEHAVIOUR_LABELS = {
    "format_error_rate": "format errors (% of steps)",
    "invalid_action_rate": "invalid actions (% of steps)",
    "mean_steps": "mean steps per episode",
}
# Training curves: panel -> (the key its stages log, the key that marks such a stage).
CURVES = {
    "SFT loss": ("loss", None),
    "SFT held-out loss": ("eval_loss", None),
    "DPO loss": ("dpo_loss", "dpo_loss"),
    "DPO reward margin": ("reward_margin", "dpo_loss"),
    "DPO pair accuracy": ("reward_accuracy", "dpo_loss"),
    "GRPO reward": ("reward_mean", "reward_mean"),
}
TURN_CHARS = 1500  # longer turns (the instructions, a big observation) are cut for reading

STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1150px; margin: 2em auto; padding: 0 1em;
       color: #222; line-height: 1.4; }
h1 { margin-bottom: 0.2em; } h2 { margin-top: 2em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th:first-child, td:first-child, td.text { text-align: left; }
th { background: #f3f3f3; }
img { max-width: 100%; border: 1px solid #eee; }
.note { color: #666; font-size: 0.9em; }
.verdict { margin: 0.2em 0; font-weight: 600; }
details { border: 1px solid #ccc; border-radius: 4px; margin: 0.6em 0; padding: 0.4em 0.8em; }
summary { cursor: pointer; font-weight: 600; }
.turn { margin: 0.5em 0; padding: 0.3em 0.6em; border-left: 4px solid #999; }
.turn.assistant { border-color: #1565c0; background: #f4f8fd; }
.turn.user { border-color: #999; background: #fafafa; }
.role { font-size: 0.8em; color: #555; text-transform: uppercase; }
pre { white-space: pre-wrap; word-break: break-word; margin: 0.2em 0; font-size: 0.85em; }
"""


def default_out(run_dirs: list[Path]) -> Path:
    """Where the report goes without --out: RUN_DIR/report for one run, else `report` in the
    runs' common parent folder (runs/demo/report for the demo's runs)."""
    if len(run_dirs) == 1:
        return Path(run_dirs[0]) / "report"
    parents = {Path(d).resolve().parent for d in run_dirs}
    return (parents.pop() if len(parents) == 1 else Path.cwd()) / "report"


def write_report(run_dirs: list[str | Path], out: str | Path) -> Path:
    """Write `out/index.html` and its figures for the runs among `run_dirs`; its path."""
    out = Path(out)
    runs, skipped = read_runs(list(run_dirs))
    tables = {metric: compare([r.path for r in runs], metric) for metric in ("reward", "success")}
    figure_dir = out / "figures"
    signal = {run.path: grpo_records(run.path) for run in runs}
    sections = [
        _scores(tables, figure_dir),
        _final(tables),
        _outcomes(runs, figure_dir),
        _behaviour(tables["reward"], figure_dir),
        _training(runs, figure_dir),
        _pairs(runs, figure_dir),
        _signal(runs, signal),
        _rounds(runs),
        _examples(runs),
    ]
    out.mkdir(parents=True, exist_ok=True)
    lines = verdicts(tables["reward"], no_signal_by_method(runs, signal))
    page = _page(runs, skipped, lines, sections)
    (out / "index.html").write_text(page, encoding="utf-8")
    return out / "index.html"


# -- the verdicts -------------------------------------------------------------------------


def verdicts(table: dict[str, Any], no_signal: dict[str, list[float]] | None = None) -> list[str]:
    """One line per method of `table` (compare()'s reward table), e.g. `eto: sql test_seen
    8.3 -> 8.3 (+0.0 vs sft, 0 tasks up / 0 down: not shown)`: per column its reward x100
    after SFT (iteration 0) and at its last evaluation, mean over seeds, and its paired
    difference from the baseline where the runs allow one; GRPO methods add their steps'
    share of task groups without signal (`no_signal`: method -> each step's share)."""
    paired = table.get("paired") or {}
    baseline = paired.get("baseline")
    lines = []
    for method, cells in table["rows"].items():
        parts = [
            _verdict_cell(table, paired, method, column)
            for column in table["columns"]
            if cells.get(column)
        ]
        line = f"{method}: " + ("; ".join(parts) if parts else _unevaluated(table, method))
        comparisons = (paired.get("rows") or {}).get(f"{method} - {baseline}", {})
        if comparisons and all(d["up"] == d["down"] == 0 for d in comparisons.values()):
            line += f"; the same reward as {baseline} on every task"
        shares = (no_signal or {}).get(method)
        if shares:
            skipped = sum(share >= 1.0 for share in shares)
            line += (
                f"; GRPO: {statistics.fmean(shares):.0%} of task groups without signal, "
                f"{skipped} of {len(shares)} steps skipped for want of any"
            )
        lines.append(line)
    return lines


def _verdict_cell(table: dict[str, Any], paired: dict[str, Any], method: str, column: str) -> str:
    end = statistics.fmean(table["rows"][method][column]) * 100
    its = table.get("iterations", {}).get(method, {}).get(column, {})
    start = its.get("0")
    # The last evaluation is iteration 0 for SFT itself: one number, no arrow.
    shown = f"{end:.1f}"
    if start and max(map(int, its)) > 0:
        shown = f"{statistics.fmean(start) * 100:.1f} -> {end:.1f}"
    baseline = paired.get("baseline")
    d = (paired.get("rows") or {}).get(f"{method} - {baseline}", {}).get(column)
    if method == baseline:
        return f"{column} {shown} (the baseline)"
    if d is None:
        return f"{column} {shown}"
    return (
        f"{column} {shown} ({d['mean'] * 100:+.1f} vs {baseline}, {d['up']} tasks up / "
        f"{d['down']} down: {d['verdict']})"
    )


def _unevaluated(table: dict[str, Any], method: str) -> str:
    """A method without an evaluation of its own yet: its start's scores, where they are."""
    its = table.get("iterations", {}).get(method, {})
    start = [f"{c} {statistics.fmean(v['0']) * 100:.1f}" for c, v in its.items() if v.get("0")]
    if not start:
        return "no finished evaluation yet"
    return f"no evaluation after its training yet (after SFT: {', '.join(start)})"


def grpo_records(run_dir: str | Path) -> list[tuple[str, GrpoRecord]]:
    """(stage, record) of each finished GRPO stage of a run, in step order."""
    found = []
    for path in Path(run_dir).glob("stages/grpo-*/manifest.json"):
        try:
            record = read(json.loads(path.read_text()).get("outputs", {}))
        except (ValueError, UnicodeDecodeError, AttributeError, TypeError):
            continue  # a damaged manifest is an unfinished stage
        if isinstance(record, GrpoRecord):
            found.append((path.parent.name, record))
    return sorted(found, key=lambda found: found[1].first_step)


def no_signal_by_method(
    runs: list[RunSummary], signal: dict[str, list[tuple[str, GrpoRecord]]]
) -> dict[str, list[float]]:
    """Method -> every GRPO step's share of task groups without signal, over its runs."""
    out: dict[str, list[float]] = defaultdict(list)
    for run in runs:
        for _, record in signal.get(run.path, []):
            out[run.method] += record.no_signal
    return dict(out)


# -- the page ---------------------------------------------------------------------------


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _page(runs: list[RunSummary], skipped: list[str], lines: list[str], sections: list[str]) -> str:
    rows = [
        [r.method, r.env, "-" if r.seed is None else r.seed, r.final_iteration, r.path]
        for r in runs
    ]
    notes = "".join(f'<p class="note">{_e(n)}</p>' for n in skipped)
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>coevo report</title><style>{STYLE}</style></head><body>"
        "<h1>coevo report</h1>"
        + "".join(f'<p class="verdict">{_e(line)}</p>' for line in lines)
        + f'<p class="note">{len(runs)} run(s), written {_e(time.strftime("%Y-%m-%d %H:%M"))}. '
        "Scores are x100; cells are the mean over seeds ± their standard deviation, "
        "n = the episodes behind the cell.</p>"
        + _table(["method", "env", "seed", "last eval", "run directory"], rows, id_="runs")
        + notes
        + "".join(sections)
        + "</body></html>\n"
    )


def _table(head: list[str], rows: list[list[Any]], *, id_: str = "") -> str:
    ident = f' id="{_e(id_)}"' if id_ else ""
    out = [f"<table{ident}><tr>" + "".join(f"<th>{_e(h)}</th>" for h in head) + "</tr>"]
    for row in rows:
        out.append("<tr>" + "".join(_td(c) for c in row) + "</tr>")
    return "".join(out) + "</table>"


def _td(value: Any) -> str:
    if isinstance(value, tuple):  # (text, {attribute: value}): a cell a test can find
        text, attributes = value
        attrs = "".join(f' data-{k}="{_e(v)}"' for k, v in attributes.items())
        return f"<td{attrs}>{_e(text)}</td>"
    if isinstance(value, str) and not _numeric(value):
        return f'<td class="text">{_e(value)}</td>'
    return f"<td>{_e(value)}</td>"


def _numeric(text: str) -> bool:
    head = text.split(" ", 1)[0]
    return head == "-" or head.replace(".", "", 1).lstrip("+-").isdigit()


def _figure(path: Path, alt: str) -> str:
    return f'<p><img src="figures/{_e(path.name)}" alt="{_e(alt)}"></p>'


def _section(title: str, body: str) -> str:
    return f"<h2>{_e(title)}</h2>{body}"


def _table_section(title: str, head: list[str], rows: list[list[Any]], id_: str, note: str) -> str:
    """A section of one table and its note; nothing at all when there are no rows."""
    if not rows:
        return ""
    return _section(title, _table(head, rows, id_=id_) + f'<p class="note">{note}</p>')


# -- sections ---------------------------------------------------------------------------


def _series(by_column: dict[str, dict[str, dict[str, Any]]]) -> figures.Series:
    """compare()'s method -> column -> "iteration" -> x, with int iterations."""
    return {
        method: {col: {int(i): v for i, v in its.items()} for col, its in cols.items()}
        for method, cols in by_column.items()
    }


def _scores(tables: dict[str, dict[str, Any]], figure_dir: Path) -> str:
    body = []
    for metric, tab in tables.items():
        series = _series(tab["iterations"])
        if not series:
            continue
        label = "mean final reward x100" if metric == "reward" else "success rate (%)"
        path = figures.per_iteration(series, label, figure_dir / f"{metric}_per_iteration.png")
        body.append(
            f"<h3>{_e(metric.capitalize())}</h3>" + _figure(path, f"{metric} per iteration")
        )
        last = max(i for cols in series.values() for its in cols.values() for i in its)
        rows = []
        for method, cols in tab["iterations"].items():
            counts = tab["iteration_episodes"].get(method, {})
            for column, its in cols.items():
                cells = []
                for i in range(last + 1):
                    where = {"metric": metric, "method": method, "split": column, "iteration": i}
                    n = counts.get(column, {}).get(str(i), 0)
                    cells.append((cell(its.get(str(i), []), n), where))
                rows.append([method, column, *cells])
        head = ["method", "split", *(str(i) for i in range(last + 1))]
        body.append(_table(head, rows, id_=f"{metric}-per-iteration"))
    if not body:
        return _section("Reward and success per iteration", "<p>No finished evaluation.</p>")
    return _section("Reward and success per iteration (0 = after SFT)", "".join(body))


def _final(tables: dict[str, dict[str, Any]]) -> str:
    body = []
    for metric, tab in tables.items():
        columns = tab["columns"]
        rows = []
        for method, cells in tab["rows"].items():
            average = held_out_average(cells, columns)
            counts = tab["episodes"].get(method, {})
            rows.append(
                [method, *(cell(cells.get(c, []), counts.get(c, 0)) for c in columns), average]
            )
        body.append(
            f"<h3>{_e(metric.capitalize())}</h3>"
            + _table(["method", *columns, "average (test splits)"], rows, id_=f"{metric}-final")
        )
        paired = tab.get("paired")
        if paired and paired_rows(paired):
            body.append(
                f"<p>{_e(paired_title(paired))}</p>"
                + _table(HEAD, paired_rows(paired), id_=f"{metric}-paired")
                + f'<p class="note">{_e(paired_note(paired))}</p>'
            )
        for i, (title, head, rows) in enumerate(per_seed_tables(tab)):
            body.append(f"<p>{_e(title)}</p>" + _table(head, rows, id_=f"{metric}-per-seed-{i}"))
    return _section("After the last iteration (the paper's Table 3)", "".join(body))


def _outcomes(runs: list[RunSummary], figure_dir: Path) -> str:
    # (method, agent, iteration) -> shares and episodes of each seed's exploration
    grouped: dict[tuple[str, str, int], list[tuple[dict[str, float], int]]] = defaultdict(list)
    for run in runs:
        for e in run.explorations:
            grouped[(run.method, e.agent, e.iteration)].append((e.shares, e.episodes))
    if not grouped:
        return _section("Exploration outcomes (Table 2)", "<p>No exploration in these runs.</p>")
    bars, rows = [], []
    for (method, agent, iteration), seen in grouped.items():
        shares = {o: statistics.fmean(s.get(o, 0.0) for s, _ in seen) for o in OUTCOMES}
        label = f"{method} / {agent}, iteration {iteration}"
        bars.append((label, shares))
        episodes = sum(n for _, n in seen)
        rows.append([label, *(f"{shares[o] * 100:.1f}" for o in OUTCOMES), episodes or "-"])
    path = figures.outcome_bars(bars, figure_dir / "outcomes.png")
    threshold = sorted({r.threshold for r in runs})
    note = (
        f'<p class="note">success: reward 1; hard negative: {" / ".join(map(str, threshold))} '
        "&le; reward &lt; 1; failure: below. Mean over seeds.</p>"
    )
    head = ["exploration", *(f"{o.replace('_', ' ')} %" for o in OUTCOMES), "episodes"]
    body = _figure(path, "outcome shares") + note + _table(head, rows, id_="outcomes")
    return _section("Exploration outcomes (Table 2)", body)


def _behaviour(tab: dict[str, Any], figure_dir: Path) -> str:
    behaviour = tab["behaviour"]
    if not any(its for cols in behaviour.values() for its in cols.values()):
        return _section("How the agent acted", "<p>No evaluation recorded these numbers.</p>")
    series: dict[str, figures.Series] = {stat: {} for stat in BEHAVIOUR}
    rows = []
    for method, cols in behaviour.items():
        for column, its in cols.items():
            for i, stats in sorted(its.items(), key=lambda kv: int(kv[0])):
                for stat in BEHAVIOUR:
                    if stat in stats:
                        by_split = series[stat].setdefault(method, {}).setdefault(column, {})
                        by_split[int(i)] = [stats[stat]]
                rows.append(
                    [
                        method,
                        column,
                        i,
                        *(
                            "-"
                            if stat not in stats
                            else f"{stats[stat]:.2f}"
                            if stat == "mean_steps"
                            else f"{stats[stat] * 100:.1f}"
                            for stat in BEHAVIOUR
                        ),
                    ]
                )
    path = figures.behaviour(series, BEHAVIOUR_LABELS, figure_dir / "behaviour.png")
    head = ["method", "split", "iteration", *BEHAVIOUR_LABELS.values()]
    body = (
        _figure(path, "format errors, invalid actions and steps per iteration")
        + '<p class="note">Greedy evaluation episodes; mean over seeds.</p>'
        + _table(head, rows, id_="behaviour")
    )
    return _section("How the agent acted per iteration", body)


def _training(runs: list[RunSummary], figure_dir: Path) -> str:
    # method -> panel -> line label -> (step, value) points
    rows: dict[str, dict[str, dict[str, list[tuple[int, float]]]]] = {}
    seeds = defaultdict(set)
    for run in runs:
        seeds[run.method].add(run.seed)
    for run in runs:
        by_panel = rows.setdefault(run.method, {})
        for stage, records in training_logs(run.path).items():
            label = stage if len(seeds[run.method]) == 1 else f"{stage} (seed {run.seed})"
            trainer = _trainer(records)
            for panel, (key, marker) in CURVES.items():
                if trainer != (marker or "sft"):
                    continue
                points = [(int(r["step"]), float(r[key])) for r in records if _has(r, key)]
                if points:
                    by_panel.setdefault(panel, {})[label] = points
    panels = [p for p in CURVES if any(p in by_panel for by_panel in rows.values())]
    if not panels:
        return _section("Training curves", "<p>No training logs (metrics.jsonl) found.</p>")
    rows = {method: by_panel for method, by_panel in rows.items() if by_panel}
    path = figures.training_curves(panels, rows, figure_dir / "training.png")
    note = (
        '<p class="note">From each training stage\'s metrics.jsonl. SFT loss: NLL per agent '
        "token; SFT held-out loss: the same on demonstrations of the validation slice, never "
        "trained on (step 0: before training); DPO pair accuracy: share of pairs whose chosen side the policy prefers more "
        "than the reference does.</p>"
    )
    return _section("Training curves", _figure(path, "training curves") + note)


def _trainer(records: list[dict[str, Any]]) -> str:
    """Which trainer wrote a log: GRPO logs its rollouts' reward, DPO its own loss."""
    keys = set().union(*records)
    if "reward_mean" in keys:
        return "reward_mean"
    if "dpo_loss" in keys:
        return "dpo_loss"
    return "sft"


def _has(record: dict[str, Any], key: str) -> bool:
    return "step" in record and isinstance(record.get(key), int | float)


def _pairs(runs: list[RunSummary], figure_dir: Path) -> str:
    grouped: dict[tuple[str, str, int], list[dict[str, int]]] = defaultdict(list)
    skipped: dict[tuple[str, str, int], int] = defaultdict(int)
    for run in runs:
        for p in run.preferences:
            grouped[(run.method, p.agent, p.iteration)].append(p.pair_kinds)
            skipped[(run.method, p.agent, p.iteration)] += p.skipped
    if not grouped:
        return _section("Preference pairs by kind", "<p>No preference stage in these runs.</p>")
    kinds = sorted({k for seen in grouped.values() for kinds in seen for k in kinds})
    bars, rows = [], []
    for key, seen in grouped.items():
        method, agent, iteration = key
        counts = {k: statistics.fmean(s.get(k, 0) for s in seen) for k in kinds}
        label = f"{method} / {agent}, iteration {iteration}"
        bars.append((label, counts))
        note = f"skipped in {skipped[key]} of {len(seen)}: no pairs" if skipped[key] else ""
        total = sum(counts.values())
        rows.append([label, *(f"{counts[k]:g}" for k in kinds), f"{total:g}", note])
    path = figures.pair_bars(bars, figure_dir / "pairs.png")
    head = ["DPO stage", *kinds, "total", "note"]
    return _section(
        "Preference pairs by kind", _figure(path, "pair counts") + _table(head, rows, id_="pairs")
    )


def _signal(runs: list[RunSummary], signal: dict[str, list[tuple[str, GrpoRecord]]]) -> str:
    """GRPO's stages: how many of their task groups had no signal (every sample of a task
    scored alike: advantage 0, nothing learned from them), and the steps where none had any
    (their updates skipped). Nothing at all for runs without GRPO."""
    rows = []
    for run in runs:
        for stage, r in signal.get(run.path, []):
            if not r.no_signal:
                continue
            last = r.first_step + len(r.no_signal) - 1
            skipped = sum(share >= 1.0 for share in r.no_signal)
            rows.append([
                run.method, "-" if run.seed is None else run.seed, stage,
                f"{r.first_step}-{last}", f"{statistics.fmean(r.no_signal) * 100:.0f}",
                f"{skipped} of {len(r.no_signal)}",
                " ".join(f"{share * 100:.0f}" for share in r.no_signal),
            ])  # fmt: skip
    head = [
        "method", "seed", "stage", "steps", "groups without signal (%)", "steps skipped",
        "per step (%)",
    ]  # fmt: skip
    note = (
        "A task group is one task's samples in a step; it has no signal when they all scored "
        "alike (every advantage 0). A step whose groups all lack it skips its update."
    )
    return _table_section("GRPO signal", head, rows, "grpo-signal", note)


def _rounds(runs: list[RunSummary]) -> str:
    """agent_data's rounds: signals of each kind, explorations, candidates, verified tasks
    and rejections by reason (nothing at all for runs of other methods)."""
    rows = []
    for run in runs:
        for r in run.rounds:
            rejected = ", ".join(f"{k} {v}" for k, v in sorted(r.rejected.items())) or "-"
            steps = f"{r.steps[0]}-{r.steps[-1]}" if r.steps else "-"
            signals = [r.signals.get(k, 0) for k in ("forgetting", "boundary", "rare")]
            share = f"{r.batch_share:.0%} -> {r.next_batch_share:.0%}"
            rows.append([
                run.method, run.seed if run.seed is not None else "-", r.round, steps, r.explorer,
                *signals, r.explorations, r.candidates, r.verified, rejected, r.train_tasks, share,
            ])  # fmt: skip
    head = [
        "method", "seed", "round", "steps", "explorer", "forgetting", "boundary", "rare",
        "explorations", "candidates", "verified", "rejected", "synthesized in train",
        "synthesized share of batches (this round -> next)",
    ]  # fmt: skip
    note = (
        "Each round: the weakness signals of its GRPO steps, the exploration episodes they "
        "steered, the candidate tasks synthesized from them, and those the env verified (every "
        "signal is listed in stages/evolve-&lt;i&gt;/signals.jsonl)."
    )
    return _table_section("Agent-data rounds", head, rows, "rounds", note)


def _examples(runs: list[RunSummary]) -> str:
    body = []
    shown: set[str] = set()
    for run in sorted(runs, key=lambda r: (r.method, r.seed if r.seed is not None else 0)):
        if run.method in shown:  # one run (the lowest seed) per method
            continue
        shown.add(run.method)
        examples = pick_examples(run.path, run.threshold)
        body.append(f"<h3>{_e(run.method)}</h3>")
        if not examples:
            body.append('<p class="note">No played episodes stored in this run.</p>')
        for i, example in enumerate(examples):
            body.append(_episode(example, open_=i == 0))
    return _section("Example episodes", "".join(body))


def _episode(example: Example, *, open_: bool) -> str:
    t = example.trajectory
    end = "terminated" if t.terminated else "truncated" if t.truncated else "stopped"
    summary = (
        f"{example.label}: task {t.task.id} ({t.task.split}), agent {t.agent}, reward "
        f"{t.reward:.3f} in {t.steps} steps, {end} (stage {example.stage})"
    )
    turns = []
    for turn in t.turns:
        text = turn.text
        if len(text) > TURN_CHARS:
            text = text[:TURN_CHARS] + f"\n… ({len(turn.text) - TURN_CHARS} more characters)"
        turns.append(
            f'<div class="turn {_e(turn.role)}"><div class="role">{_e(turn.role)}</div>'
            f"<pre>{_e(text)}</pre></div>"
        )
    attrs = f' data-kind="{_e(example.kind)}" data-reward="{t.reward!r}"'
    return (
        f"<details{' open' if open_ else ''}{attrs}><summary>{_e(summary)}</summary>"
        + "".join(turns)
        + "</details>"
    )
