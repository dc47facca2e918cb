"""What the sync and async transports share about httpx: how an ``Exchange`` becomes an
``httpx.Request``, the client options, and how httpx failures become ``ConnectionFailed``."""

from __future__ import annotations

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
            timeout=httpx.Timeout(effect.timeout, connect=core.settings.timeouts.connect),
        )
    except httpx.InvalidURL as err:
        raise InvalidInput(f"{effect.method} {'/'.join(effect.path)[:80]}: {err}") from err


TRANSPORT_ERRORS = (httpx.RequestError, OSError)
"""What a failed exchange raises: httpx's errors, and the ``ssl.SSLError`` (an ``OSError``)
a TLS 1.3 server's alert raises on the first read, which httpx lets through."""


def connection_failed(base: str, err: Exception, *, read_only: bool) -> ConnectionFailed:
    """The failure of an exchange (or of a read of its open stream); ``read_only``: of a
    request that changes nothing, which therefore cannot have applied anything."""
    detail = str(err) or "no detail"
    return ConnectionFailed(
        base,
        f"{type(err).__name__}: {detail}",
        sent=not isinstance(err, _NOT_SENT),
        read_only=read_only,
    )
