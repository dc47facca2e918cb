"""What a run measured, and what many runs of one setting measured together."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .play import SessionRecord
from .space import WriteOutcome


@dataclass(frozen=True)
class DisposalOutcome:
    rederivations: int
    """Sessions in which the agent derived the false belief from the runbook again."""
    writebacks: dict[WriteOutcome, int]
    """Sessions in which the re-derived belief was written back, by how the write ended."""
    foreclosed_taken: int
    """Sessions in which the agent held the belief and took the fast deploy anyway."""
    error_survival_sessions: int
    """Sessions, counted from the first, before the first one decided without the belief; the
    run's length if there was none (``error_ended`` is then false)."""
    error_ended: bool


def disposal_outcome(records: Sequence[SessionRecord]) -> DisposalOutcome:
    first_free = next((r.session for r in records if not r.believes_fast_fails), None)
    return DisposalOutcome(
        rederivations=sum(r.rederived for r in records),
        writebacks=Counter(r.writeback for r in records if r.writeback is not None),
        foreclosed_taken=sum(r.took_foreclosed for r in records),
        error_survival_sessions=len(records) if first_free is None else first_free - 1,
        error_ended=first_free is not None,
    )


def sessions_to_act_again(records: Sequence[SessionRecord], undo_session: int) -> int | None:
    """Counting the undo's session as 1, the session in which the agent first took the fast
    deploy on the strength of its own result again; ``None`` if it never did."""
    return next(
        (
            r.session - undo_session + 1
            for r in records
            if r.session >= undo_session and r.acted_on_own_result
        ),
        None,
    )


def summarize_disposal(
    arm: str, premise: str, outcomes: Sequence[DisposalOutcome], sessions: int
) -> dict[str, Any]:
    """One JSON record: means per run under the required names, then the spread."""
    survival = [o.error_survival_sessions for o in outcomes]
    landed = [sum(n for w, n in o.writebacks.items() if w.landed) for o in outcomes]
    held_back = [o.writebacks.get(WriteOutcome.HELD_BACK, 0) for o in outcomes]
    return {
        "arm": arm,
        "premise": premise,
        "runs": len(outcomes),
        "rederivations": _mean(o.rederivations for o in outcomes),
        "writebacks": _mean(landed),
        "writebacks_held_back": _mean(held_back),
        "writeback_outcomes": {
            outcome.value: sum(o.writebacks.get(outcome, 0) for o in outcomes)
            for outcome in WriteOutcome
        },
        "foreclosed_taken": _mean(o.foreclosed_taken for o in outcomes),
        "error_survival_sessions": _mean(survival),
        "error_survival_median": statistics.median(survival),
        "error_not_ended": sum(not o.error_ended for o in outcomes),
        "survival_curve": survival_curve(survival, sessions),
        "per_run": {
            "rederivations": [o.rederivations for o in outcomes],
            "writebacks": landed,
            "writebacks_held_back": held_back,
            "foreclosed_taken": [o.foreclosed_taken for o in outcomes],
            "error_survival_sessions": survival,
        },
    }


def summarize_reinstatement(
    mistake: str, premise: str, per_run: Sequence[int | None], window: int
) -> dict[str, Any]:
    """A run that did not act on it again within the ``window`` sessions from the undo on
    counts as ``window + 1`` (``never`` says how many), so the mean is a lower bound."""
    counted = [window + 1 if s is None else s for s in per_run]
    return {
        "mistake": mistake,
        "premise": premise,
        "runs": len(per_run),
        "sessions_to_act_again": _mean(counted),
        "sessions_to_act_again_median": statistics.median(counted),
        "within_one_session": sum(s == 1 for s in per_run),
        "never": sum(s is None for s in per_run),
        "per_run": list(per_run),
    }


def survival_curve(survival: Sequence[int], sessions: int) -> list[float]:
    """Fraction of runs whose error outlived each count of sessions, from 0 to
    ``sessions`` (1.0 at 0: the false note is in memory when it is disposed of)."""
    return [round(sum(s >= n for s in survival) / len(survival), 4) for n in range(sessions + 1)]


def _mean(values: Iterable[int]) -> float:
    return round(statistics.fmean(values), 3)
