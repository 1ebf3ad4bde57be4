"""A verdict on each of the paper's claims from the runs at hand: shown, not shown, or cannot be
tested here, with the smallest difference the runs could have detected.

The claims, and what each asks of the runs (`paired` differences on the same tasks and seeds):
- failure-agent > ETO > SFT: per env and test split, failure_agent - eto and eto - sft both a
  gain (`stats.verdict`: the sign-flip test over tasks and the t interval over seeds agree).
- larger gain on unseen tasks: failure_agent - sft larger on test_unseen than on test_seen.
  The two splits hold different tasks, so the task-level test is `stats.split_test` (labels
  shuffled within each seed); the seed-level one a t interval over the per-seed gaps.
- Table 2's hard-negative shift: after a DPO (iteration 2 on), the failure agent's
  explorations hold a larger share of hard negatives than ETO's agent's. The runs keep shares
  and episode counts: the episode level is Fisher's exact test of the two agents' hard
  negatives pooled over seeds, the seed level the t interval over the per-seed gaps. Both
  agents explore the same train tasks, so where every seed's two explorations kept their
  rewards per task (`archive.stage_rewards`; archives from 2026-11-27 on) the episode level is
  the sign-flip test over tasks of the two agents' hard-negative shares instead: pairing by
  task takes the tasks' own difficulty out of the comparison. Where only some seeds kept
  them, that test is shown for those seeds beside Fisher's, which decides.
- agent_data >= grpo + 5: agent_data - grpo a gain, of at least 5 points; a row for each of
  the explorer variants archived too (`EXPLORERS`: agent_data_guided, agent_data_random).
- signal feedback > random exploration: agent_data_guided - agent_data_random a gain (where
  both are archived).
- verification helps: agent_data_guided - agent_data_unverified a gain (where both are
  archived; CoEvolve: BFCL 63.0 with verification, 58.5 without).

Verdicts: shown when the test says gain; cannot be tested here when the runs are missing, or
the task level agrees but too few seeds allow no seed-level test; else not shown.

Detectable: `stats.detectable` at the runs' tasks per seed and seeds, task_sd the claim's
paired differences' spread within seeds, seed_sd the null cells' spread of per-seed SFT means
on that split (`null`); with normal quantiles (the issue's power figures), and with t at
df = seeds - 1 (the verdict's own seed-level test; 3+ seeds). An unknown seed spread (one SFT
seed) counts as 0, which makes the figure a lower bound.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

import torch

from coevo.analysis import stats
from coevo.analysis.archive import task_rewards
from coevo.analysis.outcomes import outcome
from coevo.analysis.paired import label, p_cell, paired_diffs, tested
from coevo.analysis.runs import Exploration, RunSummary

SHOWN, NOT_SHOWN, UNTESTABLE = "shown", "not shown", "cannot be tested here"
TEST_SPLITS = ("test_seen", "test_unseen")
MARGIN = 0.05
"""agent_data's claimed lead over GRPO (5 points)."""
EXPLORERS = ("agent_data_guided", "agent_data_random")
"""agent_data with the explorers that need no LLM (benchmarks/learning.py's rows)."""
VERIFIED = ("agent_data_guided", "agent_data_unverified")
"""The guided row with and without verifying its synthesized tasks."""
HARD_NEGATIVE = "hard_negative"


def claims(
    runs: list[RunSummary], null: dict[str, Any], branches: Sequence[RunSummary] = ()
) -> list[dict[str, Any]]:
    """One row per claim and env (and test split, where the claim is per split): {"claim",
    "where", "evidence", "verdict", "why", "detectable" (normal), "detectable_t" (None under 3
    seeds)}, from `runs` and their `null.null_cells` table; Table 2's also from `branches`,
    runs that went on from some of `runs` to explore once more (their scores are not theirs)."""
    _, diffs, _ = paired_diffs(runs)
    envs = list(dict.fromkeys(r.env for r in runs))
    spread = null["spread"]
    rows: list[dict[str, Any]] = []
    for env in envs:
        for split in TEST_SPLITS:
            rows.append(order_claim(diffs, spread, f"{env} {split}"))
    present = {r.method for r in runs}
    if {"failure_agent", "rft"} <= present:  # the paper's method above this baseline too
        for env in envs:
            for split in TEST_SPLITS:
                rows.append(rft_claim(diffs, spread, f"{env} {split}"))
    for env in envs:
        rows.append(unseen_claim(diffs, spread, env))
    for env in envs:
        rows.append(table2_claim([r for r in [*runs, *branches] if r.env == env], env))
    for method in ("agent_data", *(m for m in EXPLORERS if m in present)):
        for env in envs:
            for split in TEST_SPLITS:
                rows.append(margin_claim(diffs, spread, f"{env} {split}", method))
    if all(m in present for m in EXPLORERS):
        for env in envs:
            for split in TEST_SPLITS:
                rows.append(feedback_claim(diffs, spread, f"{env} {split}"))
    if all(m in present for m in VERIFIED):
        for env in envs:
            for split in TEST_SPLITS:
                rows.append(verification_claim(diffs, spread, f"{env} {split}"))
    return rows


def seed_sd(spread: dict[str, Any], *columns: str) -> float | None:
    """The null cells' sd of per-seed SFT means on `columns` (the root of the sum of their
    variances: independent splits' spreads add), or None where a column's is unknown."""
    sds = [spread.get(column, {}).get("sd") for column in columns]
    return None if None in sds else math.hypot(*sds)


def power(task_sd: float, seed_spread: float | None, tasks: float, seeds: int) -> dict[str, Any]:
    """ "detectable" (normal quantiles) and "detectable_t" (t at df = seeds - 1; None under
    MIN_SEEDS seeds) at `tasks` per seed and `seeds`; an unknown seed spread counts as 0,
    which makes them lower bounds ("lower_bound"). Both None where no spread is known at
    all (every paired difference 0, no seed spread: bfcl's all-zero rows): nothing there
    says how large a difference the noise allows, and 0 would read as "any"."""
    spread = seed_spread or 0.0
    if task_sd == 0 and spread == 0:
        return {"detectable": None, "detectable_t": None, "lower_bound": seed_spread is None}
    return {
        "detectable": stats.detectable(task_sd, spread, tasks, seeds),
        "detectable_t": stats.detectable(task_sd, spread, tasks, seeds, df=seeds - 1)
        if seeds >= stats.MIN_SEEDS
        else None,
        "lower_bound": seed_spread is None,
    }


def grid(seeds: Sequence[torch.Tensor]) -> tuple[float, int]:
    """(tasks per seed, seeds) of one comparison's differences (one tensor per seed)."""
    return statistics.fmean(len(s) for s in seeds), len(seeds)


def decide(verdict: str, p: float, seeds: int, level: str = "task") -> tuple[str, str]:
    """A claim's verdict and why, from the `stats.verdict` of its test, the p of its first
    `level` (tasks; Table 2's episodes where its seeds are not all paired by task) and its number
    of seeds."""
    few = "" if seeds >= stats.MIN_SEEDS else f"; {few_seeds(seeds)}"
    if verdict == stats.GAIN:
        return SHOWN, "a gain at both levels"
    if verdict == stats.TASKS_UP:
        return UNTESTABLE, f"up at {level} level (p {p:.3f}){few}"
    if verdict in (stats.LOSS, stats.TASKS_DOWN):
        return NOT_SHOWN, f"the other way: {verdict.replace('task', level)}"
    if p >= stats.ALPHA:
        return NOT_SHOWN, f"{level} level p {p:.3f}{few}"
    return NOT_SHOWN, "the seed-level interval reaches 0"


def few_seeds(seeds: int) -> str:
    return f"{seeds} seed{'s' * (seeds != 1)}, no seed-level test ({stats.MIN_SEEDS} needed)"


def summary(name: str, d: dict[str, Any]) -> str:
    """`failure_agent - eto +2.7 (8 / 6 / 86, p 0.328, 2 seeds: not shown)`."""
    return (
        f"{name} {d['mean'] * 100:+.1f} ({d['up']} / {d['down']} / {d['same']}, p {p_cell(d['p'], exact=True)}, "
        f"{d['seeds']} seed{'s' * (d['seeds'] != 1)}: {d['verdict']})"
    )


def missing(claim: str, where: str, why: str) -> dict[str, Any]:
    return {
        "claim": claim,
        "where": where,
        "evidence": "-",
        "verdict": UNTESTABLE,
        "why": why,
        "detectable": None,
        "detectable_t": None,
        "lower_bound": False,
    }


def order_claim(diffs: dict[str, Any], spread: dict[str, Any], column: str) -> dict[str, Any]:
    claim = "failure-agent > ETO > SFT"
    names = [label("failure_agent", "eto"), label("eto", "sft")]
    found = [diffs.get(name, {}).get(column) for name in names]
    if any(f is None for f in found):
        return missing(claim, column, "no archived pair of failure_agent, eto and sft runs")
    results = [tested(seeds) for seeds in found]
    verdicts = [decide(r["verdict"], r["p"], r["seeds"]) for r in results]
    if all(v == SHOWN for v, _ in verdicts):
        verdict, why = SHOWN, "both contrasts gains at both levels"
    else:
        # Not shown as soon as one contrast is not; else one at least lacks seeds.
        verdict = NOT_SHOWN if any(v == NOT_SHOWN for v, _ in verdicts) else UNTESTABLE
        why = "; ".join(
            f"{n}: {w.split('; ')[0]}"
            for n, (v, w) in zip(names, verdicts, strict=True)
            if v == verdict
        )
        seeds = min(r["seeds"] for r in results)
        if seeds < stats.MIN_SEEDS:
            why += f"; {few_seeds(seeds)}"
    powers = [power(stats.pooled_sd(s), seed_sd(spread, column), *grid(s)) for s in found]
    worst = [p["detectable"] for p in powers]
    worst_t = [p["detectable_t"] for p in powers]
    return {
        "claim": claim,
        "where": column,
        "evidence": "; ".join(summary(n, r) for n, r in zip(names, results, strict=True)),
        "verdict": verdict,
        "why": why,
        # The claim needs both contrasts: the grid detects it only where it detects both.
        "detectable": None if None in worst else max(worst),
        "detectable_t": None if None in worst_t else max(worst_t),
        "lower_bound": powers[0]["lower_bound"],
    }


def unseen_claim(diffs: dict[str, Any], spread: dict[str, Any], env: str) -> dict[str, Any]:
    claim = "larger gain on unseen tasks (failure_agent - sft)"
    gains = diffs.get(label("failure_agent", "sft"), {})
    seen, unseen = gains.get(f"{env} test_seen"), gains.get(f"{env} test_unseen")
    if seen is None or unseen is None or len(seen) != len(unseen):
        return missing(claim, env, "no archived failure_agent and sft runs on both test splits")
    gaps = [float(u.mean() - s.mean()) for u, s in zip(unseen, seen, strict=True)]
    gap = statistics.fmean(gaps)
    p = stats.split_test(unseen, seen)
    interval = stats.seed_interval(gaps)
    verdict, why = decide(stats.verdict(gap, p, interval), p, len(gaps))
    shown_p = "< 0.001 (MC)" if p < 0.001 else f"{p:.3f} (MC)"
    seeds_cell = (
        "no seed-level interval"
        if interval is None
        else f"seeds [{interval[0] * 100:+.1f}, {interval[1] * 100:+.1f}]"
    )
    evidence = (
        f"unseen gain {statistics.fmean(float(u.mean()) for u in unseen) * 100:+.1f} minus seen "
        f"gain {statistics.fmean(float(s.mean()) for s in seen) * 100:+.1f} = {gap * 100:+.1f} "
        f"(tasks shuffled between the splits within seeds: p {shown_p}; {seeds_cell}; "
        f"{len(gaps)} seed{'s' * (len(gaps) != 1)})"
    )
    # A gap of two independent task sets: their variances add, tasks and seeds alike.
    task_sd = math.hypot(stats.pooled_sd(unseen), stats.pooled_sd(seen))
    seed_spread = seed_sd(spread, f"{env} test_unseen", f"{env} test_seen")
    return {
        "claim": claim,
        "where": env,
        "evidence": evidence,
        "verdict": verdict,
        "why": why,
        **power(task_sd, seed_spread, *grid(unseen)),
    }


def table2_claim(runs: list[RunSummary], env: str) -> dict[str, Any]:
    claim = "Table 2: more hard negatives in the failure agent's explorations (after DPO)"
    # seed -> iteration -> (share, episodes) of each side
    failure = _explorations(runs, "failure_agent", "failure")
    eto = _explorations(runs, "eto", "target")
    first = sorted(
        (seed, _share(its[1]), _share(eto[seed][1]))
        for seed, its in failure.items()
        if 1 in its and 1 in eto.get(seed, {})
    )
    context = "; ".join(
        f"s{seed} iteration 1 (before any DPO): failure agent {f[0] * 100:.1f}%, ETO's agent "
        f"{e[0] * 100:.1f}%"
        for seed, f, e in first
    )
    after = []  # (seed, iteration, the failure agent's exploration, ETO's agent's)
    for seed, its in sorted(failure.items()):
        common = [i for i in its if i >= 2 and i in eto.get(seed, {})]
        if common:
            i = max(common)
            after.append((seed, i, its[i], eto[seed][i]))
    row = missing(claim, env, "no archived exploration after a DPO (iteration 2 on) of both")
    row["evidence"] = context or "-"
    share = statistics.fmean(x[0] for _, f, e in first for x in (f, e)) if first else 0.0
    if 0 < share < 1:  # a share of 0 (or 1) has no spread to size a test by
        # Per pair of episodes, a difference of two independent hard-negative indicators.
        episodes = statistics.fmean(x[1] for _, f, e in first for x in (f, e))
        eto_shares = [e[0] for _, _, e in first]
        spread = statistics.stdev(eto_shares) if len(eto_shares) > 1 else None
        seeds = max(len(after), len(first))
        row.update(power(math.sqrt(2 * share * (1 - share)), spread, episodes, seeds))
    if not after:
        return row
    shares = [(_share(f), _share(e)) for _, _, f, e in after]
    gaps = [f[0] - e[0] for f, e in shares]
    interval = stats.seed_interval(gaps)
    # Pooled over seeds: hard-negative episodes of each agent, from its shares and counts.
    sides = ([f for f, _ in shares], [e for _, e in shares])
    hard = [sum(round(share * n) for share, n in side) for side in sides]
    episodes = [sum(n for _, n in side) for side in sides]
    p = stats.fisher_exact(hard[0], episodes[0], hard[1], episodes[1])
    level = "episode"
    paired = {seed: d for seed, _, f, e in after if (d := _task_gaps(f, e)) is not None}
    evidence = [
        f"s{seed} iteration {i} (after DPO): failure agent {f[0] * 100:.1f}%, ETO's agent "
        f"{e[0] * 100:.1f}% ({(f[0] - e[0]) * 100:+.1f})"
        for (seed, i, _, _), (f, e) in zip(after, shares, strict=True)
    ]
    evidence.append(
        f"pooled {hard[0]} / {episodes[0]} against {hard[1]} / {episodes[1]} episodes, "
        f"Fisher p {p_cell(p, exact=True)}"
    )
    if paired:
        pooled = torch.cat(list(paired.values()))
        up, down, _ = stats.counts(pooled)
        test = stats.sign_flip_test(pooled)
        evidence.append(
            f"paired by task (s{', s'.join(map(str, paired))}: {len(pooled)} tasks), more in "
            f"the failure agent's on {up}, in ETO's agent's on {down}, sign-flip p {p_cell(test.p, test.exact)}"
        )
        if len(paired) == len(after):  # every seed paired: the better test decides
            p, level = test.p, "task"
    if interval is not None:
        evidence.append(f"seeds [{interval[0] * 100:+.1f}, {interval[1] * 100:+.1f}]")
    row["evidence"] = "; ".join(([context] if context else []) + evidence)
    mean = statistics.fmean(gaps)
    row["verdict"], row["why"] = decide(stats.verdict(mean, p, interval), p, len(gaps), level=level)
    return row


Found = tuple[RunSummary, Exploration]
"""An agent's exploration and the run (or archive) that holds it."""


def _explorations(runs: list[RunSummary], method: str, agent: str) -> dict[int, dict[int, Found]]:
    """seed -> iteration -> `agent`'s exploration in `method`'s runs (a later run's wins)."""
    found: dict[int, dict[int, Found]] = {}
    for run in runs:
        if run.method != method or run.seed is None:
            continue
        for e in run.explorations:
            if e.agent == agent:
                found.setdefault(int(run.seed), {})[e.iteration] = (run, e)
    return found


def _share(found: Found) -> tuple[float, int]:
    """(hard-negative share, episodes) of an exploration."""
    return found[1].shares.get(HARD_NEGATIVE, 0.0), found[1].episodes


def _task_gaps(failure: Found, eto: Found) -> torch.Tensor | None:
    """Per train task both explored (sorted ids): the failure agent's share of hard negatives
    among its episodes of the task minus ETO's agent's; None where either run kept no rewards
    per task for its exploration."""
    sides = []
    for run, e in (failure, eto):
        rewards = task_rewards(run.path, e.stage)
        if not rewards:
            return None
        sides.append(
            {
                task: statistics.fmean(outcome(r, run.threshold) == HARD_NEGATIVE for r in rs)
                for task, rs in rewards.items()
                if rs
            }
        )
    tasks = sorted(set(sides[0]) & set(sides[1]))
    if not tasks:
        return None
    return torch.tensor([sides[0][t] - sides[1][t] for t in tasks], dtype=torch.float64)


def margin_claim(
    diffs: dict[str, Any], spread: dict[str, Any], column: str, method: str = "agent_data"
) -> dict[str, Any]:
    return contrast_claim(
        f"{method} >= grpo + {MARGIN * 100:.0f}", method, "grpo", diffs, spread, column, MARGIN
    )


def rft_claim(diffs: dict[str, Any], spread: dict[str, Any], column: str) -> dict[str, Any]:
    """The failure agent against RFT, one of the paper's baselines that samples and trains."""
    return contrast_claim("failure-agent > RFT", "failure_agent", "rft", diffs, spread, column)


def feedback_claim(diffs: dict[str, Any], spread: dict[str, Any], column: str) -> dict[str, Any]:
    """The signals steering exploration against the same exploration at random (CoEvolve's
    ablation: signal feedback 35.7 / 63.0 against random exploration 30.4 / 60.5)."""
    return contrast_claim("signal feedback > random exploration", *EXPLORERS, diffs, spread, column)


def verification_claim(
    diffs: dict[str, Any], spread: dict[str, Any], column: str
) -> dict[str, Any]:
    """Verifying the synthesized tasks against keeping every candidate (CoEvolve's ablation:
    BFCL 63.0 with verification, 58.5 without)."""
    return contrast_claim("verification helps", *VERIFIED, diffs, spread, column)


def contrast_claim(
    claim: str,
    method: str,
    reference: str,
    diffs: dict[str, Any],
    spread: dict[str, Any],
    column: str,
    margin: float = 0.0,
) -> dict[str, Any]:
    """`method - reference` a gain (of at least `margin`) on `column`."""
    name = label(method, reference)
    found = diffs.get(name, {}).get(column)
    if found is None:
        row = missing(claim, column, f"no archived {method} and {reference} runs")
        s = spread.get(column)
        if s and s["floor"] is not None:
            # What the SFT grid's tasks and seeds would detect, from the null cells' spreads.
            row.update(power(s["task_sd"], s["sd"], s["tasks"], len(s["seeds"])))
            row["why"] += " (detectable: at the SFT grid's tasks and seeds)"
        return row
    result = tested(found)
    verdict, why = decide(result["verdict"], result["p"], result["seeds"])
    if verdict == SHOWN and result["mean"] < margin:
        verdict, why = NOT_SHOWN, f"a gain, of less than {margin * 100:.0f} points"
    return {
        "claim": claim,
        "where": column,
        "evidence": summary(name, result),
        "verdict": verdict,
        "why": why,
        **power(stats.pooled_sd(found), seed_sd(spread, column), *grid(found)),
    }


def claims_markdown(rows: list[dict[str, Any]]) -> str:
    """The verdicts as a Markdown table with its note."""

    def points(value: float | None, lower: bool) -> str:
        return "-" if value is None else f"{'>= ' * lower}{value * 100:.1f}"

    lines = [
        "### Verdict per paper claim (from the runs tabulated here; x100)",
        "",
        "| claim | where | evidence (difference, tasks up / down / same, p, seeds) | verdict | "
        "why | detectable (normal) | detectable (t, df = seeds - 1) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        lines.append(
            f"| {r['claim']} | {r['where']} | {r['evidence']} | **{r['verdict']}** | {r['why']} "
            f"| {points(r['detectable'], r['lower_bound'])} "
            f"| {points(r['detectable_t'], r['lower_bound'])} |"
        )
    lines += [
        "",
        "Verdicts: shown when the claim's test says gain at both levels (the paired table's "
        "note); cannot be tested here when the runs are not archived, or the task level agrees "
        f"but fewer than {stats.MIN_SEEDS} seeds allow no seed-level test; else not shown. "
        "Detectable: the smallest true difference these tasks and seeds would detect with "
        "80% power at 5% (two-sided), (q_0.975 + q_0.80) * sqrt(task_sd^2 / (tasks * seeds) + "
        "seed_sd^2 / seeds): task_sd the spread of the claim's paired differences within a "
        "seed, seed_sd the null cells' spread of per-seed SFT means (taken as 0 where one SFT "
        "seed leaves it unknown, which makes the figure a lower bound, marked >=); q normal (1.960 + 0.842) or Student's t at df = "
        "seeds - 1, the verdict's own seed-level test. For the larger unseen gain the two "
        "splits' variances add; for Table 2 task_sd is that of a difference of two "
        "hard-negative indicators, sqrt(2 p (1 - p)), tasks the episodes per exploration and "
        "seed_sd the spread of ETO's first-exploration shares.",
    ]
    return "\n".join(lines)
