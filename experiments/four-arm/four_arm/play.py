"""The session loop: what one run does on the cluster, session by session."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from cairn_client import State

from .arms import DELIVERED, Arm, Mistake
from .coins import Coins
from .scenario import BELIEF_KEY, FALSE_BELIEF, RESULT_KEY, result_value, runbook_text
from .space import Space, WriteOutcome
from .view import Agent, View

DERIVED_REASON = "derived from ops/runbook.md"
RESULT_REASON = "my own result"


@dataclass(frozen=True)
class World:
    """What holds in every run, whichever the agent."""

    sessions: int
    payoff: float
    """Probability that the fast deploy succeeds when taken: its true payoff."""
    p_history: float
    """Probability that the agent looks at its belief note's history in a session."""
    mistake_sessions: int
    """Sessions a mistaken disposal stays in place before it is undone (reinstatement)."""


class Basis(StrEnum):
    """What a session's decision rests on, read off the view: the same attribution for
    every agent, so a re-derivation is counted alike for the simulated and the LLM agent."""

    OWN_RESULT = "own result"
    MEMORY = "false belief recalled"
    RUNBOOK = "re-derived from the runbook"
    WARNING = "revocation warning"
    NOTHING = "nothing"


@dataclass(frozen=True)
class SessionRecord:
    session: int
    shown: tuple[str, ...]
    """The rendered notes recall delivered."""
    history: tuple[str, ...] | None
    """``kind (reason)`` of each history event, if the agent looked."""
    believes_fast_fails: bool
    basis: Basis
    took_fast: bool
    succeeded: bool | None
    writes: tuple[tuple[str, WriteOutcome], ...]

    @property
    def rederived(self) -> bool:
        return self.basis is Basis.RUNBOOK

    @property
    def took_foreclosed(self) -> bool:
        return self.believes_fast_fails and self.took_fast

    @property
    def writeback(self) -> WriteOutcome | None:
        """What became of writing a re-derived belief back, if it was tried."""
        return next((outcome for key, outcome in self.writes if key == BELIEF_KEY), None)

    @property
    def acted_on_own_result(self) -> bool:
        return self.took_fast and self.basis is Basis.OWN_RESULT


@dataclass(frozen=True)
class Run:
    space: Space
    agent: Agent
    coins: Coins
    world: World
    premise_present: bool


def play_disposal(run: Run, arm: Arm) -> list[SessionRecord]:
    """The agent derived the false belief before its first session; the curator disposes of it
    under ``arm``; then the sessions."""
    run.space.agent_write(BELIEF_KEY, FALSE_BELIEF, DERIVED_REASON)
    arm.dispose(run.space)
    return [
        play_session(run, arm.recall_states, session)
        for session in range(1, run.world.sessions + 1)
    ]


def play_reinstatement(run: Run, mistake: Mistake) -> list[SessionRecord]:
    """The agent had verified that the fast deploy works; that result is disposed of by
    mistake before the agent's first session and undone after ``mistake_sessions`` sessions. Recall
    delivers as in arm D."""
    run.space.agent_write(RESULT_KEY, result_value(succeeded=True, session=0), RESULT_REASON)
    mistake.dispose(run.space)
    records = []
    for session in range(1, run.world.sessions + 1):
        if session == undo_session(run.world):
            mistake.undo(run.space)
        records.append(play_session(run, DELIVERED, session))
    return records


def undo_session(world: World) -> int:
    return world.mistake_sessions + 1


def play_session(run: Run, recall_states: tuple[State, ...], session: int) -> SessionRecord:
    """One session: look (recall on the runbook, perhaps history), decide, act, and write
    back what it learned: its result if memory does not show it yet, and a belief it
    re-derived (unless the fast deploy just worked)."""
    looks_at_history = run.coins.flip(session, "history", run.world.p_history)
    view = View(
        session=session,
        runbook=runbook_text(run.premise_present),
        notes=run.space.recall(recall_states),
        history=run.space.history(BELIEF_KEY) if looks_at_history else None,
    )
    decision = run.agent.decide(view)
    basis = _basis(view, decision.believes_fast_fails)
    succeeded = run.coins.flip(session, "payoff", run.world.payoff) if decision.takes_fast else None
    writes: list[tuple[str, WriteOutcome]] = []
    if succeeded is not None and succeeded != view.own_result():
        value = result_value(succeeded, session)
        # Its own result is verified: it writes past any refusal.
        outcome = run.space.write_back(RESULT_KEY, value, RESULT_REASON, lambda _: True)
        writes.append((RESULT_KEY, outcome))
    if basis is Basis.RUNBOOK and not succeeded:
        outcome = run.space.write_back(
            BELIEF_KEY,
            FALSE_BELIEF,
            DERIVED_REASON,
            lambda refusal: run.agent.insists(refusal, session),
        )
        writes.append((BELIEF_KEY, outcome))
    return SessionRecord(
        session=session,
        shown=tuple(note.rendered for note in view.notes),
        history=_history_lines(view),
        believes_fast_fails=decision.believes_fast_fails,
        basis=basis,
        took_fast=decision.takes_fast,
        succeeded=succeeded,
        writes=tuple(writes),
    )


def _basis(view: View, believes_fast_fails: bool) -> Basis:
    own_result = view.own_result()
    if own_result is not None and own_result != believes_fast_fails:
        return Basis.OWN_RESULT
    if believes_fast_fails and view.shows_false_belief():
        return Basis.MEMORY
    if believes_fast_fails and view.premise_visible:
        return Basis.RUNBOOK
    if not believes_fast_fails and view.warns_off_false_belief():
        return Basis.WARNING
    return Basis.NOTHING


def _history_lines(view: View) -> tuple[str, ...] | None:
    if view.history is None:
        return None
    return tuple(
        f"{event.kind.value} ({event.reason})" if event.reason else event.kind.value
        for event in view.history
    )
