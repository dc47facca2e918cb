"""Many runs at once: every (part, arm or mistake, premise, seed) is a job with its own key
prefix, run on a small pool of threads, each with its own client."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

from cairn_client import Cairn

from .arms import ARMS, MISTAKES
from .coins import Coins
from .play import Run, SessionRecord, World, play_disposal, play_reinstatement
from .space import Actors, Space
from .view import Agent

Part = Literal["disposal", "reinstatement"]
PREMISES = ("present", "removed")
PROGRESS_EVERY_S = 5.0


@dataclass(frozen=True)
class Config:
    """What to run: the arms and premise settings, ``seeds`` runs of each."""

    arms: tuple[str, ...]
    premises: tuple[str, ...]
    seeds: int
    first_seed: int
    world: World

    @property
    def seed_range(self) -> range:
        return range(self.first_seed, self.first_seed + self.seeds)


@dataclass(frozen=True)
class Setup:
    """What every job of an invocation shares."""

    make_agent: Callable[[int], Agent]
    world: World
    tag: str
    """The invocation's key prefix, so that runs on a long-lived cluster never meet."""


@dataclass(frozen=True)
class Job:
    part: Part
    variant: str
    """The arm (disposal) or the mistake (reinstatement)."""
    premise: str
    seed: int

    def prefix(self, tag: str) -> str:
        return f"{tag}/{self.part}/{self.variant}-{self.premise}/s{self.seed}/"


def plan(config: Config) -> list[Job]:
    """Every disposal arm, then the reinstatement part, under each premise setting."""
    disposal = [
        Job("disposal", arm, premise, seed)
        for arm in config.arms
        for premise in config.premises
        for seed in config.seed_range
    ]
    reinstatement = [
        Job("reinstatement", mistake, premise, seed)
        for mistake in MISTAKES
        for premise in config.premises
        for seed in config.seed_range
    ]
    return disposal + reinstatement


def run_job(job: Job, client: Cairn, setup: Setup) -> list[SessionRecord]:
    run = Run(
        space=Space(client, job.prefix(setup.tag), Actors.for_client(client)),
        agent=setup.make_agent(job.seed),
        coins=Coins(job.seed),
        world=setup.world,
        premise_present=job.premise == "present",
    )
    if job.part == "disposal":
        return play_disposal(run, ARMS[job.variant])
    return play_reinstatement(run, MISTAKES[job.variant])


def run_all(
    jobs: Sequence[Job], connect: Callable[[], Cairn], setup: Setup, workers: int
) -> dict[Job, list[SessionRecord]]:
    """Runs every job; the first failure stops the run (no partial results)."""
    results: dict[Job, list[SessionRecord]] = {}
    started = time.monotonic()
    last_report = started
    with _per_thread_clients(connect) as client, ThreadPoolExecutor(workers) as pool:

        def work(job: Job) -> list[SessionRecord]:
            return run_job(job, client(), setup)

        futures = {pool.submit(work, job): job for job in jobs}
        try:
            for future in as_completed(futures):
                results[futures[future]] = future.result()
                now = time.monotonic()
                if now - last_report >= PROGRESS_EVERY_S or len(results) == len(jobs):
                    last_report = now
                    _progress(len(results), len(jobs), now - started)
        except BaseException:
            pool.shutdown(cancel_futures=True)
            raise
    return results


def _progress(done: int, total: int, elapsed: float) -> None:
    print(
        f"four-arm: {done}/{total} runs ({100 * done // total}%), {elapsed:.0f} s",
        file=sys.stderr,
        flush=True,
    )


@contextmanager
def _per_thread_clients(connect: Callable[[], Cairn]) -> Iterator[Callable[[], Cairn]]:
    """Yields a function giving the calling thread its own client; closes them all."""
    local = threading.local()
    made: list[Cairn] = []
    lock = threading.Lock()

    def client() -> Cairn:
        existing: Cairn | None = getattr(local, "client", None)
        if existing is None:
            existing = connect()
            local.client = existing
            with lock:
                made.append(existing)
        return existing

    try:
        yield client
    finally:
        for each in made:
            each.close()
