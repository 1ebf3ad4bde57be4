"""An episode's verdict from the package's multi-turn checks, taken at the end of each user turn.

The package's `multi_turn_checker` re-executes a finished conversation through `eval`; the env
has already executed every call on its own instances, so it applies the same two checks to them
turn by turn, with the package's own functions:

- state check (`state_checker`): after the turn, every back-end instance equals the ground
  truth's instance (public attributes);
- response check (`response_checker`): the ground truth's results for this turn are an
  unordered sub-multiset of every result the agent got so far.

As in the package, a turn whose ground truth makes no calls is not checked, a checked turn in
which the agent made no calls fails, and an entry passes when every checked turn passes and no
turn ran out of steps (BFCL's force-termination). The first failure is the entry's reason.
`turn_pass_share` is the share of checked turns that passed (a turn that ran out of steps counts
as a failed checked turn, turns never reached fail): a graded score for ranking failures, 1.0
exactly when the entry passes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from coevo.envs.bfcl.backend import Backend


@dataclass(frozen=True)
class TurnCheck:
    """One user turn's checks."""

    turn: int
    checked: bool
    """False when the ground truth makes no calls in this turn (nothing to check)."""
    passed: bool
    error_type: str | None = None
    message: str | None = None

    def to_info(self) -> dict[str, Any]:
        d: dict[str, Any] = {"turn": self.turn, "checked": self.checked, "passed": self.passed}
        if self.error_type:
            d["error_type"] = self.error_type
            d["message"] = self.message
        return d


@dataclass(frozen=True)
class Verdict:
    """The whole entry: the reward's pass/fail, its reason and the graded share."""

    valid: bool
    turn_pass_share: float
    error_type: str | None = None
    message: str | None = None
    turns: tuple[TurnCheck, ...] = field(default_factory=tuple)

    def to_info(self) -> dict[str, Any]:
        return {
            "valid": self.valid,
            "error_type": self.error_type,
            "message": self.message,
            "turns": [t.to_info() for t in self.turns],
        }


def check_turn(
    turn: int,
    truth_calls: list[str],
    model_steps: int,
    model: Backend,
    truth: Backend,
    model_results: list[str],
    truth_results: list[str],
) -> TurnCheck:
    """Check one finished turn. `model_results` holds every result of the episode so far (the
    package lets an earlier turn's call count), `truth_results` this turn's ground truth's."""
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import (
        response_checker,
        state_checker,
    )

    if not truth_calls:
        return TurnCheck(turn, checked=False, passed=True)
    if model_steps == 0:
        return TurnCheck(
            turn, True, False, "multi_turn:empty_turn_model_response",
            f"Model response list is empty for turn {turn}",
        )  # fmt: skip
    state = state_checker(model.instances, truth.instances)
    if not state["valid"]:
        differing = ", ".join(sorted(state["details"]["differences"]))
        return TurnCheck(
            turn, True, False, state["error_type"],
            f"{state['error_message']} Differing attributes: {differing}.",
        )  # fmt: skip
    response = response_checker(model_results, truth_results, turn)
    if not response["valid"]:
        missing = [_shorten(m) for m in response["details"]["missing_items"]]
        return TurnCheck(
            turn, True, False, response["error_type"],
            f"{response['error_message']} Missing: {missing}.",
        )  # fmt: skip
    return TurnCheck(turn, True, True)


def forced(turn: int) -> TurnCheck:
    """The check of a turn that ran out of steps: failed, whatever its ground truth."""
    return TurnCheck(
        turn, True, False, "multi_turn:force_terminated",
        f"Model was force-terminated: turn {turn} used all its steps.",
    )  # fmt: skip


def verdict(checks: list[TurnCheck], ground_truth: list[list[str]]) -> Verdict:
    """The entry's verdict from the checks of the turns played; a turn that ran out of steps
    (`forced`) fails the entry, as BFCL's force-termination does."""
    counted = {t for t, calls in enumerate(ground_truth) if calls}
    counted |= {c.turn for c in checks if c.checked}
    passed = sum(1 for c in checks if c.checked and c.passed)
    share = passed / len(counted) if counted else 1.0
    stop = next((c for c in checks if c.error_type == "multi_turn:force_terminated"), None)
    failed = stop or next((c for c in checks if not c.passed), None)
    if failed is not None:
        return Verdict(False, share, failed.error_type, failed.message, tuple(checks))
    return Verdict(True, share, turns=tuple(checks))


def _shorten(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
