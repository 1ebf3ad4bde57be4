"""`coevo report`: the page holds every figure, its numbers are the store's, run text is escaped."""

from __future__ import annotations

import html
import json
import re
import shutil
import statistics
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from coevo.analysis.report import write_report
from coevo.cli import app
from coevo.methods.runner import execute
from coevo.store import Store
from coevo.trajectory import Task, Trajectory, Turn
from tests.methods.test_run import FAST, recipe

FIGURES = {
    "reward_per_iteration.png",
    "success_per_iteration.png",
    "outcomes.png",
    "behaviour.png",
    "training.png",
    "pairs.png",
}
PNG = b"\x89PNG\r\n\x1a\n"


class Page(HTMLParser):
    """What a test reads from the page: image sources, data cells, example episodes."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.images: list[str] = []
        self.cells: dict[tuple[str, ...], str] = {}
        self.examples: list[dict[str, str]] = []
        self._cell: tuple[str, ...] | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.images.append(a["src"])
        elif tag == "td" and "data-metric" in a:
            keys = ("data-metric", "data-method", "data-split", "data-iteration")
            self._cell = tuple(a[k] for k in keys)
        elif tag == "details":
            self.examples.append(a)

    def handle_data(self, data):
        if self._cell is not None:
            self.cells[self._cell] = data
            self._cell = None


@pytest.fixture(scope="module")
def demo_like_runs(tmp_path_factory) -> list[Path]:
    """The demo's layout on nano models: an SFT run and an ETO run starting from it."""
    root = tmp_path_factory.mktemp("runs")
    # Smaller than the method tests' recipe: the report needs runs, not learning.
    small = {
        "env": {**FAST["env"], "eval_tasks": 4},
        "sft": {**FAST["sft"], "epochs": 2},
        "explore": {**FAST["explore"], "samples": 1},
    }
    sft = execute(recipe(method="sft", **small), root / "sft", quiet=True)
    eto = execute(
        recipe(method="eto", iterations=1, init_from=str(sft), **small), root / "eto", quiet=True
    )
    return [sft, eto]


def test_the_page_shows_every_figure_and_the_stores_numbers(demo_like_runs, tmp_path):
    page_path = write_report(demo_like_runs, tmp_path / "report")
    page = Page(page_path.read_text())
    assert {Path(src).name for src in page.images} == FIGURES
    for src in page.images:
        assert (page_path.parent / src).read_bytes().startswith(PNG)
    eto = demo_like_runs[1]
    with Store(eto, readonly=True) as store:
        for iteration in (0, 1):
            for split in ("test_seen", "test_unseen"):
                played = store.trajectories(stage=f"eval-{iteration}-{split}")
                mean = statistics.fmean(t.reward for t in played) * 100
                where = ("reward", "eto", f"tests.toy_env:ToyEnv {split}", str(iteration))
                assert page.cells[where] == f"{mean:.1f} (n={len(played)})"
                success = statistics.fmean(t.success for t in played) * 100
                where = ("success", *where[1:])
                assert page.cells[where] == f"{success:.1f} (n={len(played)})"
        rewards = {t.reward for t in store.trajectories() if t.agent != "expert"}
    # The SFT run has no iteration 1.
    assert page.cells[("reward", "sft", "tests.toy_env:ToyEnv test_seen", "1")] == "-"
    # Each method shows its best episode first, and every example is one the store holds.
    assert [e["data-kind"] for e in page.examples].count("best") == 2
    assert all(float(e["data-reward"]) in rewards for e in page.examples)


def test_the_report_command_skips_what_is_not_a_run(demo_like_runs, tmp_path):
    stray = tmp_path / "compare.md"
    stray.write_text("tables")
    out = tmp_path / "page"
    result = CliRunner().invoke(
        app, ["report", *map(str, demo_like_runs), str(stray), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "not a run directory" in result.stderr
    assert f"report written to {out / 'index.html'}" in result.stdout
    result = CliRunner().invoke(app, ["report", str(stray)])
    assert result.exit_code == 2 and "no coevo run directory" in result.output
    assert not (tmp_path / "report").exists()


def fake_run(root: Path, turns: tuple[Turn, ...]) -> Path:
    """A finished run with one eval stage and one stored episode that says `turns`."""
    run = root / "run"
    (run / "stages" / "eval-0").mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump({"method": "sft", "env": {"name": "shop"}}))
    splits = {"test_seen": {"reward": 0.5, "success": 0.0, "n": 1}}
    (run / "stages" / "eval-0" / "manifest.json").write_text(
        json.dumps({"outputs": {"kind": "eval", "iteration": 0, "splits": splits}})
    )
    task = Task("shop/test_seen/0", "shop", "test_seen", "Buy <b>red</b> shoes & socks.", {})
    episode = Trajectory(task, "target", turns, 0.5, True, False, 1)
    with Store(run) as store:
        store.add_trajectories([episode], stage="eval-0-test_seen")
    return run


def verdict_lines(page: str) -> list[str]:
    return [html.unescape(line) for line in re.findall(r'<p class="verdict">(.*?)</p>', page)]


def test_the_page_opens_with_a_verdict_per_method(demo_like_runs, tmp_path):
    page = write_report(demo_like_runs, tmp_path / "report").read_text()
    sft_run, eto_run = demo_like_runs

    def rewards(run: Path, stage: str) -> dict[str, float]:
        with Store(run, readonly=True) as store:
            return {t.task.id: t.reward for t in store.trajectories(stage=stage)}

    sft, eto = [], []
    for split in ("test_seen", "test_unseen"):
        column = f"tests.toy_env:ToyEnv {split}"
        baseline = rewards(sft_run, f"eval-0-{split}")
        after = rewards(eto_run, f"eval-1-{split}")
        start = statistics.fmean(rewards(eto_run, f"eval-0-{split}").values()) * 100
        diffs = [after[task] - baseline[task] for task in baseline]
        up, down = sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)
        sft.append(f"{column} {statistics.fmean(baseline.values()) * 100:.1f} (the baseline)")
        eto.append(
            f"{column} {start:.1f} -> {statistics.fmean(after.values()) * 100:.1f} "
            f"({statistics.fmean(diffs) * 100:+.1f} vs sft, {up} tasks up / {down} down: "
        )
    first, second = verdict_lines(page)
    assert first == "sft: " + "; ".join(sft)
    assert second.startswith(f"eto: {eto[0]}") and f"; {eto[1]}" in second
    # Before the runs table: the first thing the page says.
    assert page.index('class="verdict"') < page.index('id="runs"')


def test_the_report_shows_grpo_steps_without_signal(tmp_path):
    run = fake_run(tmp_path, (Turn("user", "hi"), Turn("assistant", "Act")))
    (run / "config.yaml").write_text(yaml.safe_dump({"method": "grpo", "env": {"name": "shop"}}))
    (run / "stages" / "grpo-1").mkdir()
    outputs = {"kind": "grpo", "steps": 3, "first_step": 1, "no_signal": [1.0, 0.5, 0.0]}
    (run / "stages" / "grpo-1" / "manifest.json").write_text(json.dumps({"outputs": outputs}))
    page = write_report([run], tmp_path / "report").read_text()
    signal = "; GRPO: 50% of task groups without signal, 1 of 3 steps skipped for want of any"
    assert verdict_lines(page) == [
        f"grpo: no evaluation after its training yet (after SFT: shop test_seen 50.0){signal}"
    ]
    (run / "stages" / "eval-1").mkdir()
    splits = {"test_seen": {"reward": 0.625, "success": 0.0, "n": 1}}
    (run / "stages" / "eval-1" / "manifest.json").write_text(
        json.dumps({"outputs": {"kind": "eval", "iteration": 1, "splits": splits}})
    )
    page = write_report([run], tmp_path / "report").read_text()
    assert verdict_lines(page) == [f"grpo: shop test_seen 50.0 -> 62.5{signal}"]
    table = page[page.index('id="grpo-signal"') :]
    row = '<td class="text">grpo-1</td><td class="text">1-3</td><td>50</td><td>1 of 3</td>'
    row += "<td>100 50 0</td>"
    assert row in table[: table.index("</table>")]


def test_cells_are_the_mean_and_spread_over_seeds(tmp_path):
    runs = []
    for seed, reward in ((0, 0.5), (1, 0.7)):
        run = fake_run(tmp_path / f"s{seed}", (Turn("user", "hi"), Turn("assistant", "Act")))
        config = yaml.safe_load((run / "config.yaml").read_text())
        (run / "config.yaml").write_text(yaml.safe_dump({**config, "seed": seed}))
        manifest = run / "stages" / "eval-0" / "manifest.json"
        record = json.loads(manifest.read_text())
        record["outputs"]["splits"]["test_seen"]["reward"] = reward
        manifest.write_text(json.dumps(record))
        runs.append(run)
    text = write_report(runs, tmp_path / "report").read_text()
    page = Page(text)
    # Two seeds of one episode each: mean 60.0, std of (50, 70) = 14.1.
    assert page.cells[("reward", "sft", "shop test_seen", "0")] == "60.0 ± 14.1 (n=2)"
    # And seed by seed, as `coevo compare` prints them.
    per_seed = text[text.index('id="reward-per-seed-0"') :]
    row = '<td class="text">sft</td><td class="text">shop test_seen</td><td>50.0</td><td>70.0</td>'
    assert row in per_seed[: per_seed.index("</table>")]


def test_text_from_a_run_is_shown_as_it_is(tmp_path):
    turns = (
        Turn("user", "Buy shoes. [Back to Search] <script>alert(1)</script> & [buy now]"),
        Turn("assistant", "Thought: I buy.\nAction: click[buy now]"),
    )
    page = write_report([fake_run(tmp_path, turns)], tmp_path / "report").read_text()
    assert "<script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; [buy now]" in page
    assert "Action: click[buy now]" in page
    # Figures of what the run has; sections without data say so instead.
    assert "No exploration in these runs." in page


def test_the_demo_writes_the_tables_and_the_report(tmp_path):
    from coevo.methods.demo import write_results

    run = fake_run(tmp_path, (Turn("user", "hi"), Turn("assistant", "Action: look")))
    tables, page = write_results(tmp_path, [run])
    assert (tmp_path / "compare.md").read_text() == tables
    assert page == tmp_path / "report" / "index.html" and page.is_file()


def test_the_demo_command_prints_where_the_report_is(tmp_path, monkeypatch):
    from coevo.methods import demo

    page = tmp_path / "report" / "index.html"
    monkeypatch.setattr(demo, "run_demo", lambda out, overrides: ("| tables |", page))
    result = CliRunner().invoke(app, ["demo", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "| tables |" in result.stdout
    assert f"report written to {page}" in result.stdout


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Debian's chromium")
def test_headless_chromium_renders_the_page(demo_like_runs, tmp_path):
    from PIL import Image

    page = write_report(demo_like_runs, tmp_path / "report")
    shot = tmp_path / "page.png"
    subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--screenshot={shot}", "--window-size=1200,3000", page.as_uri()],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    image = Image.open(shot).convert("L")
    assert image.size == (1200, 3000)
    # Not a blank page: text, tables and figures leave many dark pixels.
    dark = sum(image.histogram()[:128])
    assert dark > 20_000


def test_the_page_pairs_each_method_with_sft_task_by_task(demo_like_runs, tmp_path):
    page = write_report(demo_like_runs, tmp_path / "report").read_text()
    sft, eto = demo_like_runs
    with Store(sft, readonly=True) as a, Store(eto, readonly=True) as b:
        start = {t.task.id: t.reward for t in a.trajectories(stage="eval-0-test_seen")}
        after = {t.task.id: t.reward for t in b.trajectories(stage="eval-1-test_seen")}
    diff = statistics.fmean(after[task] - start[task] for task in start) * 100
    assert 'id="reward-paired"' in page
    table = page.split('id="reward-paired"')[1].split("</table>")[0]
    assert f"<td>{diff:+.1f}</td>" in table and "sign-flip" in page


def test_an_all_zero_rate_is_drawn_on_its_usual_scale_and_panels_do_not_overlap(tmp_path):
    from matplotlib.figure import Figure

    from coevo.analysis.figures import behaviour, floor_at_zero

    ax = Figure().subplots()
    ax.plot([0, 1], [0.0, 0.0])
    floor_at_zero(ax, 0.0, 100.0)
    assert ax.get_ylim() == (0.0, 100.0)  # not matplotlib's 0-0.05 around nothing
    ax = Figure().subplots()
    ax.plot([0, 1], [0.0, 3.0])
    floor_at_zero(ax, 3.0, 100.0)
    assert ax.get_ylim()[0] == 0 and ax.get_ylim()[1] < 10  # data: its own scale
    series = {"format_error_rate": {"eto": {"test_seen": {0: [0.0], 1: [0.0]}}}}
    path = behaviour(series, {"format_error_rate": "format errors (%)"}, tmp_path / "b.png")
    assert path.is_file()


def test_methods_whose_lines_coincide_are_named_on_the_panel(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    from coevo.analysis import figures

    made: list[Figure] = []
    save = figures._save
    monkeypatch.setattr(figures, "_save", lambda fig, path: made.append(fig) or save(fig, path))
    same = {0: [0.083], 1: [0.083]}
    series = {"sft": {"test_seen": same}, "eto": {"test_seen": same},
              "failure_agent": {"test_seen": {0: [0.083], 1: [0.1]}}}  # fmt: skip
    figures.per_iteration(series, "reward", tmp_path / "r.png")
    texts = [t.get_text() for t in made[0].axes[0].texts]
    assert texts == ["lines coincide: sft = eto"]
