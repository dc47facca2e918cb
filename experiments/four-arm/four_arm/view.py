"""What an agent gets to see in a session, and what it answers.

An agent is stateless between sessions: everything it knows comes from the ``View`` (the
runbook, the notes cairn delivered as its arm allows, and the history of its belief note
when it looked), so memory is the only thing that carries a belief from one session to the
next.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from cairn_client import EventKind, State

from .scenario import FALSE_BELIEF, STALE_LINE, result_outcome


@dataclass(frozen=True)
class Note:
    """A recalled note as the agent reads it."""

    state: State
    rendered: str
    value: Any


@dataclass(frozen=True)
class Event:
    """One event of a key's history (values are never in history, reasons are)."""

    kind: EventKind
    actor: str
    reason: str | None


@dataclass(frozen=True)
class View:
    session: int
    runbook: str
    notes: tuple[Note, ...]
    history: tuple[Event, ...] | None
    """The belief note's history if the agent consulted it this session, else ``None``."""

    @property
    def premise_visible(self) -> bool:
        return STALE_LINE in self.runbook

    def own_result(self) -> bool | None:
        """Whether the agent's own last fast deploy succeeded, if memory shows its result
        note (active)."""
        for note in self.notes:
            outcome = result_outcome(note.value)
            if note.state == State.ACTIVE and outcome is not None:
                return outcome
        return None

    def shows_false_belief(self) -> bool:
        return any(note.state == State.ACTIVE and note.value == FALSE_BELIEF for note in self.notes)

    def warns_off_false_belief(self) -> bool:
        """A revoked note of the false belief was delivered, or the history shows a
        revocation of the belief note that no later reinstatement withdrew (an overriding
        write does not withdraw its reason)."""
        delivered = any(
            note.state == State.REVOKED and note.value == FALSE_BELIEF for note in self.notes
        )
        standing = False
        for event in self.history or ():
            if event.kind in (EventKind.REVOKED, EventKind.REINSTATED):
                standing = event.kind == EventKind.REVOKED
        return delivered or standing


@dataclass(frozen=True)
class Decision:
    believes_fast_fails: bool
    takes_fast: bool


@dataclass(frozen=True)
class Refusal:
    """cairn refused to write the agent's note back; ``text`` is what the answer says."""

    code: str
    text: str


class Agent(Protocol):
    def describe(self) -> dict[str, Any]:
        """Which agent this is and its parameters, for the results."""
        ...

    def decide(self, view: View) -> Decision: ...

    def insists(self, refusal: Refusal, session: int) -> bool:
        """Whether to write the refused note anyway (``clear_tombstone`` or
        ``override_revocation``)."""
        ...
