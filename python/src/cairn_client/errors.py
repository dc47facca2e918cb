"""Every way a cairn call can fail: one exception class per error code of SPEC §5 and §8
(``api/src/error.rs``), plus the failures only a client can see, as the Rust client's
``ClientError`` has them (``client/src/error.rs``).

Every exception is a ``CairnError`` with ``code`` (the SPEC code, or a client-side name such
as ``transport``), ``status`` (the HTTP status, ``None`` for client-side failures),
``message`` and ``details`` (the other fields of the error body). ``str(err)`` is
``"<code>: <message>"``. No exception ever carries the bearer token: messages come from the
node, which never echoes it, or name what was wrong without quoting it.

``OutcomeUnknown`` is never folded into a failure: the mutation may or may not have been
applied, and retrying with the same ``request_id`` is the only safe way to find out.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ValidationError

from .models import Permission, Revocation, Served, Tombstone

__all__ = [
    "AccessError",
    "ActorMismatch",
    "CairnError",
    "Conflict",
    "ConnectionFailed",
    "DecodeError",
    "HttpStatusError",
    "Internal",
    "InvalidInput",
    "InvalidRequest",
    "InvalidTransition",
    "KeyForgotten",
    "KeyRevoked",
    "NoLeader",
    "NotFound",
    "OutcomeUnknown",
    "Overloaded",
    "PermissionDenied",
    "RequestIdReused",
    "SessionRegression",
    "StaleRead",
    "StaleWrite",
    "TooLarge",
    "Unauthenticated",
    "Unavailable",
    "VersionConflict",
    "error_from_body",
    "error_from_response",
]

_Model = TypeVar("_Model", bound=BaseModel)

# Longest slice of a non-JSON error body kept in HttpStatusError.
_BODY_EXCERPT_MAX = 512


class CairnError(Exception):
    """Base of every cairn failure."""

    code: ClassVar[str] = "error"
    status_default: ClassVar[int | None] = None
    transient: ClassVar[bool] = False
    """Trying again (elsewhere or later) may succeed."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = self.status_default if status is None else status
        self.details: dict[str, Any] = dict(details or {})

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def __repr__(self) -> str:
        name = type(self).__name__
        return f"{name}(code={self.code!r}, status={self.status}, message={self.message!r})"

    @property
    def is_transient(self) -> bool:
        """``True`` when trying again (elsewhere, or later) may succeed."""
        return self.transient

    @property
    def may_have_applied(self) -> bool:
        """``True`` when the request may have been applied although no answer arrived."""
        return False

    @property
    def op_index(self) -> int | None:
        """Index of the failing operation when the request was a batch."""
        return _detail_int(self.details, "op_index")

    @property
    def after_op_index(self) -> int | None:
        """In a batch refused on a state an earlier op of it made: that op's index."""
        return _detail_int(self.details, "after_op_index")


class Conflict(CairnError):
    """409: the key's (or cluster's) state refused the operation; nothing changed. Base of
    ``VersionConflict``, ``KeyForgotten``, ``KeyRevoked``, ``StaleWrite`` and
    ``InvalidTransition``."""

    status_default = 409


class Unavailable(CairnError):
    """The cluster could not serve the call now; trying again (elsewhere or later) may
    succeed. Base of ``NoLeader``, ``StaleRead``, ``Overloaded`` and ``ConnectionFailed``.
    A mutation that may have been applied is ``OutcomeUnknown`` instead, never one of
    these."""

    transient = True


class AccessError(CairnError):
    """401 or 403 (SPEC §8): the token proves no principal, or its grants do not cover
    the operation. Base of ``Unauthenticated``, ``PermissionDenied`` and
    ``ActorMismatch``."""


class _FieldRefusal(CairnError):
    """A refusal that names the request's ``field``, and for a size out of bounds its
    ``limit`` and ``size``."""

    @property
    def field(self) -> str | None:
        value = self.details.get("field")
        return value if isinstance(value, str) else None

    @property
    def limit(self) -> int | None:
        return _detail_int(self.details, "limit")

    @property
    def size(self) -> int | None:
        return _detail_int(self.details, "size")


class InvalidRequest(_FieldRefusal, ValueError):
    """400: the request was malformed or violated a limit (``field`` names it; ``limit`` and
    ``size`` for a size out of bounds)."""

    code = "invalid_request"
    status_default = 400


class NotFound(CairnError, LookupError):
    """404: the key (or tombstone id, principal, node) does not exist."""

    code = "not_found"
    status_default = 404

    @property
    def key(self) -> str | None:
        value = self.details.get("key")
        return value if isinstance(value, str) else None

    @property
    def served(self) -> Served | None:
        """How the read that found the key absent was served (``read`` and ``history``):
        an absence on a follower is only as recent as its ``applied_index``."""
        return _detail_model(self.details, "served", Served)


class VersionConflict(Conflict):
    """409: ``expected_version`` did not match ``current_version``."""

    code = "version_conflict"

    @property
    def current_version(self) -> int | None:
        return _detail_int(self.details, "current_version")


class KeyForgotten(Conflict):
    """409: the key is forgotten; writing needs ``clear_tombstone``. ``tombstone`` says
    who forgot it, when and why."""

    code = "key_forgotten"

    @property
    def tombstone(self) -> Tombstone | None:
        return _detail_model(self.details, "tombstone", Tombstone)


class KeyRevoked(Conflict):
    """409: the key is revoked; writing needs ``override_revocation``. ``rendered`` is the
    deterrent line to show (SPEC §4), ``revocation`` who revoked it and why."""

    code = "key_revoked"

    @property
    def revocation(self) -> Revocation | None:
        return _detail_model(self.details, "revocation", Revocation)

    @property
    def rendered(self) -> str | None:
        value = self.details.get("rendered")
        return value if isinstance(value, str) else None


class StaleWrite(Conflict):
    """409: the key was forgotten, revoked or re-created after ``based_on_revision``
    (at ``fence_revision``)."""

    code = "stale_write"

    @property
    def based_on_revision(self) -> int | None:
        return _detail_int(self.details, "based_on_revision")

    @property
    def fence_revision(self) -> int | None:
        return _detail_int(self.details, "fence_revision")


class InvalidTransition(Conflict):
    """409: the operation is not allowed in the key's (or cluster's) state."""

    code = "invalid_transition"


class TooLarge(_FieldRefusal):
    """413: a value or request body over its limit, or a key's 65th stale flag (a key,
    reason or list over its limit is ``InvalidRequest``, with the same ``field``, ``limit``
    and ``size``)."""

    code = "too_large"
    status_default = 413


class RequestIdReused(CairnError):
    """422: the ``request_id`` was already used for a different payload."""

    code = "request_id_reused"
    status_default = 422

    @property
    def request_id(self) -> str | None:
        value = self.details.get("request_id")
        return value if isinstance(value, str) else None


class NoLeader(Unavailable):
    """503: no leader is known (election in progress, or no quorum)."""

    code = "no_leader"
    status_default = 503

    @property
    def leader_id(self) -> int | None:
        return _detail_int(self.details, "leader_id")


class StaleRead(Unavailable):
    """503: the node could not serve the read at the requested freshness."""

    code = "stale_read"
    status_default = 503

    @property
    def applied_index(self) -> int | None:
        """When the node had not applied a revision in time: the index it had applied."""
        return _detail_int(self.details, "applied_index")

    @property
    def awaited_index(self) -> int | None:
        """When the node had not applied a revision in time: the one it waited for (a
        ``min_revision``, or the commit index of a read token)."""
        return _detail_int(self.details, "awaited_index")


class Overloaded(Unavailable):
    """503: the node's write queue is full; nothing was proposed."""

    code = "overloaded"
    status_default = 503


class OutcomeUnknown(CairnError):
    """The mutation may or may not have been applied: retry it with ``request_id`` (the
    node answers the original result, or applies it once). ``request_id`` is ``None`` for
    a request sent without one (a membership or principal change): only reading the state
    tells whether it was applied."""

    code = "outcome_unknown"
    status_default = 504
    transient = True

    @property
    def request_id(self) -> str | None:
        return _detail_str(self.details, "request_id")

    @property
    def may_have_applied(self) -> bool:
        return True


class Unauthenticated(AccessError):
    """401: a missing, malformed, unknown or deleted token."""

    code = "unauthenticated"
    status_default = 401


class PermissionDenied(AccessError):
    """403: no grant of the principal covers ``permission`` on ``key``."""

    code = "permission_denied"
    status_default = 403

    @property
    def permission(self) -> Permission | None:
        value = self.details.get("permission")
        try:
            return Permission(value)
        except ValueError:
            return None

    @property
    def key(self) -> str | None:
        value = self.details.get("key")
        return value if isinstance(value, str) else None


class ActorMismatch(AccessError):
    """403: the request's ``actor`` is not the authenticated principal."""

    code = "actor_mismatch"
    status_default = 403

    @property
    def actor(self) -> str | None:
        """The actor the request named."""
        return _detail_str(self.details, "actor")

    @property
    def principal(self) -> str | None:
        """The name of the principal the token authenticated."""
        return _detail_str(self.details, "principal")


class Internal(CairnError):
    """500: the node failed internally (storage or Raft)."""

    code = "internal"
    status_default = 500


# --- failures only a client sees ------------------------------------------------------------


class ConnectionFailed(Unavailable):
    """The node could not be reached, or the connection broke (``sent``: the request may
    have reached the node before the failure). ``may_have_applied`` is ``sent`` for a
    request that changes something, and always ``False`` for one that changes nothing
    (``read_only``: a read, a status, a watch).

    ``tried``: the endpoints a call over several tried, none answering, ``endpoint`` last;
    the message then says so, with ``tried_note`` (where the endpoints came from) after
    them, so that it does not read as if only the last node was asked."""

    code = "transport"

    def __init__(
        self,
        endpoint: str,
        message: str,
        *,
        sent: bool,
        read_only: bool = False,
        tried: Sequence[str] = (),
        tried_note: str = "",
    ) -> None:
        text = f"{endpoint}: {message}"
        if tried:
            note = f" ({tried_note})" if tried_note else ""
            text = f"no node answered at {', '.join(tried)}{note}; last: {text}"
        details: dict[str, Any] = {"endpoint": endpoint}
        if tried:
            details["tried"] = list(tried)
        super().__init__(text, details=details)
        self.endpoint = endpoint
        self.reason = message
        """What happened at ``endpoint``."""
        self.tried = tuple(tried)
        self.sent = sent
        self.read_only = read_only

    @property
    def may_have_applied(self) -> bool:
        return self.sent and not self.read_only


class HttpStatusError(CairnError):
    """A non-success HTTP answer without a cairn error body (e.g. a proxy's 502)."""

    code = "http_status"

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"{status}: {body}", status=status, details={"body": body})
        self.body = body

    @property
    def is_transient(self) -> bool:
        # A gateway-style failure: the node process is not answering.
        return self.status is not None and 502 <= self.status <= 504

    @property
    def may_have_applied(self) -> bool:
        return self.status == 504


class DecodeError(CairnError):
    """A success answer that does not decode as the expected type."""

    code = "decode"


class SessionRegression(CairnError):
    """Every answer was older than what the session already saw, even after retrying
    linearizably at the leader."""

    code = "session_regression"

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message, details={"key": key} if key is not None else None)
        self.key = key


class InvalidInput(CairnError, ValueError):
    """Local input rejected before anything was sent (a bad endpoint, token, option,
    session token or argument)."""

    code = "invalid_input"

    @classmethod
    def from_validation(cls, what: str, err: ValidationError) -> InvalidInput:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in problem['loc']) or what}: {problem['msg']}"
            for problem in err.errors(include_input=False, include_url=False)
        )
        return cls(f"{what}: {problems}")


_BY_CODE: dict[str, type[CairnError]] = {
    cls.code: cls
    for cls in (
        InvalidRequest,
        NotFound,
        VersionConflict,
        KeyForgotten,
        KeyRevoked,
        StaleWrite,
        InvalidTransition,
        TooLarge,
        RequestIdReused,
        NoLeader,
        StaleRead,
        Overloaded,
        OutcomeUnknown,
        Unauthenticated,
        PermissionDenied,
        ActorMismatch,
        Internal,
    )
}


def error_from_response(status: int, body: bytes) -> CairnError:
    """The exception for a non-success answer: its code's class when the body is a cairn
    error, else ``HttpStatusError``."""
    err = error_from_body(body, status=status)
    return err if err is not None else HttpStatusError(status, _excerpt(body))


def error_from_body(body: bytes | str, *, status: int | None = None) -> CairnError | None:
    """The exception of a cairn error body (``{"error": {"code", "message", ...details}}``,
    also sent inside a watch stream before it closes); ``None`` for anything else."""
    parsed = _error_body(body)
    if parsed is None:
        return None
    code, message, details = parsed
    cls = _BY_CODE.get(code)
    return cls(message, status=status, details=details) if cls is not None else None


def _error_body(body: bytes | str) -> tuple[str, str, dict[str, Any]] | None:
    try:
        parsed = json.loads(body)
    except ValueError:
        return None
    error = parsed.get("error") if isinstance(parsed, dict) else None
    if not isinstance(error, dict):
        return None
    code, message = error.get("code"), error.get("message")
    if not isinstance(code, str) or not isinstance(message, str):
        return None
    details = {name: value for name, value in error.items() if name not in ("code", "message")}
    return code, message, details


def _excerpt(body: bytes) -> str:
    text = body.decode("utf-8", errors="replace").strip()
    if len(text) > _BODY_EXCERPT_MAX:
        return text[:_BODY_EXCERPT_MAX] + "…"
    return text


def _detail_int(details: dict[str, Any], name: str) -> int | None:
    """A missing or mistyped detail is ``None``: the error (code and message) still holds
    without it."""
    value = details.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _detail_str(details: dict[str, Any], name: str) -> str | None:
    value = details.get(name)
    return value if isinstance(value, str) else None


def _detail_model(details: dict[str, Any], name: str, model: type[_Model]) -> _Model | None:
    value = details.get(name)
    if value is None:
        return None
    try:
        return model.model_validate(value)
    except ValidationError:
        return None
