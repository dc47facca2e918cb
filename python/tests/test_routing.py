"""Where calls go when a node does not answer, checked on the sans-IO core with scripted
exchanges (no cluster, no sockets): a spread call retries at the endpoint after the one
that failed, an endpoint that failed is passed over for a while by spread calls and leader
discovery, and under a call timeout an attempt another node could serve (a spread read, a
read or deduplicated mutation to the leader) and one node's answer to leader discovery
get at most half of the time left.
``test_failover.py`` checks the same against a paused node of a real cluster. A session read
goes to the leader after a ``stale_read`` only when the node is behind the session."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest

from cairn_client import ConnectionFailed, KeyMark, RetryPolicy, Session, StaleRead, _core
from cairn_client._config import Settings, Timeouts
from cairn_client._core import Call, Core, Exchange, Mode, Nodes, Program, Reply, Route

A, B, C = "http://127.0.0.1:1", "http://127.0.0.1:2", "http://127.0.0.1:3"
NO_LEADER = Reply(503, b'{"error":{"code":"no_leader","message":"election"}}')
OVERLOADED = Reply(503, b'{"error":{"code":"overloaded","message":"busy"}}')
OK = Reply(200, b"{}")

Answer = Callable[[Exchange], Reply | ConnectionFailed]


def _core_of(
    *endpoints: str, call_timeout: float | None = None, session: Session | None = None
) -> Core:
    settings = Settings(
        endpoints=endpoints,
        token=None,
        actor=None,
        ssl_context=False,
        timeouts=Timeouts(request=10.0, call=call_timeout),
        retry=RetryPolicy(retries_max=3, backoff_ms_min=0, backoff_ms_max=0),
    )
    return Core(settings, session)


def _run(program: Program[Any], answer: Answer) -> tuple[Any, list[Exchange]]:
    """Runs ``program``, answering each exchange with ``answer`` and each sleep at once;
    its result and the exchanges it made, in order."""
    exchanges: list[Exchange] = []
    outcome: Any = None
    while True:
        try:
            effect = program.send(outcome)
        except StopIteration as stop:
            return stop.value, exchanges
        if isinstance(effect, Exchange):
            exchanges.append(effect)
            outcome = answer(effect)
        else:
            outcome = None


def _spread_read(core: Core) -> Program[int]:
    call = Call("POST", Route.SPREAD, ("v1", "read"), Mode.READ, 10.0, read_only=True)
    return core.call(call, lambda reply: reply.status)


def _refused(exchange: Exchange) -> ConnectionFailed:
    return ConnectionFailed(exchange.base, "ConnectError: refused", sent=False, read_only=True)


@pytest.mark.parametrize("failure", ["refused", "overloaded"])
def test_a_spread_retry_goes_to_the_endpoint_after_the_one_that_failed(failure: str) -> None:
    """A concurrent call takes B while the read's attempt at A fails: the retry goes to B,
    the endpoint after A, not to C, where the shared round-robin cursor points now. (With
    two concurrent calls the cursor would point at A again: a node that answers
    ``overloaded`` is not passed over, so the cursor alone could hand a call's every retry
    the node that just failed it.)"""
    core = _core_of(A, B, C)

    def answer(exchange: Exchange) -> Reply | ConnectionFailed:
        if exchange.base != A:
            return OK
        assert core.nodes.next_endpoint() == B  # the concurrent call
        return _refused(exchange) if failure == "refused" else OVERLOADED

    status, exchanges = _run(_spread_read(core), answer)
    assert status == 200
    assert [exchange.base for exchange in exchanges] == [A, B]


def test_a_failed_endpoint_is_passed_over_until_it_answers_or_its_cooldown_ends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nodes = Nodes([A, B, C])
    nodes.failed(A)
    assert [nodes.next_endpoint() for _ in range(3)] == [B, B, C]
    assert nodes.endpoint_after(C) == B
    nodes.answered(A)
    assert [nodes.next_endpoint() for _ in range(3)] == [A, B, C]
    # Every endpoint failed lately: round-robin as if none had, rather than no endpoint.
    for endpoint in (A, B, C):
        nodes.failed(endpoint)
    assert [nodes.next_endpoint() for _ in range(3)] == [A, B, C]
    assert nodes.endpoint_after(A) == B
    # Once the cooldown passed, a failed endpoint is tried again.
    nodes.answered(B)
    assert nodes.next_endpoint() == B  # the cursor is at A: passed over
    monkeypatch.setattr(_core, "FAILED_ENDPOINT_COOLDOWN", 0.0)
    assert [nodes.next_endpoint() for _ in range(3)] == [B, C, A]


def test_leader_discovery_passes_over_an_endpoint_whose_exchange_failed() -> None:
    """A read whose attempt at A could not connect marks A; the leader discovery that
    follows asks B and C only (each says ``no_leader``, so it asks as many times as there
    are endpoints), until A answers something."""
    core = _core_of(A, B, C)

    def answer(exchange: Exchange) -> Reply | ConnectionFailed:
        if exchange.base == A:
            return _refused(exchange)
        return OK if exchange.path == ("v1", "read") else NO_LEADER

    _run(_spread_read(core), answer)
    found, exchanges = _run(core.discover_leader(), answer)
    assert found is None
    assert [exchange.base for exchange in exchanges] == [B, C, B]
    core.nodes.answered(A)
    _, exchanges = _run(core.discover_leader(), answer)
    assert A in [exchange.base for exchange in exchanges]


@pytest.mark.parametrize(
    ("endpoints", "route", "mode", "shares"),
    [
        ((A, B, C), Route.SPREAD, Mode.READ, True),
        ((A, B, C), Route.LEADER, Mode.READ, True),
        ((A, B, C), Route.LEADER, Mode.MUTATION, True),
        ((A, B, C), Route.LEADER, Mode.ADMIN, False),
        ((A,), Route.SPREAD, Mode.READ, False),
        ((A,), Route.LEADER, Mode.MUTATION, False),
    ],
)
def test_an_attempt_another_node_could_serve_gets_half_the_call_time_left(
    endpoints: tuple[str, ...], route: Route, mode: Mode, shares: bool
) -> None:
    """Under a 3 s call timeout (each attempt may take 10 s), among several endpoints an
    attempt of a spread read, or of a read or deduplicated mutation sent to the leader
    (which an election replaces if it is paused), waits at most about 1.5 s, leaving the
    rest to the retry; a membership change (no request_id makes it safe to send twice),
    or a call to the one endpoint there is, may use all 3 s."""
    core = _core_of(*endpoints, call_timeout=3.0)
    core.nodes.set_leader(A)
    call = Call("POST", route, ("v1", "write"), mode, 10.0, request_id="r1")
    _, exchanges = _run(core.call(call, lambda reply: reply.status), lambda _: OK)
    timeout = exchanges[0].timeout
    assert timeout is not None
    expected = 1.5 if shares else 3.0
    assert expected - 0.5 < timeout <= expected


def test_leader_discovery_gives_one_node_at_most_half_the_call_time_left() -> None:
    """With no leader known, under a 3 s call timeout, the first node asked who leads gets
    at most about 1.5 s (not the 2 s discovery timeout), so a paused node leaves time for
    the nodes after it."""
    core = _core_of(A, B, C, call_timeout=3.0)
    call = Call("POST", Route.LEADER, ("v1", "write"), Mode.MUTATION, 10.0, request_id="r1")
    _, exchanges = _run(core.call(call, lambda reply: reply.status), lambda _: OK)
    asked = exchanges[0]
    assert asked.path == ("cluster", "status")
    assert asked.timeout is not None
    assert 1.0 < asked.timeout <= 1.5


def _status(node: str, leader: str | None) -> Reply:
    """``GET /cluster/status`` of ``node`` (one of A, B, C) naming ``leader``."""
    ids = {A: 1, B: 2, C: 3}
    status = {
        "node_id": ids[node],
        "role": "leader" if node == leader else "follower",
        "leader_id": None if leader is None else ids[leader],
        "term": 2,
        "last_log_index": 9,
        "commit_index": 9,
        "applied_index": 9,
        "voters": [1, 2, 3],
        "learners": [],
        "nodes": [
            {"id": i, "client_addr": e.removeprefix("http://"), "peer_addr": f"127.0.0.1:{i}"}
            for e, i in ids.items()
        ],
        "snapshot_index": 0,
        "log_purged_through": 0,
    }
    return Reply(200, json.dumps(status).encode())


def test_discovery_passes_over_a_leader_named_that_did_not_answer_lately() -> None:
    """A paused leader A: B and C still name it (a follower trusts its leader's lease for
    a while), but A did not answer, so discovery takes no leader from them, and a write
    goes to a node that relays it instead of waiting a whole attempt at A."""
    core = _core_of(A, B, C)
    core.nodes.failed(A)

    def answer(exchange: Exchange) -> Reply | ConnectionFailed:
        if exchange.path == ("cluster", "status"):
            return _status(exchange.base, A)
        return OK

    found, _ = _run(core.discover_leader(), answer)
    assert found is None
    write = Call("POST", Route.LEADER, ("v1", "write"), Mode.MUTATION, 10.0, body=b"{}")
    _, exchanges = _run(core.call(write, lambda reply: reply.status), answer)
    assert exchanges[-1].base in (B, C)
    # Once A answers again, the nodes' word for it is taken.
    core.nodes.answered(A)
    found, _ = _run(core.discover_leader(), answer)
    assert found == A


def test_leader_and_the_leaders_status_ask_the_nodes_now() -> None:
    """The cached leader A stepped down and C leads: ``leader()`` names C, and the
    leader's status is C's, not the follower A's answer."""
    core = _core_of(A, B, C)
    core.nodes.set_leader(A)

    def answer(exchange: Exchange) -> Reply | ConnectionFailed:
        return _status(exchange.base, C)

    leader, _ = _run(core.leader(), answer)
    assert leader == C
    core.nodes.set_leader(A)
    status, exchanges = _run(core.cluster_status(), answer)
    assert (status.node_id, status.role) == (3, "leader")
    assert exchanges[-1].base == C


def test_a_watch_whose_stream_went_silent_reopens_without_asking_that_node_again() -> None:
    """The watch's stream at the leader A goes silent (a paused node: the read times out).
    The discovery that reopens it passes A over, so it does not wait a discovery timeout
    on the node that just stopped answering; the watch reopens at a node that answers."""
    core = _core_of(A, B, C)
    core.nodes.set_leader(A)
    event = (
        b'data: {"revision":8,"key":"k","kind":"written","state":"active",'
        b'"version":1,"generation":1,"forget_epoch":0}\n\n'
    )
    chunks = {
        "at-A": ConnectionFailed(A, "ReadTimeout: silent", sent=True, read_only=True),
        "reopened": event,
    }
    program = core.watch("k", from_revision=8)
    exchanges: list[Exchange] = []
    outcome: Any = None
    while True:
        effect = program.send(outcome)
        outcome = None
        if isinstance(effect, Exchange):
            exchanges.append(effect)
            if effect.path == ("v1", "watch"):
                outcome = Reply(200, b"", "at-A" if effect.base == A else "reopened")
            else:
                outcome = NO_LEADER
        elif isinstance(effect, _core.ReadChunk):
            outcome = chunks[effect.stream]
        elif isinstance(effect, _core.Emit):
            assert effect.item.revision == 8
            break
    bases = [(exchange.base, exchange.path[-1]) for exchange in exchanges]
    assert bases[0] == (A, "watch")
    assert A not in [base for base, _ in bases[1:]], bases
    assert bases[-1][1] == "watch"


def _stale(message: str) -> Reply:
    error: dict[str, object] = {"code": "stale_read", "message": message}
    not_applied = re.fullmatch(r"applied index (\d+) has not reached (\d+) within \d+ ms", message)
    if not_applied is not None:
        error["applied_index"] = int(not_applied.group(1))
        error["awaited_index"] = int(not_applied.group(2))
    return Reply(503, json.dumps({"error": error}).encode())


@pytest.mark.parametrize(
    ("refusal", "min_revision", "to_the_leader"),
    [
        # The node has not applied the session revision (9): the leader answers that.
        ("applied index 3 has not reached 9 within 2000 ms", None, True),
        # The caller's own staleness bound, or its min_revision beyond the session's.
        ("no quorum-confirmed read token within 0 ms (newest: 4 ms old)", None, False),
        ("applied index 12 has not reached 20 within 2000 ms", 20, False),
    ],
)
def test_a_session_read_goes_to_the_leader_only_when_the_node_is_behind_the_session(
    refusal: str, min_revision: int | None, to_the_leader: bool
) -> None:
    session = Session()
    session.observe_key("k", KeyMark(generation=1, forget_epoch=0, version=1, revision=9))
    core = _core_of(A, B, C, session=session)

    linearizable_reads: list[Exchange] = []

    def answer(exchange: Exchange) -> Reply | ConnectionFailed:
        if b"linearizable" in (exchange.body or b""):
            linearizable_reads.append(exchange)
            return NO_LEADER
        return NO_LEADER if exchange.path == ("cluster", "status") else _stale(refusal)

    read = core.read("k", max_staleness_ms=0, min_revision=min_revision)
    with pytest.raises(StaleRead) as raised:
        _run(read, answer)
    # Whatever happened at the leader, the read ends with the node's own refusal.
    assert raised.value.message == refusal
    assert bool(linearizable_reads) is to_the_leader
