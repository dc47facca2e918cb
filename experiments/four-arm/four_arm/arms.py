"""The four ways of disposing of the false note, and the two ways of undoing a mistaken
disposal of a true one, each in cairn's own operations."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from cairn_client import State

from .scenario import (
    BELIEF_KEY,
    MISTAKEN_REASON,
    PLACEHOLDER,
    PLACEHOLDER_KEY,
    RESULT_KEY,
    REVOKE_REASON,
    SILENT_REASON,
    SUPERSEDE_REASON,
    UNDO_REASON,
)
from .space import Space

# recall's default: forgotten notes are never recalled, revoked ones come first.
DELIVERED = (State.ACTIVE, State.REVOKED)


@dataclass(frozen=True)
class Arm:
    name: str
    title: str
    dispose: Callable[[Space], None]
    recall_states: tuple[State, ...]
    """What the agent's recall returns: C keeps revocations out of it (a passive audit
    trail, visible only in history)."""


def _forget_silently(space: Space) -> None:
    space.forget(BELIEF_KEY, SILENT_REASON)


def _supersede_with_placeholder(space: Space) -> None:
    space.curator_write(PLACEHOLDER_KEY, PLACEHOLDER)
    space.supersede(BELIEF_KEY, PLACEHOLDER_KEY, SUPERSEDE_REASON)


def _revoke_with_reason(space: Space) -> None:
    space.revoke(BELIEF_KEY, REVOKE_REASON)


ARMS = {
    arm.name: arm
    for arm in (
        Arm("A", "silent forget", _forget_silently, DELIVERED),
        Arm("B", "supersede with a placeholder", _supersede_with_placeholder, DELIVERED),
        Arm("C", "revoke; reason in history only", _revoke_with_reason, (State.ACTIVE,)),
        Arm("D", "revoke; reason delivered by recall", _revoke_with_reason, DELIVERED),
    )
}


@dataclass(frozen=True)
class Mistake:
    """A true result note disposed of by mistake before the agent's first session, and how
    it is undone."""

    name: str
    title: str
    dispose: Callable[[Space], None]
    undo: Callable[[Space], None]


def _revoke_result(space: Space) -> None:
    space.revoke(RESULT_KEY, MISTAKEN_REASON)


def _reinstate_result(space: Space) -> None:
    space.reinstate(RESULT_KEY, UNDO_REASON)


def _forget_result(space: Space) -> None:
    space.forget(RESULT_KEY, MISTAKEN_REASON)


def _nothing_left_to_restore(space: Space) -> None:
    """The forget took the value out of the state machine (history keeps only its hash),
    so nobody can restore it from cairn: the note is re-written only when the agent
    learns the result again and writes it with ``clear_tombstone``."""


MISTAKES = {
    mistake.name: mistake
    for mistake in (
        Mistake("reinstate", "revoke (D), then reinstate", _revoke_result, _reinstate_result),
        Mistake("rewrite", "forget, then re-write", _forget_result, _nothing_left_to_restore),
    )
}
