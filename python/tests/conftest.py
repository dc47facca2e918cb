"""Fixtures: real local cairn clusters (``cairn_client.testing.LocalCluster``) and clients.

``cluster`` and ``auth_cluster`` are shared by the whole session (tests use distinct key
prefixes); ``make_cluster`` makes a private cluster for tests that kill, pause or restart
nodes, and closes it when the test ends, whatever happened.

``connect`` makes clients of the test's flavor: every test that takes it runs twice, once
with ``Cairn`` and once with ``AsyncCairn``. The async client is driven through
``SyncOverAsync`` (each coroutine run on one event loop owned by the adapter), so the same
test body checks both: one body, two transports.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest

from cairn_client import AsyncCairn, AsyncStream, Cairn
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


class _SyncStream:
    """An ``AsyncStream`` iterated from sync code on the adapter's loop."""

    def __init__(self, stream: AsyncStream[Any], loop: asyncio.AbstractEventLoop) -> None:
        self._stream = stream
        self._loop = loop

    def __enter__(self) -> _SyncStream:
        self._loop.run_until_complete(self._stream.open())
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> _SyncStream:
        return self

    def __next__(self) -> Any:
        try:
            return self._loop.run_until_complete(self._stream.__anext__())
        except StopAsyncIteration:
            raise StopIteration from None

    def close(self) -> None:
        self._loop.run_until_complete(self._stream.aclose())


class SyncOverAsync:
    """``AsyncCairn`` with ``Cairn``'s calling convention, for shared test bodies."""

    def __init__(self, client: AsyncCairn, loop: asyncio.AbstractEventLoop) -> None:
        self._client = client
        self._loop = loop

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._client, name)
        if not callable(attribute):
            return attribute

        def call(*args: Any, **kwargs: Any) -> Any:
            result = attribute(*args, **kwargs)
            if inspect.iscoroutine(result):
                result = self._loop.run_until_complete(result)
            if isinstance(result, AsyncStream):
                return _SyncStream(result, self._loop)
            if isinstance(result, AsyncCairn):
                return SyncOverAsync(result, self._loop)
            return result

        return call

    def __repr__(self) -> str:
        return repr(self._client)

    def close(self) -> None:
        self._loop.run_until_complete(self._client.aclose())


@pytest.fixture(params=["sync", "async"])
def flavor(request: pytest.FixtureRequest) -> str:
    return cast(str, request.param)


@pytest.fixture
def connect(flavor: str) -> Iterator[Callable[..., Cairn]]:
    """Makes clients of the test's flavor (``Cairn`` or ``AsyncCairn``) and closes them."""
    loop = asyncio.new_event_loop()
    made: list[Any] = []

    def make(*args: Any, **kwargs: Any) -> Cairn:
        client: Any
        if flavor == "sync":
            client = Cairn(*args, **kwargs)
        else:
            client = SyncOverAsync(AsyncCairn(*args, **kwargs), loop)
        made.append(client)
        return cast(Cairn, client)

    yield make
    for client in made:
        client.close()
    loop.close()


@pytest.fixture
def api(connect: Callable[..., Cairn], cluster: LocalCluster) -> Cairn:
    """A client of the shared cluster, with actor ``tester``."""
    return connect(cluster.endpoints, actor="tester")
