"""The one situation every run plays out.

A deploy task offers `deploy --fast`, which works (its true payoff is the ``payoff``
parameter). A stale runbook line says it fails. An agent that believes the runbook takes
`deploy --safe` and so never learns otherwise. The false belief, derived from that line
before the agent's first session, is what each arm disposes of.

Keys are relative to a run's own prefix (``Space``); the texts here are what the agent
reads, so they are written the way a real runbook and real notes would be.
"""

from __future__ import annotations

from typing import Any

RUNBOOK_PATH = "ops/runbook.md"
RUNBOOK_CUE = f"path:{RUNBOOK_PATH}"
# Every note about the deploy carries both, so a recall on the runbook finds it.
ANCHORS = (RUNBOOK_CUE, "topic:deploy")

STALE_LINE = (
    "- Do not use `deploy --fast` on this cluster: it fails (INC-2041). Use `deploy --safe`."
)
_RUNBOOK_HEAD = "# Deploy runbook\n\n- Check the release notes before deploying.\n"

FALSE_BELIEF = "deploy --fast fails on this cluster; use deploy --safe"
BELIEF_KEY = "beliefs/deploy-fast-fails"
RESULT_KEY = "results/deploy-fast"
PLACEHOLDER_KEY = "beliefs/deploy-notes"
PLACEHOLDER = "deploy notes: under review"

# Arm A's deletion explains nothing (that is what makes it silent); B's supersession names
# only the placeholder; C and D carry the real reason.
SILENT_REASON = "deleted"
SUPERSEDE_REASON = "replaced by a placeholder"
REVOKE_REASON = "wrong: deploy --fast works since the v2.3 upgrade, which fixed INC-2041"
# The reinstatement part disposes of a true result by mistake, then undoes it.
MISTAKEN_REASON = "suspected: deploy --fast caused the 02:00 outage"
UNDO_REASON = "the 02:00 outage had another cause"

FAST = "deploy --fast"
SUCCEEDED = "succeeded"
FAILED = "failed"


def runbook_text(premise_present: bool) -> str:
    """ops/runbook.md as the agent reads it: with the stale line, or after it was removed."""
    return _RUNBOOK_HEAD + (STALE_LINE + "\n" if premise_present else "")


def result_value(succeeded: bool, session: int) -> dict[str, Any]:
    """The note an agent keeps of its own attempt at the fast deploy."""
    return {"action": FAST, "outcome": SUCCEEDED if succeeded else FAILED, "session": session}


def result_outcome(value: Any) -> bool | None:
    """``True``/``False`` if ``value`` is a result note that succeeded/failed, else ``None``."""
    if isinstance(value, dict) and value.get("action") == FAST:
        outcome = value.get("outcome")
        if outcome in (SUCCEEDED, FAILED):
            return bool(outcome == SUCCEEDED)
    return None
