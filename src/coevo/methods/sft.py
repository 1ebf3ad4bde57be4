"""SFT: behaviour cloning on the expert trajectories, agent tokens only (Eq. 3-5)."""

from __future__ import annotations

from coevo.methods.run import Run
from coevo.methods.start import shared_start


def run_sft(run: Run) -> None:
    shared_start(run)  # experts, base model, SFT of the target, its evaluation
