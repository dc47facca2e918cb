"""The parts that need no cluster: error bodies to exceptions, retry classification,
backoff bounds, request ids, SSE parsing and watch resumption, and what a transport
failure says about a request that may have reached a node (a loopback server that hangs
up)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from cairn_client import (
    AccessError,
    Cairn,
    CairnError,
    Conflict,
    ConnectionFailed,
    DecodeError,
    EventKind,
    HttpStatusError,
    InvalidRequest,
    KeyForgotten,
    KeyRevoked,
    NoLeader,
    OutcomeUnknown,
    Overloaded,
    Permission,
    PermissionDenied,
    RetryPolicy,
    StaleRead,
    State,
    Unavailable,
    VersionConflict,
    WatchEvent,
    new_request_id,
)
from cairn_client._core import Call, Mode, Route, _give_up
from cairn_client._sse import SSE_LINE_BYTES_MAX, SseParser, WatchPosition, decode_event
from cairn_client.errors import error_from_response


def _error(status: int, body: str) -> CairnError:
    return error_from_response(status, body.encode())


@pytest.mark.parametrize(
    ("code", "status", "cls"),
    [
        ("invalid_request", 400, InvalidRequest),
        ("version_conflict", 409, VersionConflict),
        ("no_leader", 503, NoLeader),
        ("stale_read", 503, StaleRead),
        ("overloaded", 503, Overloaded),
        ("outcome_unknown", 504, OutcomeUnknown),
    ],
)
def test_each_code_is_its_class_with_status_and_message(
    code: str, status: int, cls: type[CairnError]
) -> None:
    err = _error(status, f'{{"error":{{"code":"{code}","message":"m","extra":1}}}}')
    assert type(err) is cls
    assert (err.code, err.status, err.message, err.details) == (code, status, "m", {"extra": 1})
    assert str(err) == f"{code}: m"


@pytest.mark.parametrize(
    ("code", "status", "bases"),
    [
        ("invalid_request", 400, (ValueError,)),
        ("not_found", 404, (LookupError,)),
        ("version_conflict", 409, (Conflict,)),
        ("key_forgotten", 409, (Conflict,)),
        ("key_revoked", 409, (Conflict,)),
        ("stale_write", 409, (Conflict,)),
        ("invalid_transition", 409, (Conflict,)),
        ("no_leader", 503, (Unavailable,)),
        ("stale_read", 503, (Unavailable,)),
        ("overloaded", 503, (Unavailable,)),
        ("unauthenticated", 401, (AccessError,)),
        ("permission_denied", 403, (AccessError,)),
        ("actor_mismatch", 403, (AccessError,)),
    ],
)
def test_codes_group_under_bases_that_say_what_to_do(
    code: str, status: int, bases: tuple[type[Exception], ...]
) -> None:
    err = _error(status, f'{{"error":{{"code":"{code}","message":"m"}}}}')
    assert isinstance(err, (CairnError, *bases)), type(err)
    assert all(isinstance(err, base) for base in bases), type(err)
    assert err.status == status
    assert err.is_transient is isinstance(err, Unavailable)
    groups = (Conflict, Unavailable, AccessError)
    assert sum(isinstance(err, group) for group in groups) <= 1


def test_a_connection_failure_is_unavailable_and_an_unknown_outcome_is_not() -> None:
    assert isinstance(ConnectionFailed("http://h:1", "refused", sent=False), Unavailable)
    assert not isinstance(OutcomeUnknown("lost"), Unavailable)


def test_details_become_typed_attributes() -> None:
    tombstone = (
        '{"id":"t1","key":"k","actor":"a","reason":"wrong","value_hash":null,'
        '"forgotten_at":10,"version":3,"generation":1,"revision":42}'
    )
    forgotten = _error(
        409, f'{{"error":{{"code":"key_forgotten","message":"m","tombstone":{tombstone}}}}}'
    )
    assert isinstance(forgotten, KeyForgotten)
    assert forgotten.tombstone is not None
    assert (forgotten.tombstone.id, forgotten.tombstone.revision) == ("t1", 42)
    revoked = _error(
        409,
        '{"error":{"code":"key_revoked","message":"m","rendered":"[k] [REVOKED] x",'
        '"revocation":{"actor":"a","reason":"r","revoked_at":7,"version":2},"op_index":1}}',
    )
    assert isinstance(revoked, KeyRevoked)
    assert (revoked.rendered, revoked.op_index) == ("[k] [REVOKED] x", 1)
    assert revoked.revocation is not None
    assert revoked.revocation.version == 2
    denied = _error(
        403,
        '{"error":{"code":"permission_denied","message":"m","permission":"write","key":"k"}}',
    )
    assert isinstance(denied, PermissionDenied)
    assert (denied.permission, denied.key) == (Permission.WRITE, "k")


def test_mistyped_details_do_not_hide_the_error() -> None:
    err = _error(409, '{"error":{"code":"version_conflict","message":"m","current_version":"5"}}')
    assert isinstance(err, VersionConflict)
    assert err.current_version is None


def test_bodies_that_are_not_cairn_errors_are_http_status_errors() -> None:
    gateway = _error(502, "<html>Bad Gateway</html>")
    assert isinstance(gateway, HttpStatusError)
    assert (gateway.status, gateway.body, gateway.is_transient) == (
        502,
        "<html>Bad Gateway</html>",
        True,
    )
    assert not gateway.may_have_applied
    unknown_code = _error(418, '{"error":{"code":"teapot","message":"m"}}')
    assert isinstance(unknown_code, HttpStatusError)
    assert not unknown_code.is_transient
    long = _error(500, "x" * 2000)
    assert isinstance(long, HttpStatusError)
    assert len(long.body) == 513


def test_retry_classification_matches_the_rust_client() -> None:
    refused = ConnectionFailed("http://h:1", "refused", sent=False)
    reset = ConnectionFailed("http://h:1", "reset", sent=True)
    unknown = OutcomeUnknown("lost", details={"request_id": "r1"})
    assert (refused.is_transient, refused.may_have_applied) == (True, False)
    assert (reset.is_transient, reset.may_have_applied) == (True, True)
    assert (unknown.is_transient, unknown.may_have_applied, unknown.request_id) == (
        True,
        True,
        "r1",
    )
    conflict = _error(409, '{"error":{"code":"version_conflict","message":"m"}}')
    assert (conflict.is_transient, conflict.may_have_applied) == (False, False)


def test_an_unknown_outcome_reads_code_then_message_once() -> None:
    """``str(err)`` is ``"<code>: <message>"``: the node's own ``outcome_unknown`` is not
    wrapped in a second one, and a lost connection is named by its own code."""
    write = Call("POST", Route.LEADER, ("v1", "write"), Mode.MUTATION, 1.0, request_id="r1")
    from_node = OutcomeUnknown("outcome unknown: not applied within 5000 ms")
    given_up = _give_up(write, from_node, may_have_applied=True)
    assert isinstance(given_up, OutcomeUnknown)
    assert str(given_up) == "outcome_unknown: outcome unknown: not applied within 5000 ms"
    assert given_up.request_id == "r1"
    reset = ConnectionFailed("http://h:1", "reset", sent=True)
    given_up = _give_up(write, reset, may_have_applied=True)
    assert isinstance(given_up, OutcomeUnknown)
    assert str(given_up) == "outcome_unknown: transport: http://h:1: reset"
    assert given_up.request_id == "r1"
    # A membership or principal change carries no request_id: the state tells.
    join = Call("POST", Route.LEADER, ("cluster", "join"), Mode.ADMIN, 1.0)
    given_up = _give_up(join, reset, may_have_applied=True)
    assert isinstance(given_up, OutcomeUnknown)
    assert given_up.request_id is None, "SPEC: null for a request sent without one"
    assert str(given_up).endswith("read the state to learn whether it was applied")
    refused = ConnectionFailed("http://h:1", "refused", sent=False)
    assert _give_up(join, refused, may_have_applied=False) is refused


def test_a_request_id_that_is_null_or_missing_is_none() -> None:
    from_node = _error(504, '{"error":{"code":"outcome_unknown","message":"m","request_id":null}}')
    assert isinstance(from_node, OutcomeUnknown)
    assert from_node.request_id is None
    assert OutcomeUnknown("lost").request_id is None


def test_a_transport_failure_of_a_read_never_may_have_applied() -> None:
    read = ConnectionFailed("http://h:1", "reset", sent=True, read_only=True)
    assert (read.sent, read.may_have_applied, read.is_transient) == (True, False, True)


@pytest.mark.parametrize("method", ["read", "write"])
def test_a_connection_cut_after_sending_applied_nothing_only_for_a_read(
    method: str, connect: Callable[..., Cairn]
) -> None:
    """A node that takes the request and closes the connection without an answer: the
    request was sent, but a read changes nothing, so only the write may have applied."""
    with _hang_up_server() as endpoint:
        client = connect([endpoint], actor="a", retry=RetryPolicy(retries_max=0))
        if method == "write":
            with pytest.raises(OutcomeUnknown) as unknown:
                client.write("k", 1)
            assert unknown.value.may_have_applied
            return
        with pytest.raises(ConnectionFailed) as failed:
            client.read("k")
        assert failed.value.sent is True
        assert failed.value.may_have_applied is False


@contextmanager
def _hang_up_server() -> Iterator[str]:
    """A loopback server that reads each request and closes without answering."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.recv(65536)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        listener.close()


def test_backoff_is_exponential_capped_and_jittered() -> None:
    policy = RetryPolicy(retries_max=9, backoff_ms_min=10, backoff_ms_max=100)
    for attempt in range(1, 65):
        ceiling = min(10 << min(attempt - 1, 20), 100)
        assert ceiling / 2000 <= policy.backoff(attempt) <= ceiling / 1000


def test_request_ids_are_128_bit_hex_led_by_the_time_in_milliseconds() -> None:
    before = time.time_ns() // 1_000_000
    first, second = new_request_id(), new_request_id()
    for request_id in (first, second):
        assert len(request_id) == 32
        assert int(request_id, 16) >= 0
        assert before <= int(request_id[:12], 16) < before + 60_000
    assert first != second
    assert first[:12] <= second[:12]


def test_sse_events_split_across_chunks_are_parsed() -> None:
    parser = SseParser()
    assert parser.push(b": keepalive\n\nda") == []
    assert parser.push(b'ta: {"a":') == []
    assert parser.push(b"1}\r\n\r\nevent: change\ndata:x\ndata: y\n\n") == ['{"a":1}', "x\ny"]
    with pytest.raises(DecodeError):
        SseParser().push(b"a" * (SSE_LINE_BYTES_MAX + 1))


def test_watch_payloads_are_events_or_raised_errors() -> None:
    event = decode_event(
        '{"revision":7,"key":"k","kind":"forgotten","state":"forgotten",'
        '"version":2,"generation":1,"forget_epoch":2}'
    )
    assert (event.revision, event.kind, event.state) == (7, EventKind.FORGOTTEN, State.FORGOTTEN)
    with pytest.raises(InvalidRequest):
        decode_event('{"error":{"code":"invalid_request","message":"bad prefix"}}')
    with pytest.raises(DecodeError):
        decode_event("not json")


def _event(revision: int, key: str, version: int = 1) -> WatchEvent:
    return WatchEvent(
        revision=revision,
        key=key,
        kind=EventKind.WRITTEN,
        state=State.ACTIVE,
        version=version,
        generation=1,
        forget_epoch=0,
    )


def test_a_resumed_watch_skips_what_it_delivered_at_the_resume_revision() -> None:
    position = WatchPosition(5)
    position.remember(_event(5, "a"))
    position.remember(_event(7, "b"))
    # Reopened at 7 (a batch's events share it): b was delivered, c was not.
    assert position.resume_from == 7
    assert position.already_delivered(_event(5, "a"))
    assert position.already_delivered(_event(7, "b"))
    assert not position.already_delivered(_event(7, "c"))
    assert not position.already_delivered(_event(8, "b", version=2))
