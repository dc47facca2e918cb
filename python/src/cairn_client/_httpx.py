"""What the sync and async transports share about httpx: how an ``Exchange`` becomes an
``httpx.Request``, the client options, and how httpx failures become ``ConnectionFailed``."""

from __future__ import annotations

import ssl
from typing import Any

import httpx

from ._config import Settings
from ._core import Core, Exchange
from .errors import ConnectionFailed, InvalidInput

# Failures that happen before any byte of the request left this process.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, httpx.UnsupportedProtocol)


def client_options(settings: Settings) -> dict[str, Any]:
    """Options of the ``httpx.Client``/``AsyncClient`` of a cairn client."""
    return {
        "verify": settings.ssl_context,
        # Nodes are direct peers: an HTTP(S)_PROXY meant for the internet must not sit
        # between an agent and its cluster.
        "trust_env": False,
        "follow_redirects": False,
        "timeout": httpx.Timeout(settings.timeouts.request, connect=settings.timeouts.connect),
    }


def build_request(
    http: httpx.Client | httpx.AsyncClient, core: Core, effect: Exchange
) -> httpx.Request:
    """The request of one exchange. The token goes in a header here, never into the
    effect, so a logged or printed effect cannot leak it. A URL httpx cannot build (a
    path or query argument too long for it) is ``InvalidInput``: nothing was sent."""
    try:
        return http.build_request(
            effect.method,
            effect.url,
            params=list(effect.params),
            content=effect.body,
            headers=core.headers(effect.body is not None),
            timeout=_attempt_timeout(effect.timeout, core.settings.timeouts.connect),
        )
    except httpx.InvalidURL as err:
        raise InvalidInput(f"{effect.method} {'/'.join(effect.path)[:80]}: {err}") from err


def _attempt_timeout(attempt: float | None, connect: float) -> httpx.Timeout:
    """The bounds of one attempt. Setting up its connection (TCP, and the TLS handshake,
    which a paused node's kernel lets begin and nothing answers) is part of the attempt,
    so it is bounded by it too: a call timeout's share holds over HTTPS as over HTTP."""
    return httpx.Timeout(attempt, connect=connect if attempt is None else min(connect, attempt))


TRANSPORT_ERRORS = (httpx.RequestError, OSError)
"""What a failed exchange raises: httpx's errors, and the ``ssl.SSLError`` (an ``OSError``)
a TLS 1.3 server's alert raises on the first read, which httpx lets through."""


def connection_failed(base: str, err: Exception, *, read_only: bool) -> ConnectionFailed:
    """The failure of an exchange (or of a read of its open stream); ``read_only``: of a
    request that changes nothing, which therefore cannot have applied anything. A scheme or
    CA that does not fit the node is named, as the Rust client names it. An answer that is
    not HTTP came from no cairn node's HTTP server, and a handshake the node ended over the
    client's certificate never let it read the request (which TLS 1.3 lets the client send
    before the node's verdict arrives): in both, nothing was applied."""
    detail = str(err) or "no detail"
    # h11's refusal of an answer that is not an HTTP response ("illegal status line"...);
    # a connection closed without an answer says otherwise, and may follow an apply.
    not_http = isinstance(err, httpx.RemoteProtocolError) and detail.startswith("illegal")
    reason = _tls_reason(err)
    hint = _NOT_HTTP_HINT if not_http else _TLS_HINTS.get(reason or "")
    unapplied = not_http or reason in _CLIENT_CERT_REASONS
    return ConnectionFailed(
        base,
        f"{type(err).__name__}: {detail}" + (f"; {hint}" if hint else ""),
        sent=not (isinstance(err, _NOT_SENT) or unapplied),
        read_only=read_only,
    )


_NOT_HTTP_HINT = (
    "the node did not answer in HTTP: if it serves HTTPS, give an https:// endpoint and the "
    "cluster's CA (ca_cert or CAIRN_CACERT); nothing was applied"
)
# OpenSSL's reason for each mistake it reports during the handshake.
_TLS_HINTS = {
    "WRONG_VERSION_NUMBER": (
        "the node did not answer the TLS handshake: if it serves plain HTTP, give an "
        "http:// endpoint"
    ),
    "CERTIFICATE_VERIFY_FAILED": (
        "the node's certificate does not verify against the CA given (ca_cert or "
        "CAIRN_CACERT; with neither, the system's trust store): is it this cluster's CA, and "
        "does the certificate name this host?"
    ),
    "TLSV13_ALERT_CERTIFICATE_REQUIRED": (
        "the node asks for a client certificate: give client_cert (or CAIRN_CERT and "
        "CAIRN_KEY); nothing was applied"
    ),
}
# The node's alerts about the client certificate it was given. A certificate from another
# CA of the same name fails the check of its signature (decrypt error).
_CLIENT_CERT_REFUSED = (
    "SSLV3_ALERT_BAD_CERTIFICATE",
    "SSLV3_ALERT_UNSUPPORTED_CERTIFICATE",
    "SSLV3_ALERT_CERTIFICATE_REVOKED",
    "SSLV3_ALERT_CERTIFICATE_EXPIRED",
    "SSLV3_ALERT_CERTIFICATE_UNKNOWN",
    "TLSV1_ALERT_UNKNOWN_CA",
    "TLSV1_ALERT_DECRYPT_ERROR",
)
_TLS_HINTS.update(
    dict.fromkeys(
        _CLIENT_CERT_REFUSED,
        "the node refused the client certificate: is it signed by the CA the node trusts "
        "for clients (--tls-client-ca), and still valid? nothing was applied",
    )
)
_CLIENT_CERT_REASONS = frozenset(("TLSV13_ALERT_CERTIFICATE_REQUIRED", *_CLIENT_CERT_REFUSED))


def _tls_reason(err: BaseException) -> str | None:
    """OpenSSL's reason for the first TLS error in ``err``'s chain of causes, if any."""
    cause: BaseException | None = err
    while cause is not None:
        if isinstance(cause, ssl.SSLError):
            return cause.reason
        cause = cause.__cause__ or cause.__context__
    return None
