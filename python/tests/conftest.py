"""Fixtures: real local cairn clusters (cairn_client.testing.LocalCluster).

``cluster`` and ``auth_cluster`` are shared by the whole session (tests use distinct key
prefixes); ``make_cluster`` makes a private cluster for tests that kill, pause or restart
nodes, and closes it when the test ends, whatever happened.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from cairn_client.testing import LocalCluster


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(3) as local:
        yield local


@pytest.fixture(scope="session")
def auth_cluster() -> Iterator[LocalCluster]:
    with LocalCluster(3, auth=True) as local:
        yield local


@pytest.fixture
def make_cluster() -> Iterator[Callable[..., LocalCluster]]:
    made: list[LocalCluster] = []

    def make(size: int = 3, **options: Any) -> LocalCluster:
        local = LocalCluster(size, **options)
        made.append(local)
        return local.__enter__()

    yield make
    for local in made:
        local.close()


@pytest.fixture
def prefix() -> str:
    """A key prefix no other test uses, so tests can share one cluster."""
    return f"t-{uuid.uuid4().hex[:12]}/"
