"""Seeded coins shared by every arm."""

from __future__ import annotations

import random


class Coins:
    """Independent draws named by seed, session and purpose.

    A draw depends on nothing else, so the same seed flips the same coins in every arm
    (common random numbers): two arms' runs of one seed differ only through what cairn
    showed the agent, not through luck.
    """

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def flip(self, session: int, purpose: str, probability: float) -> bool:
        """``True`` with ``probability``."""
        return random.Random(f"{self.seed}/{session}/{purpose}").random() < probability
