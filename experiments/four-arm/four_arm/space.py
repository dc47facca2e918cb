"""A run's slice of the cluster: every key under the run's own prefix, so runs never meet,
and the operations of its two actors (the agent, and the curator who disposes of notes)."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from cairn_client import Cairn, KeyForgotten, KeyRevoked, NotFound, RecallNote, State

from .scenario import ANCHORS, RUNBOOK_CUE
from .view import Event, Note, Refusal

# SPEC §4: the markers follow the key, in the order revoked, stale, superseded.
_SUPERSEDED = re.compile(r"^\[[^\]]+\](?: \[(?:REVOKED|STALE: [^\]]*)\])* \[SUPERSEDED by ")


@dataclass(frozen=True)
class Actors:
    agent: str | None
    curator: str | None

    @classmethod
    def for_client(cls, client: Cairn) -> Actors:
        """Named actors on a cluster without auth; with a token the principal is the actor
        (naming another one is refused with ``actor_mismatch``)."""
        return cls(None, None) if client.has_token else cls("agent", "curator")


class WriteOutcome(StrEnum):
    WRITTEN = "written"
    CLEARED_TOMBSTONE = "written with clear_tombstone"
    OVERRODE_REVOCATION = "written with override_revocation"
    HELD_BACK = "refused; not insisted"

    @property
    def landed(self) -> bool:
        return self is not WriteOutcome.HELD_BACK


class Space:
    def __init__(self, client: Cairn, prefix: str, actors: Actors) -> None:
        self.client = client
        self.prefix = prefix
        self.actors = actors

    def key(self, name: str) -> str:
        return self.prefix + name

    # --- what the agent sees -----------------------------------------------------------

    def recall(self, include: Sequence[State]) -> tuple[Note, ...]:
        """The notes a recall on the runbook delivers, as the agent reads them: a
        superseded note is left for its replacement (``[SUPERSEDED by KEY2]`` means read
        KEY2 instead), which carries the same anchors and so comes back in the same recall.
        """
        response = self.client.recall([RUNBOOK_CUE], prefix=self.prefix, include=include)
        return tuple(
            self._note(note) for note in response.notes if not _SUPERSEDED.match(note.rendered)
        )

    def history(self, name: str) -> tuple[Event, ...]:
        try:
            response = self.client.history(self.key(name))
        except NotFound:
            return ()
        return tuple(Event(event.kind, event.actor, event.reason) for event in response.events)

    # --- the agent's writes ------------------------------------------------------------

    def agent_write(
        self,
        name: str,
        value: Any,
        reason: str,
        *,
        clear_tombstone: bool = False,
        override_revocation: bool = False,
    ) -> None:
        self.client.write(
            self.key(name),
            value,
            actor=self.actors.agent,
            anchors=ANCHORS,
            reason=reason,
            clear_tombstone=clear_tombstone,
            override_revocation=override_revocation,
        )

    def write_back(
        self, name: str, value: Any, reason: str, insists: Callable[[Refusal], bool]
    ) -> WriteOutcome:
        """Writes like an agent: a plain write first; a refusal goes to ``insists``, which
        decides whether to write again past it."""
        try:
            self.agent_write(name, value, reason)
        except KeyForgotten as refused:
            if not insists(Refusal(refused.code, self._tombstone_text(refused))):
                return WriteOutcome.HELD_BACK
            self.agent_write(name, value, reason, clear_tombstone=True)
            return WriteOutcome.CLEARED_TOMBSTONE
        except KeyRevoked as refused:
            if not insists(Refusal(refused.code, self._hide_prefix(refused.rendered or ""))):
                return WriteOutcome.HELD_BACK
            self.agent_write(name, value, reason, override_revocation=True)
            return WriteOutcome.OVERRODE_REVOCATION
        return WriteOutcome.WRITTEN

    # --- the curator's operations ------------------------------------------------------

    def curator_write(self, name: str, value: Any) -> None:
        self.client.write(self.key(name), value, actor=self.actors.curator, anchors=ANCHORS)

    def forget(self, name: str, reason: str) -> None:
        self.client.forget(self.key(name), reason, actor=self.actors.curator)

    def revoke(self, name: str, reason: str) -> None:
        self.client.revoke(self.key(name), reason, actor=self.actors.curator)

    def reinstate(self, name: str, reason: str) -> None:
        self.client.reinstate(self.key(name), reason=reason, actor=self.actors.curator)

    def supersede(self, name: str, by: str, reason: str) -> None:
        self.client.supersede(
            self.key(name), self.key(by), reason=reason, actor=self.actors.curator
        )

    # --- helpers -----------------------------------------------------------------------

    def _note(self, note: RecallNote) -> Note:
        return Note(
            state=note.state,
            rendered=self._hide_prefix(note.rendered),
            value=note.value,
        )

    def _tombstone_text(self, refused: KeyForgotten) -> str:
        tombstone = refused.tombstone
        told = f" Forgotten by {tombstone.actor}: {tombstone.reason}." if tombstone else ""
        return self._hide_prefix(refused.message) + "." + told

    def _hide_prefix(self, text: str) -> str:
        """The agent sees its keys as its own: the run prefix would tell it which arm it is
        in."""
        return text.replace(self.prefix, "")
