"""The JSON wire types of the cairn HTTP API (SPEC §2-§6, §8), field for field as the Rust
``cairn-api`` crate defines them (``api/src/*.rs``).

Requests reject unknown fields (``extra="forbid"``), as the node does, so a typo such as
``expected_vesion`` fails here instead of becoming an unconditional write, and their
``str``, ``int`` and ``bool`` fields are strict: ``clear_tombstone="yes"``,
``expected_version=True`` or ``"2"`` and a ``bytes`` key are refused, not converted (an enum
field still takes its value's name, ``consistency="any"``). Results ignore fields they do
not know, so a newer node's additions do not break an older client.

Timestamps (``updated_at``, ``forgotten_at``, ``at``, ...) are leader-stamped Unix
milliseconds, as on the wire.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr

__all__ = [
    "AclChanged",
    "AuthEnabled",
    "BatchOp",
    "BatchRequest",
    "BatchResult",
    "ClusterStatus",
    "CompactResponse",
    "Consistency",
    "CreatePrincipalRequest",
    "CreatedPrincipal",
    "EnableAuthRequest",
    "EventKind",
    "FlagStaleRequest",
    "ForgetRequest",
    "Grant",
    "Health",
    "HistoryEvent",
    "HistoryRequest",
    "HistoryResponse",
    "InitRequest",
    "ListRequest",
    "ListResponse",
    "MembershipResponse",
    "Meta",
    "MutationResult",
    "NodeSpec",
    "Permission",
    "Principal",
    "PrincipalList",
    "ProbeRequest",
    "ProbeResponse",
    "ReadRequest",
    "ReadResponse",
    "RecallNote",
    "RecallRequest",
    "RecallResponse",
    "Record",
    "ReinstateRequest",
    "RemoveRequest",
    "Revocation",
    "RevokeRequest",
    "RotatedToken",
    "Served",
    "SetGrantsRequest",
    "StaleFlag",
    "State",
    "SupersedeRequest",
    "Tombstone",
    "WatchEvent",
    "WhoAmI",
    "WriteRequest",
]


class State(str, Enum):
    """Lifecycle state of a key (SPEC §2)."""

    ABSENT = "absent"
    ACTIVE = "active"
    REVOKED = "revoked"
    FORGOTTEN = "forgotten"


class Consistency(str, Enum):
    """Read consistency level (SPEC §3)."""

    LINEARIZABLE = "linearizable"
    BOUNDED = "bounded"
    ANY = "any"


class EventKind(str, Enum):
    """Kind of a history or watch event (SPEC §2)."""

    WRITTEN = "written"
    FORGOTTEN = "forgotten"
    TOMBSTONE_CLEARED = "tombstone_cleared"
    REVOKED = "revoked"
    REINSTATED = "reinstated"
    STALE_FLAGGED = "stale_flagged"
    SUPERSEDED = "superseded"


class Permission(str, Enum):
    """What a grant allows on the keys under its prefix (SPEC §8)."""

    READ = "read"
    WRITE = "write"
    FORGET = "forget"
    REVOKE = "revoke"
    ADMIN = "admin"


class _Result(BaseModel):
    """An answer of the node: fields it does not know yet are ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True)


class _Request(BaseModel):
    """A request body: unknown fields are refused, as the node refuses them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def wire(self) -> dict[str, Any]:
        """The body, ready for ``json.dumps``: optional fields left at their default are
        omitted, as the Rust client omits them (a required ``value`` of ``None`` stays, as
        JSON null). Values stay as given, so one that is not JSON (NaN, a set, an object)
        is refused when encoded instead of being silently converted."""
        return self.model_dump(mode="python", exclude_defaults=True)


# --- records ---------------------------------------------------------------------------


class Tombstone(_Result):
    """The durable record of a forget; kept forever, readable by id."""

    id: str
    key: str
    actor: str
    reason: str
    value_hash: str | None
    """sha256 of the canonical JSON of the forgotten value; ``None`` for a pre-emptive
    forget (the key was absent)."""
    forgotten_at: int
    version: int
    generation: int
    revision: int


class Revocation(_Result):
    actor: str
    reason: str
    revoked_at: int
    version: int


class StaleFlag(_Result):
    anchor: str
    observed_hash: str
    actor: str
    flagged_at: int


class Meta(_Result):
    actor: str
    source: str | None = None
    anchors: list[str] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list)
    updated_at: int


class HistoryEvent(_Result):
    """One entry of a key's history; never a value, only its hash. ``by`` (superseded) and
    ``anchor``/``observed_hash`` (stale_flagged) are present only for their kind."""

    kind: EventKind
    version: int
    revision: int
    actor: str
    reason: str | None = None
    at: int
    value_hash: str | None = None
    by: str | None = None
    anchor: str | None = None
    observed_hash: str | None = None


class Served(_Result):
    """Where and how a read was served (SPEC §3)."""

    node_id: int
    role: str
    consistency: Consistency
    applied_index: int
    leader_commit_index: int
    ms_since_leader_contact: int | None


class Record(_Result):
    """A key's current record. ``value`` is present only for ``active`` and ``revoked``
    keys; ``rendered`` is the note as agents should see it (SPEC §4). A stored JSON
    ``null`` and no value at all (a ``forgotten`` key) are both ``None`` here: ``state``
    tells them apart."""

    key: str
    state: State
    version: int
    generation: int
    forget_epoch: int
    revision: int
    create_revision: int
    value: Any = None
    meta: Meta
    tombstone: Tombstone | None = None
    revocation: Revocation | None = None
    stale: list[StaleFlag] = Field(default_factory=list)
    superseded_by: str | None = None
    rendered: str


# --- mutations -------------------------------------------------------------------------


class _Mutation(_Request):
    """Fields every mutation may carry. ``actor`` may be omitted on an auth-on cluster (it
    is then the token's principal)."""

    OP: ClassVar[str]
    PATH: ClassVar[str]

    key: StrictStr
    actor: StrictStr | None = None
    expected_version: StrictInt | None = Field(default=None, ge=0)
    based_on_revision: StrictInt | None = Field(default=None, ge=0)
    request_id: StrictStr | None = None


class WriteRequest(_Mutation):
    """``POST /v1/write``"""

    OP: ClassVar[str] = "write"
    PATH: ClassVar[str] = "write"

    value: Any
    source: StrictStr | None = None
    anchors: list[StrictStr] | None = None
    tags: list[StrictStr] | None = None
    clear_tombstone: StrictBool = False
    override_revocation: StrictBool = False
    reason: StrictStr | None = None


class ForgetRequest(_Mutation):
    """``POST /v1/forget``"""

    OP: ClassVar[str] = "forget"
    PATH: ClassVar[str] = "forget"

    reason: StrictStr


class RevokeRequest(_Mutation):
    """``POST /v1/revoke``"""

    OP: ClassVar[str] = "revoke"
    PATH: ClassVar[str] = "revoke"

    reason: StrictStr


class ReinstateRequest(_Mutation):
    """``POST /v1/reinstate``"""

    OP: ClassVar[str] = "reinstate"
    PATH: ClassVar[str] = "reinstate"

    reason: StrictStr | None = None


class FlagStaleRequest(_Mutation):
    """``POST /v1/flag-stale``"""

    OP: ClassVar[str] = "flag_stale"
    PATH: ClassVar[str] = "flag-stale"

    anchor: StrictStr
    observed_hash: StrictStr


class SupersedeRequest(_Mutation):
    """``POST /v1/supersede``"""

    OP: ClassVar[str] = "supersede"
    PATH: ClassVar[str] = "supersede"

    by: StrictStr
    reason: StrictStr | None = None


BatchOp = (
    WriteRequest
    | ForgetRequest
    | RevokeRequest
    | ReinstateRequest
    | FlagStaleRequest
    | SupersedeRequest
)
"""One operation of a batch: any mutation request (without its own ``request_id``)."""


class BatchRequest(_Request):
    """``POST /v1/batch``: all operations in one Raft entry, or none."""

    PATH: ClassVar[str] = "batch"

    ops: list[BatchOp]
    request_id: StrictStr | None = None

    def wire(self) -> dict[str, Any]:
        """Each op tagged with ``op`` (``{"op": "write", ...}``), as the node expects."""
        body: dict[str, Any] = {"ops": [{"op": op.OP, **op.wire()} for op in self.ops]}
        if self.request_id is not None:
            body["request_id"] = self.request_id
        return body


class MutationResult(_Result):
    """Result of one applied (or idempotently repeated) mutation."""

    key: str
    state: State
    version: int
    generation: int
    forget_epoch: int
    revision: int
    replayed: bool
    """``True`` when this is the remembered answer of an earlier try with the same
    ``request_id`` (nothing was applied again)."""
    already: bool | None = None
    """``True`` for an idempotent repeat (forget of a forgotten key, ...)."""
    tombstone: Tombstone | None = None


class BatchResult(_Result):
    results: list[MutationResult]
    revision: int
    replayed: bool


# --- reads -----------------------------------------------------------------------------


class _Read(_Request):
    """The consistency options every read takes (SPEC §3)."""

    PATH: ClassVar[str] = ""

    consistency: Consistency | None = None
    max_staleness_ms: StrictInt | None = Field(default=None, ge=0)
    min_revision: StrictInt | None = Field(default=None, ge=0)


class ReadRequest(_Read):
    """``POST /v1/read``"""

    PATH: ClassVar[str] = "read"

    key: StrictStr


class ReadResponse(Record):
    """A key's record and where it was served."""

    served: Served


class ProbeRequest(_Read):
    """``POST /v1/probe``"""

    PATH: ClassVar[str] = "probe"

    key: StrictStr


class ProbeResponse(_Result):
    """Value record vs retention record of a key on the node that served it."""

    key: str
    state: State
    value_present: bool
    retention_present: bool
    version: int
    generation: int
    forget_epoch: int
    tombstone_id: str | None = None
    value_revision: int
    """Log index of the entry that carried the current or last value (0: none)."""
    log_purged_through: int
    served: Served


class HistoryRequest(_Read):
    """``POST /v1/history``"""

    PATH: ClassVar[str] = "history"

    key: StrictStr


class HistoryResponse(_Result):
    key: str
    events: list[HistoryEvent]
    served: Served


class ListRequest(_Read):
    """``POST /v1/list``"""

    PATH: ClassVar[str] = "list"

    prefix: StrictStr
    states: list[State] | None = None
    limit: StrictInt | None = Field(default=None, ge=0)
    after: StrictStr | None = None


class ListResponse(_Result):
    items: list[Record]
    next_after: str | None = None
    """The ``after`` of the next page; ``None`` once a page came back short."""
    served: Served


class RecallRequest(_Read):
    """``POST /v1/recall``"""

    PATH: ClassVar[str] = "recall"

    cues: list[StrictStr]
    prefix: StrictStr | None = None
    include: list[State] | None = None
    limit: StrictInt | None = Field(default=None, ge=0)


class RecallNote(_Result):
    key: str
    state: State
    rendered: str
    matched: list[str]
    version: int
    generation: int
    forget_epoch: int
    revision: int
    value: Any = None


class RecallResponse(_Result):
    notes: list[RecallNote]
    served: Served


class WatchEvent(_Result):
    """One change of ``GET /v1/watch``."""

    revision: int
    key: str
    kind: EventKind
    state: State
    version: int
    generation: int
    forget_epoch: int


# --- cluster ---------------------------------------------------------------------------


class NodeSpec(_Request):
    id: StrictInt = Field(ge=1)
    client_addr: StrictStr
    peer_addr: StrictStr


class EnableAuthRequest(_Request):
    """``POST /v1/auth/enable``, and the ``auth`` of ``POST /cluster/init``."""

    admin: StrictStr


class InitRequest(_Request):
    """``POST /cluster/init``"""

    nodes: list[NodeSpec]
    auth: EnableAuthRequest | None = None


class RemoveRequest(_Request):
    """``POST /cluster/remove``"""

    id: StrictInt


class _Secret(_Result):
    """An answer that carries a token: shown once, kept out of ``repr``."""

    token: str = Field(repr=False)


class AuthEnabled(_Secret):
    """The first admin's token, shown this once."""

    admin: str
    acl_revision: int


class MembershipResponse(_Result):
    voters: list[int]
    learners: list[int]
    nodes: list[NodeSpec]
    auth: AuthEnabled | None = None
    """Init with ``auth``: the admin's token, shown this once."""


class ClusterStatus(_Result):
    node_id: int
    role: str
    leader_id: int | None = None
    term: int
    last_log_index: int
    commit_index: int
    applied_index: int
    ms_since_leader_contact: int | None = None
    voters: list[int]
    learners: list[int]
    nodes: list[NodeSpec]
    snapshot_index: int
    log_purged_through: int


class CompactResponse(_Result):
    snapshot_index: int
    log_purged_through: int


class Health(_Result):
    """``GET /healthz``"""

    ok: bool
    node_id: int
    role: str


# --- auth ------------------------------------------------------------------------------


class Grant(_Request):
    """``{prefix, permissions}``: the permissions hold on every key under ``prefix``."""

    prefix: StrictStr
    permissions: list[Permission]


class CreatePrincipalRequest(_Request):
    """``POST /v1/auth/principals``"""

    name: StrictStr
    grants: list[Grant] = Field(default_factory=list)

    def wire(self) -> dict[str, Any]:
        return self.model_dump(mode="python")


class SetGrantsRequest(_Request):
    """``PUT /v1/auth/principals/{name}/grants``"""

    grants: list[Grant]


class CreatedPrincipal(_Secret):
    """A new principal and its token, shown this once."""

    name: str


class RotatedToken(_Secret):
    """A principal's new token, shown this once; the old one stopped working."""


class Principal(_Result):
    name: str
    grants: list[Grant]
    created_at: int
    created_by: str


class PrincipalList(_Result):
    principals: list[Principal]
    acl_revision: int


class WhoAmI(_Result):
    name: str
    grants: list[Grant]
    acl_revision: int


class AclChanged(_Result):
    name: str
    acl_revision: int
