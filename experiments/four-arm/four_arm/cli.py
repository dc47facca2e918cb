"""Command line of the experiment (``experiments/four-arm/run --help``)."""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from cairn_client import Cairn, CairnError
from cairn_client.testing import ClusterError, LocalCluster

from .arms import ARMS
from .coins import Coins
from .experiment import PREMISES, Config, Setup, plan, run_all
from .llm import LlmAgent
from .play import World
from .plots import write_plots
from .report import dump_document, format_trace, results_document, summary_table
from .simulated import SimulatedAgent, SimulatedParams
from .view import Agent

LOCAL_NODES = 3


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the experiment; 0 when it ran, 2 for bad arguments (argparse), 1 when the
    cluster could not be used (no answer, a refused token, a local cluster that did not
    start), said in one line on stderr."""
    args = parse_args(argv)
    try:
        return _run(args)
    except (CairnError, ClusterError) as err:
        _note(f"error: {type(err).__name__}: {err}")
        return 1


def _run(args: argparse.Namespace) -> int:
    """The experiment ``args`` describe: runs, trace, table, JSON and plots."""
    world = World(
        sessions=args.sessions,
        payoff=args.payoff,
        p_history=args.p_history,
        mistake_sessions=args.mistake_sessions,
    )
    config = Config(
        arms=tuple(ARMS) if args.arm == "all" else (args.arm,),
        premises=PREMISES if args.premise == "both" else (args.premise,),
        seeds=args.seeds,
        first_seed=args.first_seed,
        world=world,
    )
    jobs = plan(config)
    with agent_factory(args) as make_agent, cluster_connection(args.local) as (connect, cluster):
        runs = run_all(jobs, connect, Setup(make_agent, world, _run_tag()), args.jobs)
        agent = make_agent(0).describe()
    document = results_document(config, agent, cluster, runs, traced=args.trace)
    if args.trace:
        for job in jobs:
            if job.seed == config.first_seed:
                print(format_trace(job, runs[job]), end="\n\n")
    print(summary_table(document))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(dump_document(document))
        _note(f"results written to {args.json}")
    if args.plots:
        for path in write_plots(document, args.plots):
            _note(f"plot written to {path}")
    return 0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="experiments/four-arm/run",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description=(
            "The four-arm disposal experiment (docs/experiment.md) on a live cairn cluster: "
            "the one in CAIRN_ENDPOINTS (token from CAIRN_TOKEN or CAIRN_TOKEN_FILE) if set, "
            "else a local 3-node cluster started for the run (--local forces it)."
        ),
    )
    run = parser.add_argument_group("the run")
    run.add_argument("--arm", choices=[*ARMS, "all"], default="all")
    run.add_argument("--premise", choices=[*PREMISES, "both"], default="both")
    run.add_argument(
        "--sessions",
        type=_at_least(2),
        default=30,
        help="sessions per run (2 or more, and more than --mistake-sessions)",
    )
    run.add_argument("--seeds", type=_at_least(1), default=200, help="runs per setting")
    run.add_argument("--first-seed", type=_at_least(0), default=0, help="seed of the first run")
    run.add_argument("--json", type=Path, metavar="FILE", help="write the results here")
    run.add_argument("--plots", type=Path, metavar="DIR", help="write the PNG plots here")
    run.add_argument("--trace", action="store_true", help="print the first seed's sessions")
    run.add_argument("--local", action="store_true", help="start a local cluster")
    run.add_argument("--jobs", type=_at_least(1), default=4, help="runs at a time")
    world = parser.add_argument_group("the world")
    world.add_argument(
        "--payoff",
        type=_probability,
        default=1.0,
        help="probability that deploy --fast succeeds when taken",
    )
    world.add_argument(
        "--p-history",
        type=_probability,
        default=0.2,
        help="probability that the agent looks at its belief note's history",
    )
    world.add_argument(
        "--mistake-sessions",
        type=_at_least(1),
        default=1,
        help="sessions a mistaken disposal stays before it is undone",
    )
    agent = parser.add_argument_group("the agent")
    agent.add_argument("--agent", choices=["simulated", "llm"], default="simulated")
    agent.add_argument(
        "--p-derive",
        type=_probability,
        default=0.9,
        help="simulated: probability of deriving the belief from the runbook",
    )
    agent.add_argument(
        "--explore",
        type=_probability,
        default=0.05,
        help="simulated: probability of taking deploy --fast despite the belief",
    )
    agent.add_argument(
        "--heed",
        type=_probability,
        default=1.0,
        help="simulated: probability of heeding a revocation warning",
    )
    agent.add_argument("--llm-url", help="llm: base URL of an OpenAI-compatible API (…/v1)")
    agent.add_argument("--model", help="llm: model name")
    agent.add_argument("--llm-timeout", type=float, default=120.0, help="llm: seconds per call")
    args = parser.parse_args(argv)
    if args.agent == "llm" and not (args.llm_url and args.model):
        parser.error("--agent llm needs --llm-url and --model")
    if args.sessions <= args.mistake_sessions:
        parser.error("--sessions must be more than --mistake-sessions")
    return args


@contextmanager
def agent_factory(args: argparse.Namespace) -> Iterator[Callable[[int], Agent]]:
    """Yields a function making each run's agent from its seed."""
    if args.agent == "simulated":
        params = SimulatedParams(p_derive=args.p_derive, explore=args.explore, heed=args.heed)
        yield lambda seed: SimulatedAgent(params, Coins(seed))
        return
    key = os.environ.get("LLM_API_KEY")
    headers = {"authorization": f"Bearer {key}"} if key else {}
    with httpx.Client(timeout=args.llm_timeout, headers=headers) as http:
        yield lambda _seed: LlmAgent(http, args.llm_url, args.model)


@contextmanager
def cluster_connection(
    local: bool,
) -> Iterator[tuple[Callable[[], Cairn], dict[str, Any]]]:
    """Yields a client maker and a description of the cluster for the results."""
    if os.environ.get("CAIRN_ENDPOINTS") and not local:
        with Cairn() as probe:
            endpoints = probe.endpoints
        yield Cairn, {"kind": "CAIRN_ENDPOINTS", "endpoints": endpoints}
        return
    _note(f"starting a local {LOCAL_NODES}-node cluster (cairn_client.testing.LocalCluster)")
    with LocalCluster(LOCAL_NODES) as cluster:
        yield lambda: Cairn(endpoints=cluster.endpoints), {"kind": "local", "nodes": LOCAL_NODES}


def _run_tag() -> str:
    return f"four-arm/{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{secrets.token_hex(3)}"


def _probability(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not a probability")
    return value


def _at_least(low: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"{text} is less than {low}")
        return value

    return parse


def _note(message: str) -> None:
    print(f"four-arm: {message}", file=sys.stderr, flush=True)
