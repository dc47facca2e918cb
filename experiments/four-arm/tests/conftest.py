"""Fixtures: one real local cluster for the whole session, and the experiment's command
line run against it (through CAIRN_ENDPOINTS, as a user would point it at a cluster)."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from cairn_client.testing import LocalCluster

from four_arm.cli import main

RunExperiment = Callable[..., tuple[dict[str, Any], str]]


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(3) as local:
        yield local


@pytest.fixture(scope="session")
def run_experiment(
    cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> RunExperiment:
    """Runs ``experiments/four-arm/run ARGS`` on ``endpoints`` (default: the session's
    cluster) and returns the results document and what it printed."""

    def run(
        *args: str, endpoints: list[str] | None = None, token: str = ""
    ) -> tuple[dict[str, Any], str]:
        out = tmp_path_factory.mktemp("four-arm") / "results.json"
        env = {"CAIRN_ENDPOINTS": ",".join(endpoints or cluster.endpoints), "CAIRN_TOKEN": token}
        printed = io.StringIO()
        with environment(env), contextlib.redirect_stdout(printed):
            assert main([*args, "--json", str(out)]) == 0
        return json.loads(out.read_text()), printed.getvalue()

    return run


@contextlib.contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    """The process environment with ``values`` set and no ``CAIRN_TOKEN_FILE``."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("CAIRN_TOKEN_FILE", raising=False)
        for name, value in values.items():
            patch.setenv(name, value)
        yield
