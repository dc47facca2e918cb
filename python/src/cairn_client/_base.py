"""What ``Cairn`` and ``AsyncCairn`` share besides the operations: the constructor and its
settings, the session, ``pinned()`` and the ``repr`` that never shows the token."""

from __future__ import annotations

import copy
import os
import ssl
from collections.abc import Sequence
from typing import TypeVar

from ._config import (
    CONNECT_TIMEOUT_DEFAULT,
    DISCOVERY_TIMEOUT_DEFAULT,
    REQUEST_TIMEOUT_DEFAULT,
    WATCH_SILENCE_TIMEOUT_DEFAULT,
    CertPair,
    RetryPolicy,
    Settings,
    Timeouts,
    resolve_settings,
)
from ._core import ConsistencyLike, Core
from .errors import InvalidInput
from .models import Consistency
from .session import Session

__all__ = ["ClientBase"]

Self = TypeVar("Self", bound="ClientBase")


class ClientBase:
    """Settings, routing state and session of a client (see ``Cairn`` for the arguments)."""

    def __init__(
        self,
        endpoints: Sequence[str] | str | None = None,
        *,
        token: str | None = None,
        token_file: str | os.PathLike[str] | None = None,
        actor: str | None = None,
        session: Session | None = None,
        ca_cert: str | os.PathLike[str] | None = None,
        verify: ssl.SSLContext | bool = True,
        client_cert: str | os.PathLike[str] | CertPair | None = None,
        timeout: float = REQUEST_TIMEOUT_DEFAULT,
        connect_timeout: float = CONNECT_TIMEOUT_DEFAULT,
        discovery_timeout: float = DISCOVERY_TIMEOUT_DEFAULT,
        watch_silence_timeout: float = WATCH_SILENCE_TIMEOUT_DEFAULT,
        call_timeout: float | None = None,
        retry: RetryPolicy | None = None,
        consistency: ConsistencyLike | None = None,
        max_staleness_ms: int | None = None,
    ) -> None:
        if session is not None and not isinstance(session, Session):
            raise InvalidInput(f"session: expected a Session, not {type(session).__name__}")
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise InvalidInput(f"retry: expected a RetryPolicy, not {type(retry).__name__}")
        settings = resolve_settings(
            endpoints=endpoints,
            token=token,
            token_file=token_file,
            actor=actor,
            ca_cert=ca_cert,
            verify=verify,
            client_cert=client_cert,
            timeouts=Timeouts.of_options(
                timeout=timeout,
                connect_timeout=connect_timeout,
                discovery_timeout=discovery_timeout,
                watch_silence_timeout=watch_silence_timeout,
                call_timeout=call_timeout,
            ),
            retry=retry or RetryPolicy(),
            consistency=_consistency_name(consistency),
            max_staleness_ms=max_staleness_ms,
        )
        self._core = Core(settings, session)
        self._owns_http = True
        self._connect(settings)

    def _connect(self, settings: Settings) -> None:
        """Makes the HTTP client of this transport (sync or async)."""
        raise NotImplementedError

    @property
    def endpoints(self) -> list[str]:
        """The normalized endpoints (``http[s]://host:port``) this client sends to: a
        pinned client's one node."""
        return list(self._core.nodes.endpoints)

    @property
    def session(self) -> Session | None:
        """The session this client records what it sees in (``None``: no session rules)."""
        return self._core.session

    @property
    def has_token(self) -> bool:
        return self._core.settings.token is not None

    @property
    def retry_policy(self) -> RetryPolicy:
        return self._core.settings.retry

    def pinned(self: Self, endpoint: str) -> Self:
        """A client that sends every call to ``endpoint`` (followers forward what they
        cannot serve). It shares this client's connections and session; closing it leaves
        them open."""
        twin = copy.copy(self)
        twin._core = self._core.pinned(endpoint)
        twin._owns_http = False
        return twin

    def __repr__(self) -> str:
        token = "<redacted>" if self.has_token else None
        return (
            f"{type(self).__name__}(endpoints={self.endpoints!r}, token={token}, "
            f"session={self.session!r})"
        )


def _consistency_name(consistency: ConsistencyLike | None) -> str | None:
    if consistency is None:
        return None
    try:
        return Consistency(consistency).value
    except ValueError:
        raise InvalidInput(
            f"consistency {consistency!r}: expected linearizable, bounded or any"
        ) from None
