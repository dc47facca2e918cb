"""``CairnStore``: LangGraph's ``BaseStore`` on a cairn cluster (docs/langgraph.md).

Every operation is written once as a *program*: a generator that yields ``_Call``s (one
client method call each) and receives their results, or has their ``CairnError`` thrown
in. ``batch`` performs the calls with the sync ``Cairn``, ``abatch`` awaits them on the
``AsyncCairn``; both run the same programs, as ``Cairn`` and ``AsyncCairn`` run the same
core.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Literal, TypeVar

from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    get_text_at_path,
    validate_op_namespace,
)

from ..aio import AsyncCairn
from ..client import Cairn
from ..errors import CairnError, InvalidInput, NotFound
from ..models import ListResponse, RecallNote, RecallResponse, Record, State
from ._keys import KeyCodec, first_control_character, utf8_size
from ._match import (
    MATCH_TYPES,
    filter_fault,
    matches_condition,
    matches_filter,
    query_cues,
    text_matches,
)

__all__ = ["DELETE_REASON", "WARNING_FIELD", "CairnStore"]

T = TypeVar("T")

WARNING_FIELD = "_cairn_warning"
"""The field an item's value gains, first, when its note carries a warning (revoked,
stale or superseded): the note as cairn renders it (SPEC §4). The store owns this field:
it is never stored, and ``put`` drops it from the value it writes."""

DELETE_REASON = "deleted through LangGraph (cairn_client.langgraph.CairnStore)"
"""The reason of the tombstone a delete leaves, unless the store is given another."""

_LIVE_STATES = (State.ACTIVE, State.REVOKED)
_PAGE_ITEMS_MAX = 1000
"""The node's default ``limits.page_items_max`` (SPEC §4, §5): the most keys a ``list``
page, and notes a ``recall``, may ask for."""
_REASON_BYTES_MAX = 4096
"""The node's default ``limits.reason_bytes_max`` (SPEC §5): the longest reason a forget
may give."""
_RESERVED_ROOT_LABEL = "langgraph"
"""The root label ``BaseStore.put`` refuses in a namespace (LangGraph keeps it)."""
_Method = Literal["read", "write", "forget", "list_page", "recall"]


@dataclass(frozen=True)
class _Call:
    """One call of a client method, made by ``batch`` on ``Cairn`` or awaited by
    ``abatch`` on ``AsyncCairn`` (the two have the same methods)."""

    method: _Method
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)


_Program = Generator[_Call, Any, T]


class _Stepper:
    """Runs a program one call at a time; the sync and async drivers only make the
    calls, so stepping (results in, failures thrown in, the return value out) is here once.
    """

    def __init__(self, program: _Program[Any]) -> None:
        self._program = program
        self.result: Any = None
        self.outcome: Any = None
        self.failure: CairnError | None = None

    def next_call(self) -> _Call | None:
        """The program's next call, after handing it the last one's outcome or failure;
        ``None`` once it returned (its value is in ``result``)."""
        failure, self.failure = self.failure, None
        try:
            if failure is not None:
                return self._program.throw(failure)
            return self._program.send(self.outcome)
        except StopIteration as stop:
            self.result = stop.value
            return None


def _run(client: Cairn, program: _Program[T]) -> T:
    stepper = _Stepper(program)
    while (call := stepper.next_call()) is not None:
        try:
            stepper.outcome = getattr(client, call.method)(*call.args, **call.kwargs)
        except CairnError as err:
            stepper.failure = err
    result: T = stepper.result
    return result


async def _arun(client: AsyncCairn, program: _Program[T]) -> T:
    stepper = _Stepper(program)
    while (call := stepper.next_call()) is not None:
        try:
            stepper.outcome = await getattr(client, call.method)(*call.args, **call.kwargs)
        except CairnError as err:
            stepper.failure = err
    result: T = stepper.result
    return result


@dataclass(frozen=True)
class _Entry:
    """A live note of the store: its namespace, key and record."""

    namespace: tuple[str, ...]
    key: str
    record: Record

    @property
    def stored(self) -> dict[str, Any]:
        """The value as written (no warning field): what filters and queries look at."""
        value: dict[str, Any] = self.record.value
        return value

    def item(self) -> Item:
        return Item(**self._fields())

    def search_item(self, score: float | None = None) -> SearchItem:
        return SearchItem(**self._fields(), score=score)

    def _fields(self) -> dict[str, Any]:
        # The record keeps one leader-stamped time, of its last change (a write, revoke,
        # ...): cairn has no creation time, so it is both.
        changed = datetime.fromtimestamp(self.record.meta.updated_at / 1000, timezone.utc)
        return {
            "namespace": self.namespace,
            "key": self.key,
            "value": self._value(),
            "created_at": changed,
            "updated_at": changed,
        }

    def _value(self) -> dict[str, Any]:
        record = self.record
        if record.state is State.REVOKED or record.stale or record.superseded_by is not None:
            # First, so a prompt cut short still carries the warning.
            return {WARNING_FIELD: record.rendered, **self.stored}
        return dict(self.stored)


class CairnStore(BaseStore):
    """LangGraph's ``BaseStore`` on a cairn cluster: each item is one cairn note, each put
    a Raft entry, each delete a forget that leaves a tombstone with a reason.

    Args:
        client: the ``Cairn`` that ``batch`` (``get``, ``put``, ``search``, ...) uses.
        async_client: the ``AsyncCairn`` that ``abatch`` (``aget``, ``aput``, ...) uses.
            At least one is needed; the store does not close them.
        prefix: the cairn key prefix of every item (empty, or ending in ``/``; at most 510
            bytes, so that a one-byte label, its ``/`` and an empty key fit in the node's
            default ``limits.key_bytes_max``, 512 bytes).
        reason: the reason of the tombstone each delete leaves (not blank; no control
            character but tab and newline; at most 4096 bytes, the node's default
            ``limits.reason_bytes_max``: what the node requires of a forget's reason).
        recreate_deleted: a put may re-create a deleted item (it clears the tombstone, as
            LangGraph expects). ``False`` keeps every forget final: a put on a deleted
            item raises ``KeyForgotten``.
        override_revocation: a put may overwrite a revoked note. By default it raises
            ``KeyRevoked``, whose ``rendered`` is the warning.
        anchor_fields: paths (LangGraph's ``index`` syntax) of the value's texts that
            become the note's anchors, for puts whose ``index`` is ``None``; a put's
            ``index`` list replaces them, ``index=False`` gives no anchors.
        page_size: keys per cairn ``list`` request of a search or namespace listing, 1 to
            1000 (the node's default ``limits.page_items_max``).
        recall_limit: notes asked of cairn's ``recall`` when a query is anchor cues, 1 to
            1000 (the same limit).
    """

    def __init__(
        self,
        client: Cairn | None = None,
        *,
        async_client: AsyncCairn | None = None,
        prefix: str = "langgraph/",
        reason: str = DELETE_REASON,
        recreate_deleted: bool = True,
        override_revocation: bool = False,
        anchor_fields: Sequence[str] = ("anchors[*]",),
        page_size: int = 100,
        recall_limit: int = 1000,
    ) -> None:
        if client is None and async_client is None:
            raise TypeError("CairnStore needs client=Cairn(...) or async_client=AsyncCairn(...)")
        _check_instance("client", client, Cairn, optional=True)
        _check_instance("async_client", async_client, AsyncCairn, optional=True)
        _check_reason(reason)
        _check_instance("recreate_deleted", recreate_deleted, bool)
        _check_instance("override_revocation", override_revocation, bool)
        _check_paths("anchor_fields", anchor_fields)
        _check_page_items("page_size", page_size)
        _check_page_items("recall_limit", recall_limit)
        self._client = client
        self._async_client = async_client
        self._keys = KeyCodec(prefix)
        self._reason = reason
        self._recreate_deleted = recreate_deleted
        self._override_revocation = override_revocation
        self._anchor_fields = list(anchor_fields)
        self._page_size = page_size
        self._recall_limit = recall_limit

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Runs the operations in order with the sync client (see docs/langgraph.md)."""
        if self._client is None:
            raise RuntimeError(
                "this CairnStore has only an async client: use abatch/aget/aput/..., or "
                "pass client=Cairn(...)"
            )
        return _run(self._client, self._batch(list(ops)))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Runs the operations in order with the async client."""
        if self._async_client is None:
            raise RuntimeError(
                "this CairnStore has only a sync client: use batch/get/put/..., or pass "
                "async_client=AsyncCairn(...)"
            )
        return await _arun(self._async_client, self._batch(list(ops)))

    # --- programs ----------------------------------------------------------------------

    def _batch(self, ops: list[Op]) -> _Program[list[Result]]:
        for op in ops:
            _check(op)
        results: list[Result] = []
        for op in ops:
            results.append((yield from self._execute(op)))
        return results

    def _execute(self, op: Op) -> _Program[Result]:
        if isinstance(op, GetOp):
            return (yield from self._get(op))
        if isinstance(op, PutOp):
            yield from self._put(op)
            return None
        if isinstance(op, SearchOp):
            return (yield from self._search(op))
        return (yield from self._list_namespaces(op))

    def _get(self, op: GetOp) -> _Program[Item | None]:
        entry = yield from self._read(self._keys.key(op.namespace, op.key))
        return entry.item() if entry is not None else None

    def _put(self, op: PutOp) -> _Program[None]:
        key = self._keys.key(op.namespace, op.key)
        if op.value is None:
            yield _Call("forget", (key, self._reason))
            return
        value = {name: inner for name, inner in op.value.items() if name != WARNING_FIELD}
        options = {
            "anchors": self._anchors(value, op.index),
            "clear_tombstone": self._recreate_deleted,
            "override_revocation": self._override_revocation,
        }
        yield _Call("write", (key, value), options)

    def _anchors(
        self, value: dict[str, Any], index: Literal[False] | list[str] | None
    ) -> list[str]:
        if index is False:
            return []
        paths = self._anchor_fields if index is None else index
        return [text for path in paths for text in get_text_at_path(value, path)]

    def _search(self, op: SearchOp) -> _Program[list[SearchItem]]:
        if op.limit <= 0:
            # Nothing, as from LangGraph's in-memory store (a scan would keep one first).
            return []
        cues = query_cues(op.query) if op.query else None
        if cues is not None:
            return (yield from self._search_by_cues(op, cues))
        return (yield from self._search_by_listing(op))

    def _search_by_listing(self, op: SearchOp) -> _Program[list[SearchItem]]:
        """The items under the namespace prefix, in key order, that pass the filter (and
        contain the query's words)."""
        wanted = op.offset + op.limit
        found: list[_Entry] = []

        def keep(entry: _Entry) -> bool:
            if matches_filter(entry.stored, op.filter) and (
                not op.query or text_matches(entry.stored, op.query)
            ):
                found.append(entry)
            return len(found) < wanted

        yield from self._scan(self._keys.namespace_prefix(op.namespace_prefix), keep)
        return [entry.search_item() for entry in found[op.offset :]]

    def _search_by_cues(self, op: SearchOp, cues: list[str]) -> _Program[list[SearchItem]]:
        """The items cairn recalls for the cues, in its rank order (matched cues, revoked
        first, recency), that pass the filter; ``score`` is the share of ``cues`` (distinct)
        matched."""
        recalled: RecallResponse = yield _Call(
            "recall",
            (cues,),
            {
                "prefix": self._keys.namespace_prefix(op.namespace_prefix),
                "limit": self._recall_limit,
            },
        )
        notes = [note for note in recalled.notes if self._may_pass(note, op)]
        items: list[SearchItem] = []
        for note in notes[op.offset : op.offset + op.limit]:
            # A recall note carries no time; its record does. It may have changed since.
            entry = yield from self._read(note.key)
            if entry is not None and matches_filter(entry.stored, op.filter):
                items.append(entry.search_item(score=len(note.matched) / len(cues)))
        return items

    def _may_pass(self, note: RecallNote, op: SearchOp) -> bool:
        return (
            self._keys.decode(note.key) is not None
            and isinstance(note.value, dict)
            and matches_filter(note.value, op.filter)
        )

    def _list_namespaces(self, op: ListNamespacesOp) -> _Program[list[tuple[str, ...]]]:
        conditions = op.match_conditions or ()
        found: set[tuple[str, ...]] = set()

        def add(entry: _Entry) -> bool:
            if all(matches_condition(condition, entry.namespace) for condition in conditions):
                found.add(entry.namespace[: op.max_depth])
            return True

        yield from self._scan(self._keys.namespace_prefix(_fixed_head(conditions)), add)
        return sorted(found)[op.offset : op.offset + op.limit]

    # --- cairn -------------------------------------------------------------------------

    def _read(self, key: str) -> _Program[_Entry | None]:
        try:
            record: Record = yield _Call("read", (key,))
        except NotFound:
            return None
        return self._entry(record)

    def _scan(self, key_prefix: str, visit: Callable[[_Entry], bool]) -> _Program[None]:
        """Visits the live items under ``key_prefix`` in key order, a cairn page at a time,
        until ``visit`` answers ``False``."""
        after: str | None = None
        while True:
            page: ListResponse = yield _Call(
                "list_page",
                (key_prefix,),
                {"states": _LIVE_STATES, "limit": self._page_size, "after": after},
            )
            for record in page.items:
                entry = self._entry(record)
                if entry is not None and not visit(entry):
                    return
            if page.next_after is None:
                return
            after = page.next_after

    def _entry(self, record: Record) -> _Entry | None:
        """The item a record holds: ``None`` when it is forgotten, or is not an item of
        this store (a key it cannot have written, a value that is not a JSON object)."""
        decoded = self._keys.decode(record.key)
        if decoded is None or record.state not in _LIVE_STATES:
            return None
        if not isinstance(record.value, dict):
            return None
        namespace, key = decoded
        return _Entry(namespace, key, record)


def _check(op: Op) -> None:
    """Refuses what the store cannot do, before a batch changes anything."""
    if not isinstance(op, GetOp | PutOp | SearchOp | ListNamespacesOp):
        raise TypeError(f"not a store operation: {type(op).__name__}")
    _check_namespace_types(op)
    validate_op_namespace(op)
    if isinstance(op, GetOp):
        _check_item_namespace("get", op.namespace)
        _check_key("get", op.key)
    elif isinstance(op, PutOp):
        _check_put(op)
    elif isinstance(op, SearchOp):
        _check_window("search", op.limit, op.offset)
        _check_filter(op.filter)
    else:
        _check_window("list_namespaces", op.limit, op.offset)
        _check_max_depth(op.max_depth)
        _check_match_types(op.match_conditions)


def _check_filter(field_filter: dict[str, Any] | None) -> None:
    fault = filter_fault(field_filter)
    if fault is not None:
        raise InvalidInput(f"search: filter: {fault}")


def _check_match_types(conditions: Sequence[MatchCondition] | None) -> None:
    for condition in conditions or ():
        if condition.match_type not in MATCH_TYPES:
            raise InvalidInput(
                f"list_namespaces: match_type: {condition.match_type!r}; expected one of "
                f"{', '.join(map(repr, MATCH_TYPES))}"
            )


def _check_window(operation: str, limit: object, offset: object) -> None:
    """A window of results: counts, not slice bounds. (LangGraph's in-memory store slices,
    so its ``limit=-1`` is every item but the last.)"""
    for name, value in (("limit", limit), ("offset", offset)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidInput(f"{operation}: {name}: {value!r}; expected an int, 0 or more")


def _check_max_depth(max_depth: object) -> None:
    """The labels of each namespace a listing keeps, 1 or more; ``None`` keeps them all.
    (Taken as a slice bound, 0 would list ``()``, which is no item's namespace, and -1
    every namespace but its last label.)"""
    if max_depth is None:
        return
    if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 1:
        raise InvalidInput(
            f"list_namespaces: max_depth: {max_depth!r}; expected an int, 1 or more (or None: "
            "no limit)"
        )


def _check_namespace_types(op: Op) -> None:
    """Each namespace the operation carries is a tuple (or list) of labels. A ``str`` is
    one too, to ``validate_op_namespace`` and the methods (which check what they iterate),
    and ``"ns"`` would be the namespace ``("n", "s")``: a put would write under it."""
    if isinstance(op, GetOp):
        _check_namespace_type("get", "namespace", op.namespace)
    elif isinstance(op, PutOp):
        _check_namespace_type(_put_or_delete(op), "namespace", op.namespace)
    elif isinstance(op, SearchOp):
        _check_namespace_type("search", "namespace_prefix", op.namespace_prefix)
    else:
        for condition in op.match_conditions or ():
            # The methods' argument that made the condition: prefix or suffix.
            _check_namespace_type("list_namespaces", condition.match_type, condition.path)


def _check_namespace_type(operation: str, name: str, namespace: object) -> None:
    if not isinstance(namespace, tuple | list):
        raise InvalidNamespaceError(
            f"{operation}: {name}: expected a tuple of labels such as ('users', 'alice'), "
            f"not {type(namespace).__name__} {namespace!r}"
        )


def _check_item_namespace(operation: str, namespace: Sequence[str]) -> None:
    """The namespace of an item, which has at least one label: with none, a get, delete or
    put would reach the note right under the prefix, which is not an item (a put cannot
    make one), and read, forget or overwrite it. LangGraph's ``put`` checks this,
    its ``get`` and ``delete`` do not, nor does ``validate_op_namespace``."""
    if not namespace:
        raise InvalidNamespaceError(
            f"{operation}: the namespace of an item needs at least one label, got ()"
        )


def _check_key(operation: str, key: object) -> None:
    """An item's key is a ``str``. The store's methods convert it with ``str()``; an
    operation given to ``batch`` is not converted, and a key of another type would fail
    when its turn came, after the operations before it ran."""
    if not isinstance(key, str):
        raise InvalidInput(f"{operation}: key: expected a str, not {type(key).__name__}")


def _check_put(op: PutOp) -> None:
    operation = _put_or_delete(op)
    _check_item_namespace(operation, op.namespace)
    _check_key(operation, op.key)
    if op.value is not None:
        _check_root_label(op.namespace)
    if op.ttl is not None:
        raise NotImplementedError(
            "TTL is not supported by CairnStore: cairn never expires a memory by time; "
            "delete the item (a forget with a reason) instead, or put with ttl=None"
        )
    if op.value is not None and not isinstance(op.value, Mapping):
        raise InvalidInput(
            f"put: value: expected a dict (or None to delete), not {type(op.value).__name__}"
        )
    if op.index is not None and op.index is not False:
        _check_paths("put: index", op.index)


def _put_or_delete(op: PutOp) -> str:
    """What a ``PutOp`` is, as errors name it: a ``PutOp`` without a value deletes."""
    return "delete" if op.value is None else "put"


def _check_root_label(namespace: Sequence[str]) -> None:
    """Refuses what ``BaseStore.put`` refuses, also when the ``PutOp`` comes in a batch.
    Only puts: a get or delete of such a namespace is allowed, as LangGraph allows it."""
    if namespace[0] == _RESERVED_ROOT_LABEL:
        raise InvalidNamespaceError(
            f"put: the root label of a namespace cannot be {_RESERVED_ROOT_LABEL!r}, got "
            f"{tuple(namespace)}"
        )


def _check_instance(name: str, value: object, expected: type, *, optional: bool = False) -> None:
    if not (optional and value is None) and not isinstance(value, expected):
        raise InvalidInput(f"{name}: expected {expected.__name__}, not {type(value).__name__}")


def _check_paths(name: str, paths: object) -> None:
    """A list of paths in LangGraph's ``index`` syntax; a plain ``str`` is refused, not
    taken as its characters."""
    if (
        isinstance(paths, str)
        or not isinstance(paths, Sequence)
        or not all(isinstance(path, str) for path in paths)
    ):
        raise InvalidInput(
            f"{name}: expected a list of paths such as ['anchors[*]'], not "
            f"{type(paths).__name__} {paths!r}"
        )


def _check_reason(reason: str) -> None:
    """A reason the node takes for a forget: otherwise every delete would be refused, after
    the other operations of its batch ran."""
    _check_instance("reason", reason, str)  # typed str, but callers may not type-check
    if not reason.strip():
        raise InvalidInput(f"reason: {reason!r}; a delete's tombstone needs a reason, not blank")
    control = first_control_character(reason, allowed="\t\n")
    if control is not None:
        raise InvalidInput(
            f"reason: contains the control character {control!r} (only tab and newline are allowed)"
        )
    size = utf8_size("reason", reason)
    if size > _REASON_BYTES_MAX:
        raise InvalidInput(
            f"reason: {size} bytes; at most {_REASON_BYTES_MAX} (the node's default "
            "limits.reason_bytes_max)"
        )


def _check_page_items(name: str, value: object) -> None:
    """A count of keys or notes one request asks for: a node with the default limits
    refuses more than ``_PAGE_ITEMS_MAX``, so a larger one would fail every search."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= _PAGE_ITEMS_MAX:
        raise InvalidInput(
            f"{name}: {value!r}; expected an int from 1 to {_PAGE_ITEMS_MAX} (the node's "
            "default limits.page_items_max)"
        )


def _fixed_head(conditions: Iterable[MatchCondition]) -> tuple[str, ...]:
    """The labels every matching namespace starts with: those of the first prefix
    condition before its first ``*``."""
    for condition in conditions:
        if condition.match_type == "prefix":
            return tuple(itertools.takewhile(lambda label: label != "*", condition.path))
    return ()
