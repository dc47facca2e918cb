"""``watch()`` across a restart, and a stop, of the node serving it: the stream reconnects
elsewhere and resumes at the last delivered revision, with no gap and no duplicate."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from cairn_client import AsyncCairn, Cairn, RetryPolicy, WriteRequest
from cairn_client.testing import LocalCluster


@pytest.mark.timeout(90)
def test_watch_resumes_after_its_node_restarts_without_gaps_or_duplicates(
    connect: Callable[..., Cairn], make_cluster: Callable[..., LocalCluster]
) -> None:
    local = make_cluster(3)
    # Patient enough for an election: followers name the dead leader until they time out.
    client = connect(local.endpoints, actor="feeder", retry=RetryPolicy(retries_max=10))
    expected: list[tuple[str, int, int]] = []

    def write(key: str) -> None:
        result = client.write(key, key)
        expected.append((result.key, result.version, result.revision))

    with client.watch("feed/") as events:
        for i in range(4):
            write(f"feed/{i}")
        batch = client.batch(
            [WriteRequest(key="feed/b1", value=1), WriteRequest(key="feed/b2", value=2)]
        )
        expected += [(r.key, r.version, r.revision) for r in batch.results]
        seen = [next(events) for _ in range(3)]

        serving = local.leader_id()  # the watch is served by the leader
        local.kill(serving)
        for i in range(4, 8):
            write(f"feed/{i}")
        local.start(serving)
        seen += [next(events) for _ in range(len(expected) - len(seen))]
        write("feed/last")
        after = next(events)

    assert [(e.key, e.version, e.revision) for e in seen] == expected[:-1]
    assert (after.key, after.revision) == ("feed/last", expected[-1][2]), "no duplicate"


@pytest.mark.timeout(90)
def test_watch_leaves_a_stopped_leader_for_the_new_one(
    connect: Callable[..., Cairn], make_cluster: Callable[..., LocalCluster]
) -> None:
    local = make_cluster(3)
    client = connect(
        local.endpoints,
        actor="feeder",
        timeout=3.0,
        retry=RetryPolicy(retries_max=10),
        watch_silence_timeout=2.0,
    )
    with client.watch("stop/") as events:
        first = client.write("stop/0", 0)
        assert next(events).revision == first.revision
        stopped = local.leader_id()  # the watch is served by the leader
        local.pause(stopped)  # its kernel keeps the stream's connection open
        try:
            later = [client.write(f"stop/{i}", i) for i in range(1, 4)]
            delivered = [next(events) for _ in later]
            assert local.node(stopped).paused, "delivered only once the old leader was resumed"
        finally:
            local.resume(stopped)
    assert [(e.key, e.revision) for e in delivered] == [(r.key, r.revision) for r in later]


@pytest.mark.timeout(30)
def test_a_sync_watch_is_connected_when_it_returns_so_a_plain_iterator_misses_nothing(
    cluster: LocalCluster, prefix: str
) -> None:
    with Cairn(cluster.endpoints, actor="feeder") as client:
        stream = client.watch(prefix)
        written = client.write(f"{prefix}early", 1)
        first = next(iter(stream))
        stream.close()
    assert (first.key, first.revision) == (written.key, written.revision)


@pytest.mark.timeout(30)
def test_an_async_watch_opened_before_a_write_delivers_it(
    cluster: LocalCluster, prefix: str
) -> None:
    async def scenario() -> tuple[str, int, int]:
        async with AsyncCairn(cluster.endpoints, actor="feeder") as client:
            events = await client.watch(prefix).open()
            written = await client.write(f"{prefix}early", 1)
            first = await anext(aiter(events))
            await events.aclose()
            return first.key, first.revision, written.revision

    key, seen_at, written_at = asyncio.run(scenario())
    assert (key, seen_at) == (f"{prefix}early", written_at)
