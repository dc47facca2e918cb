"""Client settings: endpoints from arguments or ``CAIRN_ENDPOINTS``, HTTPS with the cluster
CA and client certificates on a real TLS cluster, and local input refused before sending."""

from __future__ import annotations

import re
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from cairn_client import (
    AsyncCairn,
    Cairn,
    ConnectionFailed,
    InvalidInput,
    RetryPolicy,
    State,
    WriteRequest,
    _config,
)
from cairn_client.testing import LocalCluster, find_node_binary


def test_endpoints_are_normalized_like_the_rust_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CAIRN_ENDPOINTS", raising=False)
    with Cairn(["127.0.0.1:7401", " http://h:1/ ", "https://h:2"]) as client:
        assert client.endpoints == ["http://127.0.0.1:7401", "http://h:1", "https://h:2"]
    with Cairn() as default:
        assert default.endpoints == [f"http://127.0.0.1:{7400 + i}" for i in (1, 2, 3)]
    monkeypatch.setenv("CAIRN_ENDPOINTS", "a:1, http://b:2")
    with Cairn() as from_env:
        assert from_env.endpoints == ["http://a:1", "http://b:2"]
        pinned = from_env.pinned("b:2")
        assert pinned.endpoints == ["http://b:2"]
        assert "http://a:1" not in repr(pinned)


@pytest.mark.parametrize("endpoints", [[], ["ftp://h:1"], ["http://:1"], ["h:port"]])
def test_bad_endpoints_are_refused(endpoints: list[str]) -> None:
    with pytest.raises(InvalidInput):
        Cairn(endpoints)


@pytest.mark.parametrize(
    ("endpoint", "reason"),
    [
        ("http://h:1/v1", "no path"),
        ("h:1/v1", "no path"),
        ("http://h:1/?a=b", "no path, query"),
        ("http://h:1#x", "fragment"),
        ("h", "no port"),
        ("http://u:secret@h:1", "credentials in the address"),
    ],
)
def test_an_endpoint_with_a_path_or_without_a_port_is_refused(endpoint: str, reason: str) -> None:
    """``http://host:7401/v1`` would ask for ``/v1/v1/read``, and every key would look
    absent; a bare host would mean port 80."""
    with pytest.raises(InvalidInput, match=reason) as refused:
        Cairn([endpoint])
    assert "secret" not in str(refused.value)


@pytest.mark.parametrize("variable", ["", "a:1,", "a:1,,b:2", " "])
def test_an_empty_entry_of_cairn_endpoints_is_refused_as_the_cli_refuses_it(
    variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CAIRN_ENDPOINTS", variable)
    with pytest.raises(InvalidInput, match="endpoint '': no host"):
        Cairn()


def test_bad_arguments_are_refused_before_anything_is_sent(
    connect: Callable[..., Cairn],
) -> None:
    # Port 9 (discard) is never a cairn node: a request that left would fail differently.
    client = connect(["127.0.0.1:9"], actor="a")
    with pytest.raises(InvalidInput, match="expected_version"):
        client.write("k", 1, expected_version=-1)
    with pytest.raises(InvalidInput, match="consistency"):
        client.read("k", consistency="eventual")
    with pytest.raises(InvalidInput, match="not JSON"):
        client.write("k", float("nan"))
    # json.dumps would turn these keys into strings: what is read back would differ.
    for value in ({1: "x"}, {"t": True, None: 1}, [{"ok": {(1, 2): 3}}]):
        with pytest.raises(InvalidInput, match="an object key must be a str"):
            client.write("k", value)
    with pytest.raises(InvalidInput, match="grants"):
        client.create_principal("p", [{"prefix": "", "permissions": ["fly"]}])
    with pytest.raises(InvalidInput, match="consistency"):
        Cairn(["127.0.0.1:9"], consistency="eventual")


@pytest.mark.parametrize(
    ("option", "value"),
    [
        # clear_tombstone="yes" would un-forget a forgotten key; True would be version 1.
        ("clear_tombstone", "yes"),
        ("override_revocation", "on"),
        ("override_revocation", 1),
        ("expected_version", True),
        ("expected_version", "2"),
        ("based_on_revision", 1.0),
        ("source", b"agent"),
        ("anchors", [b"topic:db"]),
    ],
)
def test_request_options_of_the_wrong_type_are_refused_not_converted(
    option: str, value: Any, connect: Callable[..., Cairn]
) -> None:
    client = connect(["127.0.0.1:9"], actor="a")
    with pytest.raises(InvalidInput, match=f"write: {option}"):
        client.write("k", 1, **{option: value})


def test_arguments_of_the_wrong_type_are_invalid_input_before_anything_is_sent(
    connect: Callable[..., Cairn],
) -> None:
    client = connect(["127.0.0.1:9"], actor="a")
    with pytest.raises(InvalidInput, match="write: key"):
        client.write(b"key", 1)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="read: max_staleness_ms"):
        client.read("k", max_staleness_ms="5")  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="batch: ops"):
        client.batch(None)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="tombstone_id"):
        client.tombstone(None)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match="name"):
        client.rotate_token(None)  # type: ignore[arg-type]
    for prefix in (5, b"live/"):
        # Not the prefix "5": a watch of a prefix that is not a str.
        with pytest.raises(InvalidInput, match="watch: prefix"), client.watch(prefix):  # type: ignore[arg-type]
            pass
    with pytest.raises(InvalidInput, match="from_revision"), client.watch("", from_revision=True):
        pass
    # An enum option still takes its value's name, as the guide shows.
    batch_op = WriteRequest(key="k", value=1, clear_tombstone=True)
    assert batch_op.clear_tombstone is True


@pytest.mark.parametrize("cls", [Cairn, AsyncCairn])
@pytest.mark.parametrize(
    "option", ["timeout", "connect_timeout", "discovery_timeout", "watch_silence_timeout"]
)
@pytest.mark.parametrize("value", [-1, 0, float("inf"), float("nan"), 1e10, True, "5", None])
def test_timeouts_are_seconds_above_zero_checked_by_the_constructor(
    cls: type[Cairn | AsyncCairn], option: str, value: Any
) -> None:
    """Unchecked, each transport failed later its own way: ValueError, OverflowError, or
    a retried OutcomeUnknown saying a write that never left may have applied."""
    with pytest.raises(InvalidInput, match=f"^invalid_input: {option}: "):
        cls(["127.0.0.1:9"], **{option: value})


@pytest.mark.parametrize("value", [-1, 0, float("inf"), "x", True])
def test_a_call_timeout_is_none_or_seconds_above_zero(value: Any) -> None:
    with pytest.raises(InvalidInput, match=r"^invalid_input: call_timeout: "):
        Cairn(["127.0.0.1:9"], call_timeout=value)
    Cairn(
        ["127.0.0.1:9"], call_timeout=None, timeout=0.5, watch_silence_timeout=365 * 86400
    ).close()


@pytest.mark.parametrize("cls", [Cairn, AsyncCairn])
@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"token": 123}, "token"),
        ({"token": b"cairn_abc"}, "token"),
        ({"endpoints": [None]}, "endpoint None"),
        ({"endpoints": b"127.0.0.1:7401"}, "endpoints"),
        ({"endpoints": 7401}, "endpoints"),
        ({"token_file": 123}, "token_file"),
        ({"ca_cert": 5}, "ca_cert"),
        ({"client_cert": (1, 2)}, "client_cert"),
        ({"client_cert": 5}, "client_cert"),
        ({"verify": "yes"}, "verify"),  # not a CA file: that is ca_cert
        ({"retry": "x"}, "retry"),
        ({"session": "x"}, "session"),
        ({"actor": 5}, "actor"),
        ({"max_staleness_ms": "5"}, "max_staleness_ms"),
        ({"max_staleness_ms": -1}, "max_staleness_ms"),
    ],
)
def test_constructor_arguments_of_the_wrong_type_are_invalid_input(
    cls: type[Cairn | AsyncCairn], arguments: dict[str, Any], named: str
) -> None:
    arguments.setdefault("endpoints", ["127.0.0.1:9"])
    with pytest.raises(InvalidInput, match=f"^invalid_input: {re.escape(named)}"):
        cls(**arguments)


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"retries_max": -1}, "retries_max"),
        ({"retries_max": 1.5}, "retries_max"),
        ({"backoff_ms_min": True}, "backoff_ms_min"),
        ({"backoff_ms_min": 5000, "backoff_ms_max": 10}, "backoff_ms_min 5000 is more than"),
    ],
)
def test_a_retry_policy_out_of_range_is_invalid_input(fields: dict[str, Any], named: str) -> None:
    with pytest.raises(InvalidInput, match=f"RetryPolicy {named}"):
        RetryPolicy(**fields)
    assert RetryPolicy(retries_max=0, backoff_ms_min=0, backoff_ms_max=0).backoff(1) <= 0.001


def test_https_with_the_cluster_ca_and_a_client_certificate(
    connect: Callable[..., Cairn],
    make_cluster: Callable[..., LocalCluster],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    local = make_cluster(1, tls=True, client_auth=True)
    address = local.node(1).client_addr
    identity = (local.client_cert, local.client_key)
    client = connect([address], actor="a", ca_cert=local.ca_cert, client_cert=identity)
    assert client.endpoints == [f"https://{address}"], "a CA makes bare endpoints https"
    assert client.write("k", "over tls").state == State.ACTIVE
    assert client.read("k").value == "over tls"

    without_identity = connect([address], ca_cert=local.ca_cert, retry=None)
    with pytest.raises(ConnectionFailed):
        without_identity.healthz()
    untrusted = connect([f"https://{address}"])
    with pytest.raises(ConnectionFailed) as refused:
        untrusted.healthz()
    assert refused.value.sent is False, "the handshake failed before the request left"

    monkeypatch.setenv("CAIRN_CACERT", str(local.ca_cert))
    monkeypatch.setenv("CAIRN_CERT", str(local.client_cert))
    monkeypatch.setenv("CAIRN_KEY", str(local.client_key))
    from_env = connect([address])
    assert from_env.healthz().ok is True


def test_unreadable_certificates_are_refused_without_their_content(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="CA certificate"):
        Cairn(["h:1"], ca_cert=tmp_path / "missing-ca.pem")
    cert, key = tmp_path / "client.pem", tmp_path / "client.key"
    cert.write_text("not a certificate")
    key.write_text(
        "-----BEGIN PRIVATE KEY-----\nc2VjcmV0LWtleS1ieXRlcw==\n-----END PRIVATE KEY-----\n"
    )
    with pytest.raises(InvalidInput, match="client certificate") as refused:
        Cairn(["h:1"], client_cert=(cert, key))
    assert "c2VjcmV0" not in str(refused.value)
    # A missing file is named, the key as the key.
    missing_key = tmp_path / "missing.key"
    with pytest.raises(InvalidInput, match=re.escape(f"client key {missing_key}: no such file")):
        Cairn(["h:1"], client_cert=(cert, missing_key))
    with pytest.raises(InvalidInput, match=r"client certificate .*missing\.pem: no such file"):
        Cairn(["h:1"], client_cert=tmp_path / "missing.pem")


def test_certificate_and_key_files_given_the_wrong_way_round_are_named(tmp_path: Path) -> None:
    subprocess.run(
        [find_node_binary(), "certs", "--out", tmp_path, "--nodes", "1"],
        check=True,
        capture_output=True,
    )
    cert, key = tmp_path / "client.pem", tmp_path / "client.key"
    with pytest.raises(InvalidInput, match=re.escape(f"client certificate {key}: no PEM cert")):
        Cairn(["h:1"], ca_cert=tmp_path / "ca.pem", client_cert=(key, key))
    with pytest.raises(InvalidInput, match=re.escape(f"client key {cert}: no PEM private key")):
        Cairn(["h:1"], ca_cert=tmp_path / "ca.pem", client_cert=(cert, cert))


def test_a_client_key_of_another_certificate_is_named(tmp_path: Path) -> None:
    subprocess.run(
        [find_node_binary(), "certs", "--out", tmp_path, "--nodes", "1"],
        check=True,
        capture_output=True,
    )
    other_key = tmp_path / "node-1.key"
    with pytest.raises(InvalidInput, match="the private key is not the certificate's"):
        Cairn(
            ["h:1"], ca_cert=tmp_path / "ca.pem", client_cert=(tmp_path / "client.pem", other_key)
        )


def test_a_short_timeout_bounds_leader_discovery_too() -> None:
    """A node that accepts connections and never answers held the leader lookup for the
    discovery's own 2 s on top of ``timeout``; a caller who bounds an attempt bounds it."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        endpoint = f"127.0.0.1:{silent.getsockname()[1]}"
        with Cairn([endpoint], timeout=0.2, retry=RetryPolicy(retries_max=0)) as client:
            started = time.monotonic()
            with pytest.raises(ConnectionFailed):
                client.read("k")
            took = time.monotonic() - started
    # Discovery (0.2 s) and the attempt itself (0.2 s), not 2 s + 0.2 s.
    assert took < 1.5, took


def _closed_ports(count: int) -> list[str]:
    """Endpoints on 127.0.0.1 where nothing listens (ports the system just handed out and
    took back)."""
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    endpoints = [f"http://127.0.0.1:{sock.getsockname()[1]}" for sock in sockets]
    for sock in sockets:
        sock.close()
    return endpoints


def test_a_call_no_node_answered_names_every_endpoint_it_tried(
    connect: Callable[..., Cairn], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not only the last endpoint: every one tried, and whether they are the built-in
    defaults (no ``endpoints``, ``CAIRN_ENDPOINTS`` unset), the usual cause of a client
    that finds no cluster."""
    monkeypatch.delenv("CAIRN_ENDPOINTS", raising=False)
    endpoints = _closed_ports(3)
    quick = RetryPolicy(retries_max=2, backoff_ms_min=0, backoff_ms_max=0)

    monkeypatch.setattr(_config, "DEFAULT_ENDPOINTS", tuple(endpoints))
    with pytest.raises(ConnectionFailed) as by_default:
        connect(retry=quick).read("k")
    assert by_default.value.tried == tuple(endpoints)
    assert str(by_default.value).startswith(
        f"transport: no node answered at {', '.join(endpoints)} (of the built-in default "
        "endpoints, as CAIRN_ENDPOINTS is unset); last: "
    )

    with pytest.raises(ConnectionFailed) as named:
        connect(endpoints, retry=quick).write("k", 1, actor="a")
    assert named.value.tried == tuple(endpoints)
    assert f"no node answered at {', '.join(endpoints)}; last: " in str(named.value)
    assert "CAIRN_ENDPOINTS" not in str(named.value)
