"""The results document (JSON), the summary table and the per-session trace."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from typing import Any

from .arms import ARMS, MISTAKES
from .experiment import Config, Job
from .metrics import (
    disposal_outcome,
    sessions_to_act_again,
    summarize_disposal,
    summarize_reinstatement,
)
from .play import SessionRecord, undo_session

Runs = Mapping[Job, list[SessionRecord]]


def results_document(
    config: Config, agent: dict[str, Any], cluster: dict[str, Any], runs: Runs, traced: bool
) -> dict[str, Any]:
    world, seeds = config.world, config.seed_range
    document: dict[str, Any] = {
        "experiment": "four-arm disposal",
        "agent": agent,
        "world": asdict(world),
        "seeds": config.seeds,
        "first_seed": config.first_seed,
        "cluster": cluster,
        "records": [
            summarize_disposal(
                arm,
                premise,
                [disposal_outcome(runs[Job("disposal", arm, premise, s)]) for s in seeds],
                world.sessions,
            )
            for arm in config.arms
            for premise in config.premises
        ],
        "reinstatement": [
            summarize_reinstatement(
                mistake,
                premise,
                [
                    sessions_to_act_again(
                        runs[Job("reinstatement", mistake, premise, s)], undo_session(world)
                    )
                    for s in seeds
                ],
                world.sessions - undo_session(world) + 1,
            )
            for mistake in MISTAKES
            for premise in config.premises
        ],
    }
    if traced:
        document["traces"] = [
            {**asdict(job), "sessions": [_record_json(r) for r in runs[job]]}
            for job in runs
            if job.seed == config.first_seed
        ]
    return document


_SCALAR = r"(?:-?[\d.]+|null|true|false)"
_SCALAR_LIST = re.compile(rf"\[\n\s*({_SCALAR}(?:,\n\s*{_SCALAR})*)\n\s*\]")


def dump_document(document: Mapping[str, Any]) -> str:
    """Indented JSON with each list of numbers on one line (the per-run lists are long)."""
    text = json.dumps(document, indent=1)
    return _SCALAR_LIST.sub(lambda m: "[" + " ".join(m.group(1).split()) + "]", text) + "\n"


def summary_table(document: Mapping[str, Any]) -> str:
    agent = document["agent"]
    world = document["world"]
    lines = [
        f"agent: {_describe_agent(agent)}; world: payoff {world['payoff']}, "
        f"p_history {world['p_history']}; {document['seeds']} seeds x {world['sessions']} "
        "sessions",
        "",
        "| arm | premise | re-derivations | written back | refused, held back "
        "| foreclosed taken | error survival (sessions) | median | error not ended |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    lines += [
        f"| {r['arm']} {ARMS[r['arm']].title} | {r['premise']} | {r['rederivations']:.2f} "
        f"| {r['writebacks']:.2f} | {r['writebacks_held_back']:.2f} "
        f"| {r['foreclosed_taken']:.2f} "
        f"| {r['error_survival_sessions']:.2f} | {r['error_survival_median']:g} "
        f"| {r['error_not_ended']}/{r['runs']} |"
        for r in document["records"]
    ]
    lines += [
        "",
        "reinstatement: a true result disposed of by mistake before the agent's first session, "
        f"undone after {_count(world['mistake_sessions'], 'session')}",
        "",
        "| mistake, undo | premise | sessions to act on it again | median | in 1 session | never |",
        "|---|---|--:|--:|--:|--:|",
    ]
    lines += [
        f"| {MISTAKES[r['mistake']].title} | {r['premise']} | {r['sessions_to_act_again']:.2f} "
        f"| {r['sessions_to_act_again_median']:g} | {r['within_one_session']}/{r['runs']} "
        f"| {r['never']} |"
        for r in document["reinstatement"]
    ]
    return "\n".join(lines)


def format_trace(job: Job, records: Sequence[SessionRecord]) -> str:
    title = ARMS[job.variant].title if job.part == "disposal" else MISTAKES[job.variant].title
    lines = [f"trace: {job.part} {job.variant} ({title}), premise {job.premise}, seed {job.seed}"]
    for record in records:
        history = (
            "; ".join(record.history) or "(no events)"
            if record.history is not None
            else "not consulted"
        )
        action = "deploy --fast" if record.took_fast else "deploy --safe"
        if record.succeeded is not None:
            action += " (succeeded)" if record.succeeded else " (failed)"
        belief = "believes" if record.believes_fast_fails else "does not believe"
        writes = ", ".join(f"{key}: {outcome.value}" for key, outcome in record.writes)
        lines += [
            f"{_ordinal(record.session)} session",
            *(f"  recalled: {shown}" for shown in record.shown or ("(nothing)",)),
            f"  history:  {history}",
            f"  decision: {belief} the fast deploy fails ({record.basis.value}); {action}",
            f"  writes:   {writes or '-'}",
        ]
    return "\n".join(lines)


def _describe_agent(agent: Mapping[str, Any]) -> str:
    details = ", ".join(f"{name} {value}" for name, value in agent.items() if name != "kind")
    return f"{agent['kind']} ({details})"


def _record_json(record: SessionRecord) -> dict[str, Any]:
    return {
        "session": record.session,
        "recalled": list(record.shown),
        "history": None if record.history is None else list(record.history),
        "believes_fast_fails": record.believes_fast_fails,
        "basis": record.basis.value,
        "took_fast": record.took_fast,
        "succeeded": record.succeeded,
        "writes": [{"key": key, "outcome": outcome.value} for key, outcome in record.writes],
    }


def _count(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1: "1 session", "3 sessions"."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _ordinal(n: int) -> str:
    """``n`` as an ordinal: "1st", "2nd", "3rd", "4th", "11th", "21st"."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
