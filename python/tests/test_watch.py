"""``watch()`` across a restart of the node serving it: the stream reconnects elsewhere and
resumes at the last delivered revision, with no gap and no duplicate."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from cairn_client import Cairn, RetryPolicy, WriteRequest
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
