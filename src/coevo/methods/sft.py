"""SFT: behaviour cloning on the expert trajectories, agent tokens only (Eq. 3-5); and `base`,
the pretrained model as it is, the row SFT's gain is measured from."""

from __future__ import annotations

from coevo.run.context import Run
from coevo.stages import play
from coevo.stages.shared import base_model, shared_start


def run_sft(run: Run) -> None:
    shared_start(run)  # experts, base model, SFT of the target, its evaluation


def run_base(run: Run) -> None:
    """The base model evaluated as it is (stages model and eval-0): no demonstration, no
    training; what a method's prompt and format give a model before any fine-tuning."""
    play.evaluate(run, base_model(run), iteration=0)
