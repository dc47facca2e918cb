"""The sans-IO core shared by ``Cairn`` and ``AsyncCairn``: every operation, with leader
discovery, retries, ``request_id``s and session checks, written once as a *program*.

A program is a generator that yields effects (``Exchange`` an HTTP request, ``Sleep``,
``ReadChunk``/``CloseStream`` of an open stream) and receives their outcomes; the sync and
async clients only perform effects (``client.py`` with ``httpx.Client``, ``aio.py`` with
``httpx.AsyncClient``). Stream programs (``list_all``, ``watch``) also yield ``Emit(item)``
for each item and ``READY`` once they are open.

The rules are the Rust client's (``client/src/client/``):

- **Leader discovery.** Mutations and linearizable reads go to the leader, found with
  ``GET /cluster/status`` and cached until a call to it fails. Without a known leader a
  call goes to the next endpoint: followers forward, or answer 503 ``no_leader`` (retried).
- **Bounded retries.** At most ``retries_max + 1`` attempts with jittered exponential
  backoff, rotating endpoints; only transient failures are retried (unreachable node,
  ``no_leader``, ``stale_read``, ``overloaded``, ``outcome_unknown``).
- **Exactly-once mutations.** Every mutation carries a ``request_id`` (made here unless the
  caller gave one) and every retry resends the identical bytes. If an attempt may have
  reached the node and no later attempt got a definite answer, the call raises
  ``OutcomeUnknown`` with that id.
- **Reads.** Linearizable reads go to the leader; ``bounded`` and ``any`` reads round-robin
  over the endpoints, and retry at the endpoint after the one that failed.
- **Nodes that do not answer.** An endpoint whose exchange failed at the transport level
  is passed over by spread reads and leader discovery for ``FAILED_ENDPOINT_COOLDOWN``
  (unless every endpoint is), until it answers. Under a call timeout, among several
  endpoints, one attempt of a spread read, of a read or deduplicated mutation sent to the
  leader (an election replaces a paused leader; the retry carries the same request_id),
  and one node's answer to leader discovery each get at most half the time left. A
  paused node accepts connections and answers nothing, so without both it could take
  every call's budget.
- **Sessions.** With a ``Session``, every read sends the session revision as
  ``min_revision`` and is checked against it; an answer older than the session, or the
  ``stale_read`` of a node that has not applied the session revision, is re-read
  linearizably at the leader (at most ``SESSION_RETRIES_MAX`` times), else
  ``SessionRegression``. Any other ``stale_read`` (the caller's own staleness bound or
  ``min_revision``, no quorum) is the answer. A pinned client's re-read goes to its node,
  which relays it to the leader.
- Membership and principal changes are not deduplicated, so they are retried only after
  failures that cannot have reached the node.
"""

from __future__ import annotations

import enum
import json
import threading
import time
from collections import deque
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import count
from typing import Any, Generic, TypeVar
from urllib.parse import quote

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic_core import PydanticSerializationError

from ._config import Settings, new_request_id, normalize_endpoint
from ._sse import SseParser, WatchPosition, decode_event
from .errors import (
    CairnError,
    ConnectionFailed,
    DecodeError,
    InvalidInput,
    NoLeader,
    NotFound,
    OutcomeUnknown,
    SessionRegression,
    StaleRead,
    error_from_response,
)
from .models import (
    AclChanged,
    AuthEnabled,
    BatchOp,
    BatchRequest,
    BatchResult,
    ClusterStatus,
    CompactResponse,
    Consistency,
    CreatedPrincipal,
    CreatePrincipalRequest,
    EnableAuthRequest,
    FlagStaleRequest,
    ForgetRequest,
    Grant,
    Health,
    HistoryRequest,
    HistoryResponse,
    InitRequest,
    ListRequest,
    ListResponse,
    MembershipResponse,
    MutationResult,
    NodeSpec,
    PrincipalList,
    ProbeRequest,
    ProbeResponse,
    ReadRequest,
    ReadResponse,
    RecallRequest,
    RecallResponse,
    Record,
    ReinstateRequest,
    RemoveRequest,
    RevokeRequest,
    RotatedToken,
    SetGrantsRequest,
    State,
    SupersedeRequest,
    Tombstone,
    WatchEvent,
    WhoAmI,
    WriteRequest,
    _Mutation,
    _Read,
    _Request,
)
from .session import Observable, Session

T = TypeVar("T")
R = TypeVar("R", bound=BaseModel)
Q = TypeVar("Q", bound=_Read)
Answer = TypeVar("Answer", bound=Observable)

SESSION_RETRIES_MAX = 2
"""Linearizable re-reads after a stale answer, before giving up with SessionRegression."""
# Compaction snapshots and rewrites RocksDB files; it may take minutes on a big store.
_COMPACT_TIMEOUT = 300.0
# A join waits for the new node to catch up (the node's raft.join_catch_up_timeout_ms,
# 60 s by default), then for its promotion to commit; a removal sent meanwhile waits for
# the join, since the leader makes one membership change at a time.
_MEMBERSHIP_CHANGE_TIMEOUT = 120.0

# --- effects ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Exchange:
    """Send one HTTP request to ``base``. The outcome is a ``Reply`` (any status) or a
    ``ConnectionFailed``. With ``stream``, a 2xx reply carries the open body as
    ``Reply.stream`` instead of reading it."""

    method: str
    base: str
    path: tuple[str, ...]
    params: tuple[tuple[str, str], ...] = ()
    body: bytes | None = None
    timeout: float | None = None
    stream: bool = False
    read_only: bool = False
    """A failure is ``ConnectionFailed`` with ``read_only``: it cannot have applied
    anything."""

    @property
    def url(self) -> str:
        return base_url_with_path(self.base, self.path)


@dataclass(frozen=True)
class Reply:
    status: int
    body: bytes
    stream: Any = None


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass(frozen=True)
class ReadChunk:
    """The next bytes of an open stream: ``b""`` once it ended, or a ``ConnectionFailed``."""

    stream: Any


@dataclass(frozen=True)
class CloseStream:
    stream: Any


@dataclass(frozen=True)
class Emit(Generic[T]):
    """A stream program's next item."""

    item: T


class _Ready(enum.Enum):
    READY = "ready"


READY = _Ready.READY
"""A stream program is open (its watch connected): a ``with`` block may start."""

Effect = Exchange | Sleep | ReadChunk | CloseStream
Program = Generator[Effect, Any, T]
StreamProgram = Generator[Effect | Emit[T] | _Ready, Any, None]


class StreamSteps(Generic[T]):
    """The state of a running stream program, shared by both transports: it hands them
    the effects to perform and keeps what the program emitted, whether it is open
    (``READY``) and whether it ended."""

    def __init__(self, program: StreamProgram[T]) -> None:
        self._program = program
        self.items: deque[T] = deque()
        self.ready = False
        self.done = False

    def advance(self, outcome: Any) -> Effect | None:
        """Sends the outcome of the last effect; the next effect to perform, or ``None``
        when the program emitted an item, opened or ended."""
        try:
            step = self._program.send(outcome)
        except StopIteration:
            self.done = True
            return None
        if isinstance(step, Emit):
            self.items.append(step.item)
            return None
        if step is READY:
            self.ready = True
            return None
        return step

    def stop(self) -> None:
        self.done = True
        self._program.close()


# --- where calls go --------------------------------------------------------------------


class Mode(enum.Enum):
    READ = "read"
    """Side-effect free: retry every transient failure."""
    MUTATION = "mutation"
    """Deduplicated by its request_id: retry every transient failure; an unknown outcome
    is OutcomeUnknown."""
    ADMIN = "admin"
    """Not deduplicated: retry only failures that cannot have reached the node."""
    ONCE = "once"
    """One attempt at one node."""


class Route(enum.Enum):
    LEADER = "leader"
    CURRENT_LEADER = "current_leader"
    """The leader the nodes name now, discovered afresh for every attempt, never the cached
    one: for calls that wait long at the node they reach (membership changes, a reopened
    watch), so a cached leader that stopped answering cannot hold them."""
    SPREAD = "spread"
    """Round-robin over the endpoints, passing over those that failed lately; a retry
    goes to the endpoint after the one that failed."""


@dataclass(frozen=True)
class Call:
    """One request as the retry loop sends it, attempt after attempt."""

    method: str
    route: Route | str  # a str is one endpoint
    path: tuple[str, ...]
    mode: Mode
    timeout: float | None
    body: bytes | None = None
    """Serialized once, so every retry sends the identical payload (the node compares
    payload hashes under one request_id)."""
    params: tuple[tuple[str, str], ...] = ()
    request_id: str | None = None
    stream: bool = False
    read_only: bool = False
    """The request changes nothing at the node (a read, a status, a watch): a transport
    failure of it cannot have applied anything, whatever reached the node."""


FAILED_ENDPOINT_COOLDOWN = 5.0
"""Seconds an endpoint that failed to answer is passed over by spread calls and leader
discovery while another may answer: a paused node accepts connections and holds each
request for a whole attempt timeout, so without this every call would try it in turn."""


class Nodes:
    """The endpoints of a client and what it learned about them."""

    def __init__(self, endpoints: Sequence[str], *, pinned: bool = False) -> None:
        self.endpoints = tuple(endpoints)
        self.pinned = pinned
        """Every call goes to ``endpoints[0]``; no discovery."""
        self._leader: str | None = None
        self._cursor = count()
        # When each endpoint last failed to answer (a transport failure), until it answers.
        self._silent: dict[str, float] = {}
        self._lock = threading.Lock()

    def next_endpoint(self) -> str:
        """The next endpoint in round-robin order that has not failed lately (the next one
        whatever its state when all have)."""
        with self._lock:
            start = next(self._cursor) % len(self.endpoints)
            return self._answering_from(start)

    def endpoint_after(self, endpoint: str) -> str:
        """The endpoint after ``endpoint`` in the list (the first one if it is not listed),
        passing over those that failed lately as ``next_endpoint`` does."""
        at = self.endpoints.index(endpoint) + 1 if endpoint in self.endpoints else 0
        with self._lock:
            return self._answering_from(at % len(self.endpoints))

    def _answering_from(self, start: int) -> str:
        """The first endpoint from index ``start`` on, in circular order, that has not
        failed within ``FAILED_ENDPOINT_COOLDOWN``; ``endpoints[start]`` when every one
        has. The caller holds the lock."""
        if not self._silent:
            return self.endpoints[start]
        n = len(self.endpoints)
        for k in range(n):
            endpoint = self.endpoints[(start + k) % n]
            if not self._failed_within_cooldown(endpoint):
                return endpoint
        return self.endpoints[start]

    def failed_lately(self, endpoint: str) -> bool:
        """Whether ``endpoint`` failed to answer within ``FAILED_ENDPOINT_COOLDOWN``."""
        if not self._silent:
            return False
        with self._lock:
            return self._failed_within_cooldown(endpoint)

    def _failed_within_cooldown(self, endpoint: str) -> bool:
        """``failed_lately``; the caller holds the lock."""
        failed_at = self._silent.get(endpoint)
        return failed_at is not None and time.monotonic() - failed_at < FAILED_ENDPOINT_COOLDOWN

    def failed(self, endpoint: str) -> None:
        """Records that ``endpoint`` did not answer (a transport failure)."""
        with self._lock:
            self._silent[endpoint] = time.monotonic()

    def answered(self, endpoint: str) -> None:
        """Records that ``endpoint`` answered (any HTTP status): it is no longer passed
        over. Without the lock when no endpoint is marked, since every exchange says so."""
        if not self._silent:
            return
        with self._lock:
            self._silent.pop(endpoint, None)

    @property
    def cached_leader(self) -> str | None:
        return self._leader

    def set_leader(self, base: str) -> None:
        self._leader = base

    def forget_leader(self, base: str) -> None:
        """Drops the cached leader if it is still ``base`` (a concurrent call may have
        found a newer one already)."""
        with self._lock:
            if self._leader == base:
                self._leader = None


def base_url_with_path(base: str, path: Sequence[str]) -> str:
    """``base`` with the path segments appended, each percent-encoded."""
    return base + "".join("/" + quote(segment, safe="") for segment in path)


def is_success(status: int) -> bool:
    return 200 <= status < 300


def leader_endpoint(status: ClusterStatus, asked: str) -> str | None:
    """The endpoint of the leader ``status`` names: the asked endpoint itself when it is the
    leader (its advertised address may be a bind address), else the leader's
    ``client_addr`` with the scheme of the asked endpoint."""
    if status.leader_id is None:
        return None
    if status.leader_id == status.node_id:
        return asked
    node = next((node for node in status.nodes if node.id == status.leader_id), None)
    if node is None:
        return None
    scheme = "https" if asked.startswith("https://") else "http"
    try:
        return normalize_endpoint(node.client_addr, scheme)
    except InvalidInput:
        return None


def encode(request: _Request) -> bytes:
    """The request's JSON body, compact, as it goes on the wire (once per call: every retry
    resends these bytes)."""
    try:
        body = request.wire()
        _check_keys(body)
        return json.dumps(body, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
    except (PydanticSerializationError, TypeError, ValueError) as err:
        raise InvalidInput(f"{type(request).__name__} is not JSON: {err}") from None


def _check_keys(body: Any) -> None:
    """Refuses a dict key that is not a ``str``, at any depth: ``json.dumps`` would write
    ``{1: "x"}`` as ``{"1": "x"}`` and ``None`` as ``"null"``, so what is read back would
    not be what was written."""
    pending = [body]
    while pending:
        value = pending.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    kind = type(key).__name__
                    raise TypeError(f"an object key must be a str, not {kind} {key!r}")
                pending.append(item)
        elif isinstance(value, (list, tuple)):
            pending.extend(value)


def decoder(model: type[R]) -> Callable[[Reply], R]:
    """The body of a 2xx answer as ``model``."""

    def decode(reply: Reply) -> R:
        try:
            return model.model_validate_json(reply.body)
        except ValidationError as err:
            raise DecodeError(
                f"{model.__name__}: {err.error_count()} problem(s), first: "
                f"{err.errors(include_input=False)[0]['msg']}"
            ) from None

    return decode


def _text(reply: Reply) -> str:
    try:
        return reply.body.decode()
    except UnicodeDecodeError as err:
        raise DecodeError(f"metrics: {err}") from None


def build(model: type[R], what: str, **fields: Any) -> R:
    """A request model from arguments; bad ones are ``InvalidInput`` naming the field."""
    try:
        return model(**fields)
    except ValidationError as err:
        raise InvalidInput.from_validation(what, err) from None


_BATCH_OP_TYPES = (
    WriteRequest,
    ForgetRequest,
    RevokeRequest,
    ReinstateRequest,
    FlagStaleRequest,
    SupersedeRequest,
)


def _batch_ops(ops: Iterable[BatchOp]) -> list[BatchOp]:
    """``ops`` as a list, each checked to be an operation model: a dict or any other object
    is ``InvalidInput`` naming it, as pydantic cannot tell which operation a dict means."""
    if isinstance(ops, str | bytes | Mapping) or not isinstance(ops, Iterable):
        raise InvalidInput(
            f"batch: ops is a {type(ops).__name__}, not a list of operation models",
            details={"field": "ops"},
        )
    checked = list(ops)
    for index, op in enumerate(checked):
        if not isinstance(op, _BATCH_OP_TYPES):
            raise InvalidInput(
                f"batch: ops[{index}] is a {type(op).__name__}, not an operation model "
                "(WriteRequest, ForgetRequest, RevokeRequest, ReinstateRequest, "
                "FlagStaleRequest or SupersedeRequest)",
                details={"field": f"ops[{index}]"},
            )
    return checked


_GRANTS = TypeAdapter(list[Grant])
_NODES = TypeAdapter(list[NodeSpec])


def _validated(adapter: TypeAdapter[T], what: str, value: Any) -> T:
    try:
        return adapter.validate_python(value)
    except ValidationError as err:
        raise InvalidInput.from_validation(what, err) from None


def _segment(what: str, value: Any) -> str:
    """An argument that goes in the URL path (a tombstone id, a principal's name): a
    ``str``, else ``InvalidInput`` naming it."""
    if not isinstance(value, str):
        raise InvalidInput(f"{what}: expected a str, not {type(value).__name__}")
    return value


def _as_leader_status(reply: Reply) -> ClusterStatus:
    """The status in ``reply`` if its node is the leader; ``NoLeader`` (retried) if not."""
    status = decoder(ClusterStatus)(reply)
    if status.leader_id is None or status.leader_id != status.node_id:
        raise NoLeader(
            f"node {status.node_id} answered as {status.role}, not the leader",
            details={"leader_id": status.leader_id},
        )
    return status


def _exchange_outcome(outcome: Any) -> Reply:
    if isinstance(outcome, ConnectionFailed):
        raise outcome
    if not isinstance(outcome, Reply):
        raise TypeError(f"the driver answered an exchange with {type(outcome).__name__}")
    return outcome


def _deadline(call_timeout: float | None) -> float | None:
    """The ``time.monotonic()`` by which a call starting now must end."""
    return None if call_timeout is None else time.monotonic() + call_timeout


def _give_up(call: Call, last: CairnError, may_have_applied: bool) -> CairnError:
    """The error a call ends with once it stops retrying."""
    if isinstance(last, OutcomeUnknown):
        # Already says so (the node's 504): as it is, not wrapped in a second one.
        if call.request_id is not None and not last.request_id:
            last.details["request_id"] = call.request_id
        return last
    if call.mode is Mode.MUTATION and may_have_applied and call.request_id is not None:
        # The cause, code included, is the message: "outcome_unknown: unavailable: ...".
        return OutcomeUnknown(str(last), details={"request_id": call.request_id})
    if call.mode is Mode.ADMIN and may_have_applied:
        # A membership or principal change carries no request_id: only the state can tell.
        return OutcomeUnknown(
            f"{last}; the request carried no request_id: read the state to learn whether it "
            "was applied"
        )
    return last


GrantLike = Grant | Mapping[str, Any]
NodeLike = NodeSpec | Mapping[str, Any]
StateLike = State | str
ConsistencyLike = Consistency | str


class Core:
    """Settings, routing state and session of one client, and every operation as a
    program. Both clients bind these programs as their methods."""

    def __init__(
        self, settings: Settings, session: Session | None, nodes: Nodes | None = None
    ) -> None:
        self.settings = settings
        self.session = session
        self.nodes = nodes if nodes is not None else Nodes(settings.endpoints)

    def pinned(self, endpoint: str) -> Core:
        """A core that sends every call to ``endpoint``, sharing settings and session."""
        scheme = "https" if self.settings.endpoints[0].startswith("https://") else "http"
        nodes = Nodes([normalize_endpoint(endpoint, scheme)], pinned=True)
        return Core(self.settings, self.session, nodes)

    def headers(self, has_body: bool) -> dict[str, str]:
        """Every attempt, retry and discovery request carries the token: a follower relays
        it to the leader, which authenticates the request again (SPEC §8)."""
        headers = {"authorization": self.settings.token.header()} if self.settings.token else {}
        if has_body:
            headers["content-type"] = "application/json"
        return headers

    # --- the retry loop ----------------------------------------------------------------

    def call(self, call: Call, finish: Callable[[Reply], T]) -> Program[T]:
        """Runs ``call`` with the retry rules of its mode; ``finish`` turns a 2xx reply into
        the result (its failures are retried like the request's own).

        - At most ``retries_max + 1`` attempts, and none begun or waited for past the call
          timeout, when there is one (``Timeouts.call``).
        - A definite answer ends the call at once; only transient failures are retried.
        - A call that gives up after some node answered ends with that answer unless its
          own last failure says more (a mutation that may have been applied)."""
        retries_max = 0 if call.mode is Mode.ONCE else self.settings.retry.retries_max
        deadline = _deadline(self.settings.timeouts.call)
        may_have_applied = False
        retries = 0
        # The last answer a node gave (503 no_leader, overloaded, ...): a call that ends on
        # an unreachable node after another one answered ends with that answer, so
        # ConnectionFailed means no node was reached, whatever the endpoints' order.
        last_answer: CairnError | None = None
        # The node the last attempt failed at: a spread call tries the next one after it.
        failed_at: str | None = None
        # Every endpoint an attempt went to, in the order first tried.
        tried: list[str] = []
        while True:
            base = yield from self.base_after(call.route, failed_at, deadline)
            try:
                within = self._within(call, base, deadline)
                if base not in tried:
                    tried.append(base)
                reply = yield from self.attempt(base, within)
                return finish(reply)
            except CairnError as err:
                # A definite answer is authoritative even after an attempt with an unknown
                # outcome: the retry carried the same request_id, so the node replayed it.
                if not err.is_transient:
                    raise
                if call.route in (Route.LEADER, Route.CURRENT_LEADER):
                    self.nodes.forget_leader(base)
                may_have_applied |= err.may_have_applied
                unsafe_to_retry = call.mode is Mode.ADMIN and err.may_have_applied
                pause = self.settings.retry.backoff(retries + 1)
                out_of_time = deadline is not None and time.monotonic() + pause >= deadline
                if unsafe_to_retry or retries >= retries_max or out_of_time:
                    heard = self._out_of_time(err) if out_of_time else err
                    # A failure that says nothing about the cluster gives way to the last
                    # answer a node gave: one whose request never left, or any transport
                    # failure of a read (which changes nothing). A mutation's request that
                    # may have reached a node says so itself (OutcomeUnknown).
                    says_nothing = isinstance(heard, ConnectionFailed) and (
                        not heard.sent or call.mode is Mode.READ
                    )
                    if says_nothing and last_answer is not None:
                        heard = last_answer
                    final = self._none_answered(
                        call, _give_up(call, heard, may_have_applied), tried
                    )
                    if final is err:
                        raise
                    raise final from err
                if not isinstance(err, ConnectionFailed):
                    last_answer = err
                failed_at = base
            retries += 1
            yield Sleep(pause)

    def _none_answered(self, call: Call, final: CairnError, tried: list[str]) -> CairnError:
        """``final``, or for a call over several endpoints that reached none of them, a
        ``ConnectionFailed`` that says so and names every endpoint it tried (and that
        they are the built-in defaults, when they are): the last endpoint's failure alone
        reads as if only that node was asked."""
        over_several = (
            isinstance(call.route, Route)
            and not self.nodes.pinned
            and len(self.nodes.endpoints) > 1
        )
        if not (over_several and tried and isinstance(final, ConnectionFailed)):
            return final
        note = "of the built-in default endpoints, as CAIRN_ENDPOINTS is unset"
        return ConnectionFailed(
            final.endpoint,
            final.reason,
            sent=final.sent,
            read_only=final.read_only,
            tried=tried,
            tried_note=note if self.settings.endpoints_defaulted else "",
        )

    def _within(self, call: Call, base: str, deadline: float | None) -> Call:
        """``call`` with its attempt cut short at ``deadline``, or halfway there for a call
        that shares its time (``_shares_time``); ``ConnectionFailed`` (not sent) when the
        deadline already passed."""
        if deadline is None:
            return call
        left = deadline - time.monotonic()
        if left <= 0:
            raise self._out_of_time(ConnectionFailed(base, "", sent=False))
        if self._shares_time(call):
            left /= 2
        return replace(call, timeout=left if call.timeout is None else min(call.timeout, left))

    def _shares_time(self, call: Call) -> bool:
        """Whether one attempt of ``call`` gets at most half the time left, so that a node
        that holds requests without answering (a paused process) cannot spend a short call
        budget alone: a spread call (a read any node may serve) among several nodes leaves
        that half to the next node; a read or a deduplicated mutation sent to the leader
        leaves it to the retry, which reaches the leader an election puts in a paused
        one's place (under the same request_id). A membership or principal change, which no
        request_id makes safe to send twice, keeps the whole time."""
        if len(self.nodes.endpoints) < 2:
            return False
        if call.route is Route.SPREAD:
            return True
        to_leader = call.route in (Route.LEADER, Route.CURRENT_LEADER)
        return to_leader and call.mode in (Mode.READ, Mode.MUTATION)

    def _out_of_time(self, err: CairnError) -> CairnError:
        """A transport failure at the call timeout, said as such (an attempt the deadline
        cut short fails as httpx's timeout)."""
        if not isinstance(err, ConnectionFailed):
            return err
        message = f"the call timeout of {self.settings.timeouts.call} s ran out"
        return ConnectionFailed(err.endpoint, message, sent=err.sent, read_only=err.read_only)

    def attempt(self, base: str, call: Call) -> Program[Reply]:
        """One HTTP exchange: the reply when 2xx, its parsed error otherwise."""
        effect = Exchange(
            call.method,
            base,
            call.path,
            call.params,
            call.body,
            call.timeout,
            call.stream,
            call.read_only,
        )
        reply = self._heard_from(base, (yield effect))
        if is_success(reply.status):
            return reply
        raise error_from_response(reply.status, reply.body)

    def _heard_from(self, base: str, outcome: Any) -> Reply:
        """The reply of an exchange with ``base``, recorded in ``nodes``: a transport
        failure has spread calls and leader discovery pass over ``base`` for a while, any
        answer ends that."""
        if isinstance(outcome, ConnectionFailed):
            self.nodes.failed(base)
        elif isinstance(outcome, Reply):
            self.nodes.answered(base)
        return _exchange_outcome(outcome)

    def base_after(
        self, route: Route | str, failed_at: str | None, deadline: float | None = None
    ) -> Program[str]:
        """``base_for``, except that a spread call whose last attempt failed at
        ``failed_at`` goes to the endpoint after it: the shared round-robin cursor alone
        could hand a call's every retry a dead node while concurrent calls take the live
        ones."""
        if route is Route.SPREAD and failed_at is not None and not self.nodes.pinned:
            return self.nodes.endpoint_after(failed_at)
        return (yield from self.base_for(route, deadline))

    def base_for(self, route: Route | str, deadline: float | None = None) -> Program[str]:
        """The endpoint a call on ``route`` goes to now (leader discovery stops at
        ``deadline``)."""
        if isinstance(route, str):
            return route
        if self.nodes.pinned:
            return self.nodes.endpoints[0]
        if route is Route.SPREAD:
            return self.nodes.next_endpoint()
        cached = self.nodes.cached_leader
        if cached is not None and route is Route.LEADER:
            return cached
        # No leader known: any node will forward, or say no_leader (retried).
        found = yield from self.discover_leader(deadline)
        return found if found is not None else self.nodes.next_endpoint()

    def discover_leader(self, deadline: float | None = None) -> Program[str | None]:
        """One pass over the endpoints asking each for the leader, until ``deadline``;
        caches and returns the first leader endpoint reported. Before ``deadline`` a node
        gets at most half the time left, so one that holds the question without answering
        (a paused process) leaves the other half to the nodes after it."""
        for _ in self.nodes.endpoints:
            endpoint = self.nodes.next_endpoint()
            timeout = self.settings.timeouts.discovery
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                timeout = min(timeout, left / 2)
            try:
                status = yield from self.status_at(endpoint, timeout)
            except CairnError:
                continue
            leader = leader_endpoint(status, endpoint)
            # A leader that did not answer lately, named by a node that has not noticed yet
            # (a follower trusts its leader's lease for a while), is passed over: calls sent
            # there would wait a whole attempt for a node that may be paused. With no other
            # leader named, a call goes to a node that relays it or says no_leader.
            if leader is None or (leader != endpoint and self.nodes.failed_lately(leader)):
                continue
            self.nodes.set_leader(leader)
            return leader
        return None

    def status_at(self, endpoint: str, timeout: float) -> Program[ClusterStatus]:
        """One status request, straight to ``endpoint`` (discovery runs inside ``call``,
        so this must not go through it)."""
        call = Call("GET", endpoint, ("cluster", "status"), Mode.ONCE, timeout, read_only=True)
        reply = yield from self.attempt(endpoint, call)
        return decoder(ClusterStatus)(reply)

    def leader_status(self) -> Program[ClusterStatus]:
        """The leader's status, retried like a read (a watch started during an election
        waits for a leader instead of failing at once). Asked of the leader the nodes name
        now; an answer from a node that is not the leader (it stepped down since it was
        named) is retried as ``NoLeader``."""
        call = Call(
            "GET",
            Route.CURRENT_LEADER,
            ("cluster", "status"),
            Mode.READ,
            self.settings.timeouts.request,
            read_only=True,
        )
        return (yield from self.call(call, _as_leader_status))

    # --- mutations ---------------------------------------------------------------------

    def write(
        self,
        key: str,
        value: Any,
        *,
        actor: str | None = None,
        source: str | None = None,
        anchors: Sequence[str] | None = None,
        tags: Sequence[str] | None = None,
        expected_version: int | None = None,
        based_on_revision: int | None = None,
        clear_tombstone: bool = False,
        override_revocation: bool = False,
        reason: str | None = None,
        request_id: str | None = None,
    ) -> Program[MutationResult]:
        """Writes ``value`` (any JSON value) under ``key`` (``POST /v1/write``).

        ``expected_version`` makes it conditional (``0``: the key must be absent);
        ``based_on_revision`` refuses it (``StaleWrite``) if the key was forgotten, revoked
        or re-created after that revision. A forgotten key needs ``clear_tombstone``
        (``KeyForgotten`` otherwise), a revoked one ``override_revocation``
        (``KeyRevoked``). ``anchors`` (``path:``, ``symbol:``, ``tag:``, ``topic:``,
        ``url:``) are what ``recall`` matches."""
        request = build(
            WriteRequest,
            "write",
            key=key,
            actor=_actor_or(actor, self.settings.actor),
            source=source,
            anchors=anchors,
            tags=tags,
            expected_version=expected_version,
            based_on_revision=based_on_revision,
            clear_tombstone=clear_tombstone,
            override_revocation=override_revocation,
            reason=reason,
            request_id=request_id,
            value=value,
        )
        return (yield from self.mutate(request, MutationResult))

    def forget(
        self,
        key: str,
        reason: str,
        *,
        actor: str | None = None,
        expected_version: int | None = None,
        based_on_revision: int | None = None,
        request_id: str | None = None,
    ) -> Program[MutationResult]:
        """Forgets ``key`` (``POST /v1/forget``): the value is gone, a tombstone with
        ``reason`` stays forever (``result.tombstone``; with auth on, ``None`` unless the
        principal may read ``key``), and no write brings the value back unless it clears
        the tombstone. Forgetting a forgotten key answers the same tombstone with
        ``already=True``."""
        request = build(
            ForgetRequest,
            "forget",
            key=key,
            reason=reason,
            actor=_actor_or(actor, self.settings.actor),
            expected_version=expected_version,
            based_on_revision=based_on_revision,
            request_id=request_id,
        )
        return (yield from self.mutate(request, MutationResult))

    def revoke(
        self,
        key: str,
        reason: str,
        *,
        actor: str | None = None,
        expected_version: int | None = None,
        based_on_revision: int | None = None,
        request_id: str | None = None,
    ) -> Program[MutationResult]:
        """Revokes a wrong belief (``POST /v1/revoke``): it stays readable as a warning
        (``[REVOKED] ...``) with ``reason``, until ``reinstate``."""
        request = build(
            RevokeRequest,
            "revoke",
            key=key,
            reason=reason,
            actor=_actor_or(actor, self.settings.actor),
            expected_version=expected_version,
            based_on_revision=based_on_revision,
            request_id=request_id,
        )
        return (yield from self.mutate(request, MutationResult))

    def reinstate(
        self,
        key: str,
        *,
        reason: str | None = None,
        actor: str | None = None,
        expected_version: int | None = None,
        based_on_revision: int | None = None,
        request_id: str | None = None,
    ) -> Program[MutationResult]:
        """Makes a revoked key active again (``POST /v1/reinstate``)."""
        request = build(
            ReinstateRequest,
            "reinstate",
            key=key,
            reason=reason,
            actor=_actor_or(actor, self.settings.actor),
            expected_version=expected_version,
            based_on_revision=based_on_revision,
            request_id=request_id,
        )
        return (yield from self.mutate(request, MutationResult))

    def flag_stale(
        self,
        key: str,
        anchor: str,
        observed_hash: str,
        *,
        actor: str | None = None,
        expected_version: int | None = None,
        based_on_revision: int | None = None,
        request_id: str | None = None,
    ) -> Program[MutationResult]:
        """Flags ``key`` stale because ``anchor`` changed (now hashing to
        ``observed_hash``) since it was written (``POST /v1/flag-stale``); the next write
        clears the flag."""
        request = build(
            FlagStaleRequest,
            "flag_stale",
            key=key,
            anchor=anchor,
            observed_hash=observed_hash,
            actor=_actor_or(actor, self.settings.actor),
            expected_version=expected_version,
            based_on_revision=based_on_revision,
            request_id=request_id,
        )
        return (yield from self.mutate(request, MutationResult))

    def supersede(
        self,
        key: str,
        by: str,
        *,
        reason: str | None = None,
        actor: str | None = None,
        expected_version: int | None = None,
        based_on_revision: int | None = None,
        request_id: str | None = None,
    ) -> Program[MutationResult]:
        """Records that ``by`` replaces ``key`` (``POST /v1/supersede``)."""
        request = build(
            SupersedeRequest,
            "supersede",
            key=key,
            by=by,
            reason=reason,
            actor=_actor_or(actor, self.settings.actor),
            expected_version=expected_version,
            based_on_revision=based_on_revision,
            request_id=request_id,
        )
        return (yield from self.mutate(request, MutationResult))

    def batch(
        self, ops: Iterable[BatchOp], *, request_id: str | None = None
    ) -> Program[BatchResult]:
        """Applies every operation in one Raft entry, or none (``POST /v1/batch``); a
        refusal names the failing ``op_index``. Operations are request models
        (``WriteRequest(key=..., value=..., actor=...)``, ...) without ``request_id``; an
        operation without ``actor`` gets the client's."""
        default_actor = self.settings.actor
        with_actors = [
            op.model_copy(update={"actor": default_actor})
            if op.actor is None and default_actor
            else op
            for op in _batch_ops(ops)
        ]
        request = build(BatchRequest, "batch", ops=with_actors, request_id=request_id)
        return (yield from self.mutate(request, BatchResult))

    def mutate(self, request: _Mutation | BatchRequest, result: type[Answer]) -> Program[Answer]:
        """Sends any mutation: assigns a ``request_id`` if missing, retries under it, and
        records the result in the session."""
        # An explicit id, even an invalid one, goes as given: the node refuses a bad one
        # rather than the call silently running under another.
        request_id = request.request_id if request.request_id is not None else new_request_id()
        request = request.model_copy(update={"request_id": request_id})
        call = Call(
            "POST",
            Route.LEADER,
            ("v1", request.PATH),
            Mode.MUTATION,
            self.settings.timeouts.request,
            body=encode(request),
            request_id=request_id,
        )
        answer = yield from self.call(call, decoder(result))
        self._observe(answer)
        return answer

    # --- reads -------------------------------------------------------------------------

    def read(
        self,
        key: str,
        *,
        consistency: ConsistencyLike | None = None,
        max_staleness_ms: int | None = None,
        min_revision: int | None = None,
    ) -> Program[ReadResponse]:
        """The key's record, ``rendered`` note and where it was served (``POST /v1/read``).
        A forgotten key answers ``state="forgotten"`` with its tombstone and no value; a key
        never written raises ``NotFound``."""
        request = build(
            ReadRequest,
            "read",
            key=key,
            consistency=consistency,
            max_staleness_ms=max_staleness_ms,
            min_revision=min_revision,
        )
        return (yield from self.session_read(request, ReadResponse, absent_key=key))

    def probe(
        self,
        key: str,
        *,
        consistency: ConsistencyLike | None = None,
        max_staleness_ms: int | None = None,
        min_revision: int | None = None,
    ) -> Program[ProbeResponse]:
        """Value record vs retention record of ``key`` on the node that serves the read
        (``POST /v1/probe``; use ``pinned(endpoint)`` to probe one replica)."""
        request = build(
            ProbeRequest,
            "probe",
            key=key,
            consistency=consistency,
            max_staleness_ms=max_staleness_ms,
            min_revision=min_revision,
        )
        return (yield from self.session_read(request, ProbeResponse, absent_key=key))

    def history(
        self,
        key: str,
        *,
        consistency: ConsistencyLike | None = None,
        max_staleness_ms: int | None = None,
        min_revision: int | None = None,
    ) -> Program[HistoryResponse]:
        """The key's events, oldest first (``POST /v1/history``): one per applied change,
        with actor, reason, time and value hash, never a value."""
        request = build(
            HistoryRequest,
            "history",
            key=key,
            consistency=consistency,
            max_staleness_ms=max_staleness_ms,
            min_revision=min_revision,
        )
        return (yield from self.session_read(request, HistoryResponse, absent_key=key))

    def list_page(
        self,
        prefix: str = "",
        *,
        states: Sequence[StateLike] | None = None,
        limit: int | None = None,
        after: str | None = None,
        consistency: ConsistencyLike | None = None,
        max_staleness_ms: int | None = None,
        min_revision: int | None = None,
    ) -> Program[ListResponse]:
        """One page of the keys under ``prefix`` in key order (``POST /v1/list``); pass
        ``next_after`` as ``after`` for the next (``list_all`` does it for you)."""
        request = build(
            ListRequest,
            "list",
            prefix=prefix,
            states=states,
            limit=limit,
            after=after,
            consistency=consistency,
            max_staleness_ms=max_staleness_ms,
            min_revision=min_revision,
        )
        return (yield from self.session_read(request, ListResponse, absent_key=None))

    def list_all(
        self,
        prefix: str = "",
        *,
        states: Sequence[StateLike] | None = None,
        page_size: int | None = None,
        consistency: ConsistencyLike | None = None,
        max_staleness_ms: int | None = None,
    ) -> StreamProgram[Record]:
        """Every record under ``prefix``, page after page (``page_size`` per request)."""
        after: str | None = None
        yield READY
        while True:
            page = yield from self.list_page(
                prefix,
                states=states,
                limit=page_size,
                after=after,
                consistency=consistency,
                max_staleness_ms=max_staleness_ms,
            )
            for item in page.items:
                yield Emit(item)
            if page.next_after is None:
                return
            after = page.next_after

    def recall(
        self,
        cues: Sequence[str] | str,
        *,
        prefix: str | None = None,
        include: Sequence[StateLike] | None = None,
        limit: int | None = None,
        consistency: ConsistencyLike | None = None,
        max_staleness_ms: int | None = None,
        min_revision: int | None = None,
    ) -> Program[RecallResponse]:
        """Notes whose anchors match the cues (``path:src/db/``, ``topic:migrations``, ...),
        revoked warnings included and first among equals (``POST /v1/recall``)."""
        request = build(
            RecallRequest,
            "recall",
            cues=[cues] if isinstance(cues, str) else cues,
            prefix=prefix,
            include=include,
            limit=limit,
            consistency=consistency,
            max_staleness_ms=max_staleness_ms,
            min_revision=min_revision,
        )
        return (yield from self.session_read(request, RecallResponse, absent_key=None))

    def tombstone(
        self,
        tombstone_id: str,
        *,
        consistency: ConsistencyLike | None = None,
        max_staleness_ms: int | None = None,
        min_revision: int | None = None,
    ) -> Program[Tombstone]:
        """A tombstone by id (``GET /v1/tombstones/{id}``); tombstones are kept forever.
        With a session, its revision goes as ``min_revision`` (a replica behind the session
        does not answer 404 for a tombstone the session has seen made), and a node that has
        not applied it is followed by one linearizable read at the leader (through a pinned
        client's node); when the leader cannot answer it, the node's ``StaleRead`` stands (as in
        ``session_read``)."""
        _segment("tombstone_id", tombstone_id)
        options = build(
            _Read,
            "tombstone",
            consistency=consistency,
            max_staleness_ms=max_staleness_ms,
            min_revision=min_revision,
        )
        consistency_used, staleness = self._effective(options)
        min_revision = _max_or_none(min_revision, self._session_revision())
        try:
            return (
                yield from self._tombstone(
                    tombstone_id, consistency_used, staleness, min_revision, Mode.READ
                )
            )
        except StaleRead as stale:
            if not self._behind_the_session(stale):
                raise
            sent_to_the_leader = stale
        try:
            return (
                yield from self._tombstone(
                    tombstone_id, Consistency.LINEARIZABLE, None, min_revision, Mode.ONCE
                )
            )
        except CairnError as err:
            if err.is_transient:
                raise sent_to_the_leader from err
            raise

    def _tombstone(
        self,
        tombstone_id: str,
        consistency_used: Consistency | None,
        staleness: int | None,
        min_revision: int | None,
        mode: Mode,
    ) -> Program[Tombstone]:
        params = [("consistency", consistency_used.value)] if consistency_used else []
        params += [("max_staleness_ms", str(staleness))] if staleness is not None else []
        params += [("min_revision", str(min_revision))] if min_revision is not None else []
        call = Call(
            "GET",
            read_route(consistency_used),
            ("v1", "tombstones", tombstone_id),
            mode,
            self.settings.timeouts.request,
            params=tuple(params),
            read_only=True,
        )
        return (yield from self.call(call, decoder(Tombstone)))

    def watch(
        self, prefix: str | None = None, *, from_revision: int | None = None
    ) -> StreamProgram[WatchEvent]:
        """Changes under ``prefix`` from ``from_revision`` (inclusive) on, in revision order
        (``GET /v1/watch``). Without ``from_revision`` the watch starts after the leader's
        applied index when it opens. A broken stream (a node restarting, a leader change, a
        stream silent for ``watch_silence`` seconds: a stopped node) is reopened at the
        leader the nodes name then, at the last delivered revision, skipping what was
        delivered, with at most ``retries_max`` reconnects in a row without an event.
        ``prefix=None`` (the default) watches every key; any other prefix is a ``str``."""
        if prefix is not None and not isinstance(prefix, str):
            raise InvalidInput(f"watch: prefix: expected a str, not {type(prefix).__name__}")
        if from_revision is not None and (
            isinstance(from_revision, bool)
            or not isinstance(from_revision, int)
            or from_revision < 0
        ):
            raise InvalidInput(
                f"watch: from_revision: {from_revision!r}; expected an int, 0 or more"
            )
        if from_revision is None:
            status = yield from self.leader_status()
            from_revision = status.applied_index + 1
        position = WatchPosition(from_revision)
        stream: Any = yield from self._open_watch(prefix, from_revision, Route.LEADER)
        yield READY
        parser = SseParser()
        reconnects = 0
        last_error: CairnError | None = None
        retry = self.settings.retry
        while True:
            if stream is None:
                if reconnects > retry.retries_max:
                    raise last_error or ConnectionFailed(
                        "watch",
                        f"stream closed {reconnects} times without an event",
                        sent=True,
                        read_only=True,
                    )
                yield Sleep(retry.backoff(reconnects))
                stream = yield from self._open_watch(
                    prefix, position.resume_from, Route.CURRENT_LEADER
                )
                # A partial line from the broken connection must not prefix the new stream.
                parser = SseParser()
                continue
            chunk = yield ReadChunk(stream)
            if isinstance(chunk, ConnectionFailed) or not chunk:
                if isinstance(chunk, ConnectionFailed):
                    # A stream gone silent is a stopped node: the discovery that reopens
                    # the watch passes it over, as it would after a failed call.
                    self.nodes.failed(chunk.endpoint)
                yield CloseStream(stream)
                stream = None
                reconnects += 1
                last_error = chunk if isinstance(chunk, ConnectionFailed) else last_error
                continue
            for payload in parser.push(chunk):
                event = decode_event(payload)
                if position.already_delivered(event):
                    continue
                position.remember(event)
                reconnects = 0
                yield Emit(event)

    def _open_watch(self, prefix: str | None, from_revision: int, route: Route) -> Program[Any]:
        """Opens ``GET /v1/watch`` at the leader on ``route`` (the cached one for a new
        watch, the one the nodes name now when reopening). Every read of the stream waits
        at most ``watch_silence`` seconds: the node sends keep-alives, so a longer silence
        is a stopped node, and the read fails like a broken connection."""
        params = [("from_revision", str(from_revision))]
        params += [("prefix", prefix)] if prefix is not None else []
        call = Call(
            "GET",
            route,
            ("v1", "watch"),
            Mode.READ,
            self.settings.timeouts.watch_silence,
            params=tuple(params),
            stream=True,
            read_only=True,
        )
        return (yield from self.call(call, lambda reply: reply.stream))

    def session_read(
        self, request: Q, result: type[Answer], absent_key: str | None
    ) -> Program[Answer]:
        """A read with the session rules of SPEC §3: send the session revision as
        ``min_revision``, check the answer against the session, and on a stale answer (or a
        node that has not applied the session revision) re-read linearizably at the leader
        (a pinned client's node relays it there).

        The read itself is retried across the nodes as any read is; each re-read at the
        leader is one attempt. A re-read the leader cannot answer (none known, no
        majority, unreachable) ends the read with the answer that sent it there: the
        node's own ``StaleRead``, not the re-read's ``NoLeader``."""
        consistency, staleness = self._effective(request)
        min_revision = request.min_revision
        retries = 0
        # What sent the read to the leader, once it went there.
        sent_to_the_leader: CairnError | None = None
        while True:
            min_revision = _max_or_none(min_revision, self._session_revision())
            request = request.model_copy(
                update={
                    "consistency": consistency,
                    "max_staleness_ms": staleness,
                    "min_revision": min_revision,
                }
            )
            mode = Mode.READ if sent_to_the_leader is None else Mode.ONCE
            try:
                answer = yield from self.query(request, result, mode)
            except CairnError as err:
                if sent_to_the_leader is not None and err.is_transient:
                    raise sent_to_the_leader from err
                stale = self._stale_or_raise(err, absent_key)
            else:
                try:
                    self._check(answer)
                except SessionRegression as regression:
                    stale = regression
                else:
                    self._observe(answer)
                    return answer
            if retries >= SESSION_RETRIES_MAX:
                raise stale
            retries += 1
            if sent_to_the_leader is None:
                sent_to_the_leader = stale
            consistency, staleness = Consistency.LINEARIZABLE, None

    def query(self, request: _Read, result: type[R], mode: Mode) -> Program[R]:
        call = Call(
            "POST",
            read_route(request.consistency),
            ("v1", request.PATH),
            mode,
            self.settings.timeouts.request,
            body=encode(request),
            read_only=True,
        )
        return (yield from self.call(call, decoder(result)))

    def _effective(self, request: _Read) -> tuple[Consistency | None, int | None]:
        """The request's consistency and staleness bound, else the client's defaults. A
        staleness bound without any consistency named means ``bounded`` (the node would
        otherwise serve the read linearizable and ignore the bound)."""
        consistency = request.consistency
        if consistency is None and self.settings.consistency is not None:
            consistency = Consistency(self.settings.consistency)
        staleness = request.max_staleness_ms
        if staleness is None:
            staleness = self.settings.max_staleness_ms
        if consistency is None and staleness is not None:
            consistency = Consistency.BOUNDED
        return consistency, staleness

    def _stale_or_raise(self, err: CairnError, absent_key: str | None) -> CairnError:
        """The error, when a failed read should be retried at the leader under the session
        rules; raises it when it is the answer."""
        if self.session is None:
            raise err
        if isinstance(err, NotFound) and absent_key is not None:
            try:
                self.session.check_absent(absent_key)
            except SessionRegression as regression:
                return regression
            raise err
        if isinstance(err, StaleRead) and self._behind_the_session(err):
            return err
        raise err

    def _behind_the_session(self, stale: StaleRead) -> bool:
        """Whether the node refused the read because it has not applied the session
        revision: only then does a linearizable read at the leader answer what was asked.
        A staleness bound the node could not meet, or a ``min_revision`` the caller asked
        for beyond the session, is the caller's own, and its ``StaleRead`` the answer."""
        if self.session is None:
            return False
        applied = stale.applied_index
        return applied is not None and applied < self.session.revision

    def _session_revision(self) -> int | None:
        """The session revision, if there is one worth sending (0 asks for nothing)."""
        if self.session is None or self.session.revision == 0:
            return None
        return self.session.revision

    def _observe(self, answer: Observable) -> None:
        if self.session is not None:
            self.session.observe(answer)

    def _check(self, answer: Observable) -> None:
        if self.session is not None:
            self.session.check(answer)

    # --- cluster -----------------------------------------------------------------------

    def leader(self) -> Program[str]:
        """The leader's endpoint, as the endpoints name it now (one pass of leader
        discovery, whose answer calls then go to): a cached leader may have stepped down or
        stopped since."""
        found = yield from self.discover_leader()
        if found is None:
            raise NoLeader("no endpoint reported a reachable leader")
        return found

    def cluster_status(self, endpoint: str | None = None) -> Program[ClusterStatus]:
        """``GET /cluster/status`` of ``endpoint`` (one attempt), or of the leader
        (``leader_status``)."""
        if endpoint is None:
            return (yield from self.leader_status())
        base = self._endpoint(endpoint)
        return (yield from self.status_at(base, self.settings.timeouts.request))

    def healthz(self, endpoint: str | None = None) -> Program[Health]:
        """``GET /healthz`` of ``endpoint`` (default: the first endpoint), one attempt."""
        reply = yield from self._once("GET", endpoint, ("healthz",), read_only=True)
        return decoder(Health)(reply)

    def metrics(self, endpoint: str | None = None) -> Program[str]:
        """``GET /metrics`` of ``endpoint`` (default: the first endpoint): Prometheus text."""
        reply = yield from self._once("GET", endpoint, ("metrics",), read_only=True)
        return _text(reply)

    def compact(self, endpoint: str) -> Program[CompactResponse]:
        """``POST /cluster/compact`` on one node: snapshot, purge its Raft log, compact its
        store, so a forget's bytes are physically gone."""
        reply = yield from self._once("POST", endpoint, ("cluster", "compact"), _COMPACT_TIMEOUT)
        return decoder(CompactResponse)(reply)

    def cluster_init(
        self, nodes: Sequence[NodeLike], *, auth_admin: str | None = None
    ) -> Program[MembershipResponse]:
        """``POST /cluster/init`` (any member may be asked). With ``auth_admin`` auth is on
        from the start and the answer's ``auth.token`` is that admin's token, shown once."""
        auth = EnableAuthRequest(admin=auth_admin) if auth_admin is not None else None
        request = build(
            InitRequest, "cluster_init", nodes=_validated(_NODES, "nodes", nodes), auth=auth
        )
        return (
            yield from self._admin(Route.SPREAD, ("cluster", "init"), request, MembershipResponse)
        )

    def cluster_join(
        self, node_id: int, client_addr: str, peer_addr: str
    ) -> Program[MembershipResponse]:
        """``POST /cluster/join``: the started node joins as a learner, then is promoted."""
        request = build(
            NodeSpec, "cluster_join", id=node_id, client_addr=client_addr, peer_addr=peer_addr
        )
        return (
            yield from self._admin(
                Route.CURRENT_LEADER,
                ("cluster", "join"),
                request,
                MembershipResponse,
                timeout=_MEMBERSHIP_CHANGE_TIMEOUT,
            )
        )

    def cluster_remove(self, node_id: int) -> Program[MembershipResponse]:
        """``POST /cluster/remove``: the node leaves the membership."""
        request = build(RemoveRequest, "cluster_remove", id=node_id)
        return (
            yield from self._admin(
                Route.CURRENT_LEADER,
                ("cluster", "remove"),
                request,
                MembershipResponse,
                timeout=_MEMBERSHIP_CHANGE_TIMEOUT,
            )
        )

    # --- auth --------------------------------------------------------------------------

    def enable_auth(self, admin: str) -> Program[AuthEnabled]:
        """``POST /v1/auth/enable``: turns auth on for a cluster made without it; ``admin``
        is the first principal and the answer carries its token, shown this once."""
        request = build(EnableAuthRequest, "enable_auth", admin=admin)
        return (
            yield from self._admin(Route.LEADER, ("v1", "auth", "enable"), request, AuthEnabled)
        )

    def create_principal(
        self, name: str, grants: Sequence[GrantLike] = ()
    ) -> Program[CreatedPrincipal]:
        """``POST /v1/auth/principals``: a new principal; the answer carries its token,
        shown this once."""
        request = build(
            CreatePrincipalRequest,
            "create_principal",
            name=name,
            grants=_validated(_GRANTS, "grants", grants),
        )
        return (
            yield from self._admin(
                Route.LEADER, ("v1", "auth", "principals"), request, CreatedPrincipal
            )
        )

    def rotate_token(self, name: str) -> Program[RotatedToken]:
        """``POST /v1/auth/principals/{name}/rotate``: a new token; the old one stops at
        once."""
        path = ("v1", "auth", "principals", _segment("name", name), "rotate")
        return (yield from self._admin(Route.LEADER, path, None, RotatedToken))

    def delete_principal(self, name: str) -> Program[AclChanged]:
        """``DELETE /v1/auth/principals/{name}``: the principal and its token are gone."""
        path = ("v1", "auth", "principals", _segment("name", name))
        return (yield from self._admin(Route.LEADER, path, None, AclChanged, method="DELETE"))

    def set_grants(self, name: str, grants: Sequence[GrantLike]) -> Program[AclChanged]:
        """``PUT /v1/auth/principals/{name}/grants``: replaces every grant of ``name``."""
        request = build(
            SetGrantsRequest, "set_grants", grants=_validated(_GRANTS, "grants", grants)
        )
        path = ("v1", "auth", "principals", _segment("name", name), "grants")
        return (yield from self._admin(Route.LEADER, path, request, AclChanged, method="PUT"))

    def principals(self) -> Program[PrincipalList]:
        """``GET /v1/auth/principals``: every principal and its grants (never a token)."""
        call = Call(
            "GET",
            Route.LEADER,
            ("v1", "auth", "principals"),
            Mode.READ,
            self.settings.timeouts.request,
            read_only=True,
        )
        return (yield from self.call(call, decoder(PrincipalList)))

    def whoami(self) -> Program[WhoAmI]:
        """``GET /v1/auth/whoami``: the principal of this client's token and its grants."""
        call = Call(
            "GET",
            Route.LEADER,
            ("v1", "auth", "whoami"),
            Mode.READ,
            self.settings.timeouts.request,
            read_only=True,
        )
        return (yield from self.call(call, decoder(WhoAmI)))

    # --- helpers -----------------------------------------------------------------------

    def _endpoint(self, endpoint: str | None) -> str:
        if endpoint is None:
            return self.nodes.endpoints[0]
        scheme = "https" if self.nodes.endpoints[0].startswith("https://") else "http"
        return normalize_endpoint(endpoint, scheme)

    def _once(
        self,
        method: str,
        endpoint: str | None,
        path: tuple[str, ...],
        timeout: float | None = None,
        *,
        read_only: bool = False,
    ) -> Program[Reply]:
        base = self._endpoint(endpoint)
        timeout = timeout or self.settings.timeouts.request
        call = Call(method, base, path, Mode.ONCE, timeout, read_only=read_only)
        return (yield from self.call(call, lambda reply: reply))

    def _admin(
        self,
        route: Route,
        path: tuple[str, ...],
        request: _Request | None,
        result: type[R],
        *,
        method: str = "POST",
        timeout: float | None = None,
    ) -> Program[R]:
        body = encode(request) if request is not None else None
        timeout = self.settings.timeouts.request if timeout is None else timeout
        call = Call(method, route, path, Mode.ADMIN, timeout, body=body)
        return (yield from self.call(call, decoder(result)))


def read_route(consistency: Consistency | None) -> Route:
    """Linearizable reads (the default) go to the leader, the others to any node."""
    if consistency in (Consistency.BOUNDED, Consistency.ANY):
        return Route.SPREAD
    return Route.LEADER


def _actor_or(actor: str | None, default: str | None) -> str | None:
    """The call's ``actor`` when given, even an invalid one such as ``""`` (the node refuses
    it with ``field: "actor"``), else the client's default."""
    return actor if actor is not None else default


def _max_or_none(a: int | None, b: int | None) -> int | None:
    present = [value for value in (a, b) if value is not None]
    return max(present) if present else None
