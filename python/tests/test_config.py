"""Client settings: endpoints from arguments or ``CAIRN_ENDPOINTS``, HTTPS with the cluster
CA and client certificates on a real TLS cluster, and local input refused before sending."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from cairn_client import Cairn, ConnectionFailed, InvalidInput, State
from cairn_client.testing import LocalCluster


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
    with pytest.raises(InvalidInput, match="grants"):
        client.create_principal("p", [{"prefix": "", "permissions": ["fly"]}])
    with pytest.raises(InvalidInput, match="consistency"):
        Cairn(["127.0.0.1:9"], consistency="eventual")


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
