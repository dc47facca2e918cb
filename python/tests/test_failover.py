"""Faults on private real clusters: the leader SIGKILLed while both clients write (no write
lost or doubled), an outcome that cannot be known (``OutcomeUnknown``) settled by a retry
with the same ``request_id``, the errors of a cluster without a majority, a membership
change while the leader the client knew is stopped, ``any`` reads under a short call
timeout while a follower is paused, ``leader()`` and ``cluster_status()`` after a leader
change, and a write while the leader is paused and still named by the followers."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import count
from typing import Any

import pytest

from cairn_client import (
    AsyncCairn,
    Cairn,
    CairnError,
    ConnectionFailed,
    EventKind,
    InvalidInput,
    NoLeader,
    NotFound,
    OutcomeUnknown,
    RetryPolicy,
    Session,
    StaleRead,
)
from cairn_client.testing import LocalCluster

WRITE_SECONDS = 4.0
KILL_AFTER_SECONDS = 1.0


@dataclass
class Outcomes:
    """What one writer saw: acknowledged keys, unknown outcomes and definite failures."""

    actor: str
    acknowledged: dict[str, float] = field(default_factory=dict)  # key -> monotonic time
    unknown: dict[str, str] = field(default_factory=dict)  # key -> request_id
    failed: list[str] = field(default_factory=list)


def _settle(outcomes: Outcomes, key: str, error: CairnError | None) -> None:
    if error is None:
        outcomes.acknowledged[key] = time.monotonic()
    elif isinstance(error, OutcomeUnknown):
        assert error.request_id is not None, "every write carries a request_id"
        outcomes.unknown[key] = error.request_id
    else:
        outcomes.failed.append(key)


def _sync_writer(endpoints: list[str], stop: threading.Event, outcomes: Outcomes) -> None:
    with Cairn(endpoints, actor=outcomes.actor) as client:
        for i in count():
            if stop.is_set():
                return
            key = f"failover/sync/{i:05}"
            error: CairnError | None = None
            try:
                client.write(key, i)
            except CairnError as failure:
                error = failure
            _settle(outcomes, key, error)


def _async_writer(endpoints: list[str], stop: threading.Event, outcomes: Outcomes) -> None:
    async def write_until_stopped() -> None:
        async with AsyncCairn(endpoints, actor=outcomes.actor) as client:
            for i in count():
                if stop.is_set():
                    return
                key = f"failover/async/{i:05}"
                error: CairnError | None = None
                try:
                    await client.write(key, i)
                except CairnError as failure:
                    error = failure
                _settle(outcomes, key, error)

    asyncio.run(write_until_stopped())


def _exactly_once(client: Cairn, key: str, value: object) -> None:
    events = client.history(key).events
    assert [event.kind for event in events] == [EventKind.WRITTEN], (key, events)
    assert client.read(key).value == value


@pytest.mark.timeout(90)
def test_no_write_is_lost_or_doubled_when_the_leader_is_killed(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    local = make_cluster(3)
    stop = threading.Event()
    sync_outcomes, async_outcomes = Outcomes("sync-writer"), Outcomes("async-writer")
    writers = [
        threading.Thread(target=_sync_writer, args=(local.endpoints, stop, sync_outcomes)),
        threading.Thread(target=_async_writer, args=(local.endpoints, stop, async_outcomes)),
    ]
    for writer in writers:
        writer.start()
    time.sleep(KILL_AFTER_SECONDS)
    killed = local.leader_id()
    local.kill(killed)
    killed_at = time.monotonic()
    time.sleep(WRITE_SECONDS - KILL_AFTER_SECONDS)
    stop.set()
    for writer in writers:
        writer.join(timeout=60)
    local.start(killed)
    local.wait_for_leader()

    with Cairn(local.endpoints, actor="checker") as checker:
        for outcomes in (sync_outcomes, async_outcomes):
            acked_at = outcomes.acknowledged.values()
            assert any(at < killed_at for at in acked_at), "writes before the kill"
            assert any(at > killed_at for at in acked_at), "writes after the failover"
            print(  # the -s output of a run shows what the kill did to each writer
                f"acknowledged {len(outcomes.acknowledged)}, unknown {len(outcomes.unknown)}, "
                f"failed {len(outcomes.failed)}"
            )
            for key in outcomes.acknowledged:
                _exactly_once(checker, key, int(key.rsplit("/", 1)[1]))
            # An unknown outcome is settled by retrying with its request_id (and the same
            # payload, actor included): applied once.
            for key, request_id in outcomes.unknown.items():
                value = int(key.rsplit("/", 1)[1])
                checker.write(key, value, actor=outcomes.actor, request_id=request_id)
                _exactly_once(checker, key, int(key.rsplit("/", 1)[1]))
            # A definite failure was not applied.
            for key in outcomes.failed:
                with pytest.raises(NotFound):
                    checker.read(key)
        listed = {record.key for record in checker.list_all("failover/")}
        settled = {
            key
            for outcomes in (sync_outcomes, async_outcomes)
            for key in (*outcomes.acknowledged, *outcomes.unknown)
        }
        assert listed == settled, "nothing was written that no writer asked for"


@pytest.mark.timeout(90)
def test_an_isolated_leader_answers_outcome_unknown_and_the_retry_applies_once(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    local = make_cluster(3)
    leader = local.leader_id()
    followers = [i for i in local.node_ids if i != leader]
    for follower in followers:
        local.kill(follower)
    once = RetryPolicy(retries_max=0)
    with (
        Cairn(local.endpoints, actor="writer", retry=once) as client,
        pytest.raises(OutcomeUnknown) as unknown,
    ):
        client.pinned(local.endpoints[leader - 1]).write("isolated/k", "v")
    request_id = unknown.value.request_id
    assert request_id is not None
    assert len(request_id) == 32
    # "<code>: <message>", the code once.
    assert str(unknown.value) == f"outcome_unknown: {unknown.value.message}"
    assert not unknown.value.message.startswith("outcome_unknown")
    for follower in followers:
        local.start(follower)
    local.wait_for_leader()
    with Cairn(local.endpoints, actor="writer") as client:
        retried = client.write("isolated/k", "v", request_id=request_id)
        assert retried.version == 1
        _exactly_once(client, "isolated/k", "v")


@pytest.mark.timeout(60)
def test_a_call_ends_at_its_call_timeout(
    connect: Callable[..., Cairn], make_cluster: Callable[..., LocalCluster]
) -> None:
    """A leader without its majority holds a write it cannot commit (its own answer, 504,
    comes after 5 s, and the default retries make that over a minute). With
    ``call_timeout`` the write raises ``OutcomeUnknown`` under its ``request_id`` at the
    bound, and a retry with that id after the followers are back settles it once."""
    local = make_cluster(3)
    leader = local.leader_id()
    followers = [i for i in local.node_ids if i != leader]
    for follower in followers:
        local.kill(follower)
    bound = 1.5
    client = connect(local.endpoints, actor="writer", call_timeout=bound)
    alone = client.pinned(local.endpoints[leader - 1])
    started = time.monotonic()
    with pytest.raises(OutcomeUnknown) as unknown:
        alone.write("bounded/k", "v")
    # The bound, plus a poll's slack; an attempt alone may take 10 s (the default timeout).
    assert time.monotonic() - started < bound + 2.5
    assert f"call timeout of {bound} s" in unknown.value.message
    request_id = unknown.value.request_id
    assert request_id is not None
    assert len(request_id) == 32
    for follower in followers:
        local.start(follower)
    local.wait_for_leader()
    with Cairn(local.endpoints, actor="writer") as settled:
        assert settled.write("bounded/k", "v", request_id=request_id).version == 1
        _exactly_once(settled, "bounded/k", "v")


def test_a_call_timeout_must_be_positive() -> None:
    with pytest.raises(InvalidInput, match="call_timeout"):
        Cairn(["127.0.0.1:9"], call_timeout=0)


@pytest.mark.timeout(60)
def test_a_session_read_cut_off_from_the_majority_ends_with_the_nodes_stale_read(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    """With a session, a ``StaleRead`` sends the read to the leader once; with the
    majority gone there is none, and the read ends with the survivor's own ``StaleRead``
    (SPEC §3), not with the re-read's ``NoLeader``."""
    local = make_cluster(3)
    with Cairn(local.endpoints, actor="writer") as writer:
        writer.write("k", 1)
        leader = local.leader_id()
        survivor = next(i for i in local.node_ids if i != leader)
        writer.pinned(local.endpoints[survivor - 1]).read("k", consistency="any")
    for node_id in local.node_ids:
        if node_id != survivor:
            local.kill(node_id)
    with Cairn(local.endpoints, session=Session()) as reader, pytest.raises(StaleRead):
        reader.read("k", consistency="bounded", max_staleness_ms=50)


@pytest.mark.timeout(60)
def test_a_node_without_a_majority_answers_typed_unavailability(
    make_cluster: Callable[..., LocalCluster],
) -> None:
    local = make_cluster(3)
    leader = local.leader_id()
    survivor = next(i for i in local.node_ids if i != leader)
    for node_id in local.node_ids:
        if node_id != survivor:
            local.kill(node_id)
    killed_at = time.monotonic()
    fast = RetryPolicy(retries_max=1, backoff_ms_min=10, backoff_ms_max=20)
    with Cairn(local.endpoints, actor="writer", retry=fast) as client:
        alone = client.pinned(local.endpoints[survivor - 1])
        with pytest.raises(NoLeader):
            alone.write("k", 1)
        # A read token the survivor had confirmed just before the kill rightly serves reads
        # for 50 ms more; no token can be confirmed after it. Past that, the bound refuses.
        time.sleep(max(0.0, killed_at + 0.1 - time.monotonic()))
        with pytest.raises(StaleRead):
            alone.read("k", consistency="bounded", max_staleness_ms=50)
        dead = client.pinned(local.endpoints[leader - 1])
        with pytest.raises(ConnectionFailed) as unreachable:
            dead.write("k", 1)
        assert unreachable.value.sent is False, "refused connections cannot have applied"
        assert not unreachable.value.may_have_applied
    # Every endpoint, the dead ones first: once the survivor names no leader (it named the
    # dead one until its election timeout), calls reach it and end with its answer, not
    # with a dead node's refused connection, whatever the order.
    alive = local.endpoints[survivor - 1]
    dead_first = [e for e in local.endpoints if e != alive] + [alive]
    every = RetryPolicy(retries_max=4, backoff_ms_min=10, backoff_ms_max=20)
    with Cairn(dead_first, actor="writer", retry=every) as whole:
        deadline = time.monotonic() + 10
        while whole.cluster_status(alive).leader_id is not None:
            assert time.monotonic() < deadline, "the survivor still names a leader"
            time.sleep(0.05)
        with pytest.raises(NoLeader):
            whole.write("k", 1)
        with pytest.raises(NoLeader):
            whole.read("k")


@pytest.mark.timeout(60)
def test_a_membership_change_passes_over_a_stopped_cached_leader(
    connect: Callable[..., Cairn], make_cluster: Callable[..., LocalCluster]
) -> None:
    local = make_cluster(3)
    client = connect(local.endpoints, actor="operator", timeout=3.0)
    client.write("membership/x", 1)  # the client now knows the leader
    stopped = local.leader_id()
    local.pause(stopped)  # its kernel still accepts connections; nothing answers
    try:
        local.wait_for_leader(exclude=stopped)
        membership = client.cluster_remove(stopped)
    finally:
        local.resume(stopped)
    assert stopped not in membership.voters


def _until_served(client: Cairn, key: str, value: object) -> None:
    """Waits until an ``any`` read of ``key`` at every endpoint answers ``value``."""
    deadline = time.monotonic() + 10
    for endpoint in client.endpoints:
        node = client.pinned(endpoint)
        while True:
            with contextlib.suppress(NotFound):
                if node.read(key, consistency="any").value == value:
                    break
            assert time.monotonic() < deadline, f"{endpoint} does not serve {key}"
            time.sleep(0.05)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_any_reads_pass_over_a_paused_follower_within_a_short_call_timeout(
    connect: Callable[..., Cairn], make_cluster: Callable[..., LocalCluster], tls: bool
) -> None:
    """A paused follower accepts connections and answers nothing. Reads any node may serve,
    under a 3 s call timeout though one attempt may take 10 s, all succeed: the one that
    reaches the paused node gives it half the time left and goes on to the next node, and
    the reads after it pass the paused node over (it failed lately), so they are fast.
    Over HTTPS the paused node's kernel completes the TCP connection but nothing answers
    the TLS handshake, which the attempt's bound covers too, not only `connect_timeout`:
    the reading client is made after the pause, so it has no connection to reuse."""
    local = make_cluster(3, tls=tls)
    options: dict[str, Any] = {"ca_cert": local.ca_cert} if tls else {}
    writer = connect(local.endpoints, actor="reader", **options)
    writer.write("paused/k", "v")
    _until_served(writer, "paused/k", "v")
    leader = local.leader_id()
    paused = next(i for i in local.node_ids if i != leader)
    local.pause(paused)
    client = connect(
        local.endpoints, timeout=10.0, call_timeout=3.0, connect_timeout=5.0, **options
    )
    took: list[float] = []
    try:
        # Two rounds over the three endpoints: the paused one is due twice.
        for _ in range(2 * len(local.endpoints)):
            started = time.monotonic()
            assert client.read("paused/k", consistency="any").value == "v"
            took.append(time.monotonic() - started)
    finally:
        local.resume(paused)
    assert max(took) < 3.0, took
    assert len([seconds for seconds in took if seconds >= 1.0]) <= 1, took


def test_leader_and_its_status_follow_a_leader_change(
    connect: Callable[..., Cairn], make_cluster: Callable[..., LocalCluster]
) -> None:
    """The leader the client cached was killed and came back as a follower: ``leader()``
    and ``cluster_status()`` name the leader there is now, not the cached one."""
    local = make_cluster(3)
    client = connect(local.endpoints, actor="operator")
    client.write("change/k", 1)  # the client now caches the leader
    old = local.leader_id()
    local.kill(old)
    new = local.wait_for_leader(exclude=old)
    local.start(old)
    assert client.leader() == local.node(new).url
    status = client.cluster_status()
    assert (status.node_id, status.role) == (new, "leader")


@pytest.mark.timeout(60)
def test_a_write_does_not_wait_on_a_paused_leader_that_followers_still_name(
    connect: Callable[..., Cairn], make_cluster: Callable[..., LocalCluster]
) -> None:
    """The leader is paused and listed first; its status request fails after 0.5 s, and
    the followers still name it for a while (its lease). The write is not sent to it, where
    it would wait its whole 10 s attempt: a follower relays it, gives the relay up once it
    follows the newly elected leader, and the retry reaches that leader."""
    local = make_cluster(3)
    leader = local.leader_id()
    first = [local.node(leader).url] + [local.node(i).url for i in local.node_ids if i != leader]
    client = connect(first, actor="writer", timeout=10.0, discovery_timeout=0.5)
    local.pause(leader)
    try:
        started = time.monotonic()
        client.write("paused-leader/k", 1)
        took = time.monotonic() - started
    finally:
        local.resume(leader)
    assert took < 5.0, took
    assert client.read("paused-leader/k").version == 1, "applied once"
