"""The simulated agent: a small, seeded decision model.

Each session it forms its belief about `deploy --fast` from what it sees, first match wins:

1. its own latest result, if memory shows one (active): it trusts what happened to it;
2. the false belief, if memory shows it as an active note;
3. the runbook's stale line, if present: it derives the belief with probability
   ``p_derive`` (a *re-derivation*);
4. otherwise no belief.

A warning against the false belief (a revoked note in recall, or a revocation of its belief
note that it finds in history and that was never reinstated) is heeded with probability
``heed``; a heeded warning rules out steps 2 and 3. Holding the belief, it still takes the
fast deploy with probability ``explore``; without it, it always does.

When cairn refuses to write its re-derived belief back, it reacts to the kind of refusal,
not to reason text (it reads none): a revocation warning is heeded with probability
``heed``; a tombstone only says the key was cleared, not that the belief is wrong, so it
re-establishes its fresh derivation with ``clear_tombstone``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from cairn_client import KeyRevoked

from .coins import Coins
from .view import Decision, Refusal, View


@dataclass(frozen=True)
class SimulatedParams:
    p_derive: float = 0.9
    explore: float = 0.05
    heed: float = 1.0


class SimulatedAgent:
    def __init__(self, params: SimulatedParams, coins: Coins) -> None:
        self.params = params
        self.coins = coins

    def describe(self) -> dict[str, Any]:
        return {"kind": "simulated", **asdict(self.params)}

    def decide(self, view: View) -> Decision:
        fails = self._believes_fast_fails(view)
        explores = self.coins.flip(view.session, "explore", self.params.explore)
        return Decision(believes_fast_fails=fails, takes_fast=not fails or explores)

    def insists(self, refusal: Refusal, session: int) -> bool:
        if refusal.code == KeyRevoked.code:
            return not self.coins.flip(session, "heed-refusal", self.params.heed)
        return True

    def _believes_fast_fails(self, view: View) -> bool:
        own_result = view.own_result()
        if own_result is not None:
            return not own_result
        if view.warns_off_false_belief() and self.coins.flip(
            view.session, "heed", self.params.heed
        ):
            return False
        if view.shows_false_belief():
            return True
        if view.premise_visible:
            return self.coins.flip(view.session, "derive", self.params.p_derive)
        return False
