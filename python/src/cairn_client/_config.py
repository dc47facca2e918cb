"""Client settings: endpoints, bearer token, TLS, timeouts, retry policy and read defaults,
from arguments first and then the environment the ``cairn`` CLI reads (``CAIRN_ENDPOINTS``,
``CAIRN_TOKEN``, ``CAIRN_TOKEN_FILE``, ``CAIRN_CACERT``, ``CAIRN_CERT``, ``CAIRN_KEY``,
``CAIRN_ACTOR``)."""

from __future__ import annotations

import os
import random
import ssl
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from .errors import InvalidInput

__all__ = ["BearerToken", "RetryPolicy", "Timeouts", "new_request_id", "normalize_endpoint"]

DEFAULT_ENDPOINTS = ("http://127.0.0.1:7401", "http://127.0.0.1:7402", "http://127.0.0.1:7403")
"""The local cluster of ``scripts/cluster up``, as the CLI defaults to."""

RETRIES_MAX_DEFAULT = 8
BACKOFF_MS_MIN_DEFAULT = 50
# Long enough to span a Raft election.
BACKOFF_MS_MAX_DEFAULT = 2_000
# Doublings of the backoff before the ceiling applies anyway.
_BACKOFF_DOUBLINGS_MAX = 20

CONNECT_TIMEOUT_DEFAULT = 2.0
# Covers a leader's commit plus the node's bounded min_revision wait (2 s by default).
REQUEST_TIMEOUT_DEFAULT = 10.0
# GET /cluster/status is local to the node: one slower than this is no useful leader hint.
DISCOVERY_TIMEOUT_DEFAULT = 2.0
# Three of the node's 5 s keep-alive comments on an idle watch stream (docs/api.md).
WATCH_SILENCE_TIMEOUT_DEFAULT = 15.0


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a call is retried: at most ``retries_max`` retries after
    the first attempt, with jittered exponential backoff between the bounds."""

    retries_max: int = RETRIES_MAX_DEFAULT
    backoff_ms_min: int = BACKOFF_MS_MIN_DEFAULT
    backoff_ms_max: int = BACKOFF_MS_MAX_DEFAULT

    def __post_init__(self) -> None:
        """Whole numbers, 0 or more, the minimum at most the maximum: else
        ``InvalidInput`` naming the field."""
        for name in ("retries_max", "backoff_ms_min", "backoff_ms_max"):
            value = getattr(self, name)
            if not _is_count(value):
                raise InvalidInput(f"RetryPolicy {name}: {value!r}; expected an int, 0 or more")
        if self.backoff_ms_min > self.backoff_ms_max:
            raise InvalidInput(
                f"RetryPolicy backoff_ms_min {self.backoff_ms_min} is more than backoff_ms_max "
                f"{self.backoff_ms_max}"
            )

    def backoff(self, attempt: int) -> float:
        """Seconds before retry number ``attempt`` (1-based): exponential, capped, and
        jittered to between half and all of it, so clients that failed together do not
        retry together."""
        doublings = min(max(attempt - 1, 0), _BACKOFF_DOUBLINGS_MAX)
        ceiling = max(min(self.backoff_ms_min * (1 << doublings), self.backoff_ms_max), 1)
        return random.randint(ceiling // 2, ceiling) / 1000  # noqa: S311 (jitter, not a secret)


@dataclass(frozen=True)
class Timeouts:
    """Seconds. ``request`` bounds each read and write of one attempt; a watch instead
    waits up to ``watch_silence`` for each byte (the node's keep-alives included) before
    it takes its stream as broken."""

    connect: float = CONNECT_TIMEOUT_DEFAULT
    request: float = REQUEST_TIMEOUT_DEFAULT
    discovery: float = DISCOVERY_TIMEOUT_DEFAULT
    watch_silence: float = WATCH_SILENCE_TIMEOUT_DEFAULT
    call: float | None = None
    """A whole call: its attempts, leader discovery and the backoff between them
    (``None``: the retry count alone bounds it)."""

    @classmethod
    def of_options(
        cls,
        *,
        timeout: object,
        connect_timeout: object,
        discovery_timeout: object,
        watch_silence_timeout: object,
        call_timeout: object,
    ) -> Timeouts:
        """The timeouts of a client's options, each checked: seconds, more than 0 and at
        most a year (``call_timeout`` may be ``None``), else ``InvalidInput`` naming it.
        Checked here, as both transports would otherwise fail later, each its own way.
        Discovery takes at most ``timeout``: a caller who bounds an attempt at a node bounds
        the question which node leads too."""
        request = _seconds("timeout", timeout)
        return cls(
            connect=_seconds("connect_timeout", connect_timeout),
            request=request,
            discovery=min(_seconds("discovery_timeout", discovery_timeout), request),
            watch_silence=_seconds("watch_silence_timeout", watch_silence_timeout),
            call=None if call_timeout is None else _seconds("call_timeout", call_timeout),
        )


# Longest timeout accepted: a year. From about 1e10 s the sync transport's socket
# deadline overflows (OverflowError) while the async one waits: both refuse it alike here.
_SECONDS_MAX = 365 * 24 * 3600.0


def _seconds(name: str, value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not 0 < value <= _SECONDS_MAX  # NaN fails every comparison
    ):
        raise InvalidInput(
            f"{name}: {value!r}; expected seconds, a number more than 0 and at most "
            f"{_SECONDS_MAX:.0f} (a year)"
        )
    return float(value)


def _is_count(value: object) -> bool:
    """An ``int`` (not a ``bool``), 0 or more."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class BearerToken:
    """A principal's token, sent as ``Authorization: Bearer TOKEN``. Its ``repr`` and
    ``str`` are redacted and no error quotes it."""

    __slots__ = ("_token",)

    def __init__(self, token: str) -> None:
        if not isinstance(token, str):
            raise InvalidInput(f"token: expected a str, not {type(token).__name__}")
        token = token.strip()
        if not token:
            raise InvalidInput("token: empty")
        if not all("!" <= char <= "~" for char in token):
            raise InvalidInput(
                "token: contains a space, a control or a non-ASCII character "
                "(expected cairn_ and base64url)"
            )
        self._token = token

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> BearerToken:
        """The token in the file at ``path``; errors name the file, never its content."""
        _check_path("token_file", path)
        try:
            text = Path(path).read_text()
        except (OSError, UnicodeDecodeError) as err:
            raise InvalidInput(f"token file {path}: {type(err).__name__}") from None
        try:
            return cls(text)
        except InvalidInput as err:
            raise InvalidInput(f"token file {path}: {err.message}") from None

    def header(self) -> str:
        return f"Bearer {self._token}"

    def __repr__(self) -> str:
        return "BearerToken(<redacted>)"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BearerToken) and other._token == self._token

    def __hash__(self) -> int:
        return hash(self._token)


def normalize_endpoint(endpoint: str, scheme: str = "http") -> str:
    """``host:port`` or ``http[s]://host[:port][/]`` → ``http[s]://host[:port]``; a bare
    ``host:port`` gets ``scheme``. A path (``/v1``), a query or a fragment is refused: the
    client adds the API's paths itself, so ``http://host:7401/v1`` would ask for
    ``/v1/v1/read`` and every key would look absent. A bare host needs its port."""
    if not isinstance(endpoint, str):
        raise InvalidInput(f"endpoint {endpoint!r}: expected a str, not {type(endpoint).__name__}")
    endpoint = endpoint.strip()
    bare = "://" not in endpoint
    with_scheme = f"{scheme}://{endpoint}" if bare else endpoint
    try:
        parts = urlsplit(with_scheme)
        port = parts.port  # raises ValueError for a port that is not a number
    except ValueError as err:
        raise InvalidInput(f"endpoint {endpoint!r}: {err}") from None
    if parts.scheme not in ("http", "https"):
        raise InvalidInput(f"endpoint {endpoint!r}: expected http:// or https://")
    if not parts.hostname:
        raise InvalidInput(f"endpoint {endpoint!r}: no host")
    if parts.username is not None or parts.password is not None:
        # Never echoed: the message names the host only.
        raise InvalidInput(
            f"endpoint for {parts.hostname}: credentials in the address are not used "
            "(a token goes in CAIRN_TOKEN or token=)"
        )
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise InvalidInput(
            f"endpoint {endpoint!r}: a node's address takes no path, query or fragment "
            "(give http[s]://host:port)"
        )
    if bare and port is None:
        raise InvalidInput(f"endpoint {endpoint!r}: no port (give host:port)")
    return with_scheme.rstrip("/")


def new_request_id() -> str:
    """A fresh 128-bit ``request_id``, 32 hex characters: the Unix time in milliseconds (48
    bits) then 80 random bits, as the Rust client makes them. Ids in increasing order are
    cheaper for every replica to record (they are inserted next to the previous ones)."""
    unix_ms = time.time_ns() // 1_000_000
    return f"{unix_ms & 0xFFFF_FFFF_FFFF:012x}{os.urandom(10).hex()}"


CertPair = tuple[str | os.PathLike[str], str | os.PathLike[str]]


@dataclass(frozen=True)
class Settings:
    """Everything a client needs, resolved from arguments and environment."""

    endpoints: tuple[str, ...]
    token: BearerToken | None
    actor: str | None
    ssl_context: ssl.SSLContext | bool
    timeouts: Timeouts = field(default_factory=Timeouts)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    consistency: str | None = None
    max_staleness_ms: int | None = None
    endpoints_defaulted: bool = False
    """The endpoints are ``DEFAULT_ENDPOINTS``, as none were given and ``CAIRN_ENDPOINTS``
    is unset: an error that no node answered says so."""


def resolve_settings(
    *,
    endpoints: Sequence[str] | str | None,
    token: str | None,
    token_file: str | os.PathLike[str] | None,
    actor: str | None,
    ca_cert: str | os.PathLike[str] | None,
    verify: ssl.SSLContext | bool,
    client_cert: str | os.PathLike[str] | CertPair | None,
    timeouts: Timeouts,
    retry: RetryPolicy,
    consistency: str | None,
    max_staleness_ms: int | None,
    env: Mapping[str, str] | None = None,
) -> Settings:
    environ = os.environ if env is None else env
    ssl_context, has_ca = _ssl_context(ca_cert, verify, client_cert, environ)
    scheme = "https" if has_ca else "http"
    listed = _endpoint_list(endpoints, environ)
    if not listed:
        raise InvalidInput("no endpoints given")
    if actor is not None and not isinstance(actor, str):
        raise InvalidInput(f"actor: expected a str, not {type(actor).__name__}")
    if max_staleness_ms is not None and not _is_count(max_staleness_ms):
        raise InvalidInput(f"max_staleness_ms: {max_staleness_ms!r}; expected an int, 0 or more")
    return Settings(
        endpoints=tuple(normalize_endpoint(endpoint, scheme) for endpoint in listed),
        token=_token(token, token_file, environ),
        actor=actor if actor is not None else (environ.get("CAIRN_ACTOR") or None),
        ssl_context=ssl_context,
        timeouts=timeouts,
        retry=retry,
        consistency=consistency,
        max_staleness_ms=max_staleness_ms,
        endpoints_defaulted=endpoints is None and "CAIRN_ENDPOINTS" not in environ,
    )


def _endpoint_list(endpoints: Sequence[str] | str | None, env: Mapping[str, str]) -> list[str]:
    """The endpoints given, else ``CAIRN_ENDPOINTS``, else the local nodes. An empty entry
    (``CAIRN_ENDPOINTS=""``, a trailing comma) is kept, so ``normalize_endpoint`` refuses
    it as the CLI does, instead of quietly using fewer nodes than were named."""
    if endpoints is None:
        if "CAIRN_ENDPOINTS" not in env:
            return list(DEFAULT_ENDPOINTS)
        endpoints = env["CAIRN_ENDPOINTS"]
    if isinstance(endpoints, str):
        endpoints = endpoints.split(",")
    elif isinstance(endpoints, bytes | bytearray) or not isinstance(endpoints, Iterable):
        raise InvalidInput(
            f"endpoints: expected a list of str or a comma-separated str, not "
            f"{type(endpoints).__name__}"
        )
    return list(endpoints)


def _token(
    token: str | None, token_file: str | os.PathLike[str] | None, env: Mapping[str, str]
) -> BearerToken | None:
    """The first found wins: the ``token`` argument, ``token_file``, ``CAIRN_TOKEN``, then
    ``CAIRN_TOKEN_FILE`` (empty variables count as unset)."""
    if token is not None:
        return BearerToken(token)
    if token_file is not None:
        return BearerToken.from_file(token_file)
    if env.get("CAIRN_TOKEN"):
        try:
            return BearerToken(env["CAIRN_TOKEN"])
        except InvalidInput as err:
            raise InvalidInput(f"CAIRN_TOKEN: {err.message}") from None
    if env.get("CAIRN_TOKEN_FILE"):
        return BearerToken.from_file(env["CAIRN_TOKEN_FILE"])
    return None


def _ssl_context(
    ca_cert: str | os.PathLike[str] | None,
    verify: ssl.SSLContext | bool,
    client_cert: str | os.PathLike[str] | CertPair | None,
    env: Mapping[str, str],
) -> tuple[ssl.SSLContext | bool, bool]:
    """The TLS context and whether a cluster CA was given (then a bare ``host:port`` means
    ``https://``). A CA file is trusted alone, as the Rust client trusts only it."""
    if not isinstance(verify, bool | ssl.SSLContext):
        raise InvalidInput(
            f"verify: expected True, False or an ssl.SSLContext, not {type(verify).__name__} "
            "(a CA file goes in ca_cert)"
        )
    if ca_cert is not None:
        _check_path("ca_cert", ca_cert)
    if client_cert is not None:
        _check_cert(client_cert)
    ca = ca_cert if ca_cert is not None else (env.get("CAIRN_CACERT") or None)
    cert = client_cert if client_cert is not None else _env_cert_pair(env)
    if isinstance(verify, ssl.SSLContext):
        context, has_ca = verify, True
    elif ca is not None:
        context, has_ca = _trusting_only(ca), True
    elif cert is not None:
        context, has_ca = ssl.create_default_context(), False
    else:
        return verify, False
    if not verify and not isinstance(verify, ssl.SSLContext):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if cert is not None:
        _load_client_cert(context, cert)
    return context, has_ca


def _check_path(name: str, path: object) -> None:
    if not isinstance(path, str | os.PathLike):
        raise InvalidInput(
            f"{name}: expected a path (str or os.PathLike), not {type(path).__name__}"
        )


def _check_cert(cert: object) -> None:
    """A client certificate file, or a ``(cert, key)`` pair of files."""
    if isinstance(cert, tuple) and len(cert) == 2:
        for path in cert:
            _check_path("client_cert", path)
    elif not isinstance(cert, str | os.PathLike):
        raise InvalidInput(
            f"client_cert: expected a path or a (cert, key) pair of paths, not "
            f"{type(cert).__name__}"
        )


def _env_cert_pair(env: Mapping[str, str]) -> CertPair | None:
    cert, key = env.get("CAIRN_CERT"), env.get("CAIRN_KEY")
    if cert and key:
        return cert, key
    if cert or key:
        raise InvalidInput("CAIRN_CERT and CAIRN_KEY go together")
    return None


def _trusting_only(ca_file: str | os.PathLike[str]) -> ssl.SSLContext:
    try:
        return ssl.create_default_context(cafile=os.fspath(ca_file))
    except (OSError, ssl.SSLError) as err:
        raise InvalidInput(f"CA certificate {os.fspath(ca_file)}: {type(err).__name__}") from None


def _load_client_cert(context: ssl.SSLContext, cert: str | os.PathLike[str] | CertPair) -> None:
    cert_file, key_file = cert if isinstance(cert, tuple) else (cert, None)
    # `load_cert_chain` says neither which file is missing: each is checked first.
    for what, path in (("client certificate", cert_file), ("client key", key_file)):
        if path is not None and not os.path.isfile(path):
            raise InvalidInput(f"{what} {os.fspath(path)}: no such file")
    try:
        context.load_cert_chain(os.fspath(cert_file), os.fspath(key_file) if key_file else None)
    except (OSError, ssl.SSLError) as err:
        # The key's bytes never reach the message: only the file names and the error kind.
        if isinstance(err, ssl.SSLError) and err.reason == "KEY_VALUES_MISMATCH":
            raise InvalidInput(
                f"client certificate {os.fspath(cert_file)}: the private key is not the "
                "certificate's (client_cert, or CAIRN_CERT and CAIRN_KEY, must be one pair)"
            ) from None
        fault = _pem_fault(cert_file, key_file)
        raise InvalidInput(
            fault or f"client certificate {os.fspath(cert_file)}: {type(err).__name__}"
        ) from None


def _pem_fault(
    cert_file: str | os.PathLike[str], key_file: str | os.PathLike[str] | None
) -> str | None:
    """Which file lacks what ``load_cert_chain`` needs of it (files given the wrong way
    round), told by PEM markers alone: the bytes never reach a message."""
    if b"-----BEGIN CERTIFICATE-----" not in _bytes_of(cert_file):
        return (
            f"client certificate {os.fspath(cert_file)}: no PEM certificate (expected "
            "-----BEGIN CERTIFICATE-----)"
        )
    key_path = cert_file if key_file is None else key_file
    # PKCS#8, PKCS#1 (RSA) and SEC1 (EC) markers all end so.
    if b"PRIVATE KEY-----" not in _bytes_of(key_path):
        what = "client certificate" if key_file is None else "client key"
        return f"{what} {os.fspath(key_path)}: no PEM private key (PKCS#8, PKCS#1 or SEC1)"
    return None


def _bytes_of(path: str | os.PathLike[str]) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError:
        return b""
