"""``cairn_client.langgraph.CairnStore`` against real 3-node clusters.

Every cluster test runs twice through one body (the ``flavor`` fixture): once with a store
on ``Cairn`` (``batch``, ``graph.invoke``) and once with a store on ``AsyncCairn``
(``abatch``, ``graph.ainvoke``), called through ``_AsyncStoreOnLoop``. The example of
docs/langgraph.md runs as written and prints what the guide shows.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, TypedDict, cast

import pytest
from langgraph.graph import END, START, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchOp,
)

from cairn_client import (
    AsyncCairn,
    Cairn,
    ConnectionFailed,
    InvalidInput,
    InvalidRequest,
    KeyForgotten,
    KeyRevoked,
    RetryPolicy,
    Session,
    State,
)
from cairn_client.langgraph import DELETE_REASON, WARNING_FIELD, CairnStore
from cairn_client.langgraph._keys import KeyCodec
from cairn_client.langgraph._match import matches_filter, query_cues, text_matches
from cairn_client.testing import LocalCluster

NOTES = ("notes",)
GUIDE = Path(__file__).resolve().parents[2] / "docs" / "langgraph.md"


class _AsyncStoreOnLoop:
    """A store on ``AsyncCairn`` called like a sync one: ``name(...)`` runs
    ``aname(...)`` on the harness's loop."""

    def __init__(self, store: CairnStore, loop: asyncio.AbstractEventLoop) -> None:
        self._store = store
        self._loop = loop

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self._store, f"a{name}")

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._loop.run_until_complete(method(*args, **kwargs))

        return call


Ops = Callable[[dict[str, Any]], list[Op]]
Update = Callable[[list[Result]], dict[str, Any]]


class Harness:
    """Stores, graph nodes and graph runs of one flavor: ``sync`` or ``async``."""

    def __init__(self, flavor: str, endpoints: list[str], prefix: str) -> None:
        self.flavor = flavor
        self.endpoints = endpoints
        self.prefix = prefix
        self._loop = asyncio.new_event_loop()
        self._closers: list[Callable[[], None]] = []

    def cairn_store(
        self,
        *,
        endpoints: list[str] | None = None,
        session: Session | None = None,
        consistency: str | None = None,
        **options: Any,
    ) -> CairnStore:
        """A ``CairnStore`` on a new client of this flavor (closed by ``close``)."""
        client_options: dict[str, Any] = {
            "actor": "tester",
            "session": session,
            "consistency": consistency,
        }
        options.setdefault("prefix", self.prefix)
        if self.flavor == "sync":
            client = Cairn(endpoints or self.endpoints, **client_options)
            self._closers.append(client.close)
            return CairnStore(client, **options)
        async_client = AsyncCairn(endpoints or self.endpoints, **client_options)
        self._closers.append(lambda: self._loop.run_until_complete(async_client.aclose()))
        return CairnStore(async_client=async_client, **options)

    def driven(self, store: CairnStore) -> BaseStore:
        """``store`` with the sync method names, whatever its flavor."""
        if self.flavor == "sync":
            return store
        return cast(BaseStore, _AsyncStoreOnLoop(store, self._loop))

    def store(self, **options: Any) -> BaseStore:
        return self.driven(self.cairn_store(**options))

    def node(self, ops: Ops, update: Update) -> Callable[..., Any]:
        """A graph node that runs ``ops`` on the graph's store (``batch`` or ``abatch``)
        and returns ``update`` of their results."""
        if self.flavor == "sync":

            def run(state: dict[str, Any], store: BaseStore) -> dict[str, Any]:
                return update(store.batch(ops(state)))

            return run

        async def arun(state: dict[str, Any], store: BaseStore) -> dict[str, Any]:
            return update(await store.abatch(ops(state)))

        return arun

    def invoke(self, graph: CompiledStateGraph[Any], state: dict[str, Any]) -> dict[str, Any]:
        if self.flavor == "sync":
            return cast(dict[str, Any], graph.invoke(state))
        return cast(dict[str, Any], self._loop.run_until_complete(graph.ainvoke(state)))

    def close(self) -> None:
        for close in self._closers:
            close()
        self._loop.close()


@pytest.fixture
def lg(flavor: str, cluster: LocalCluster, prefix: str) -> Iterator[Harness]:
    harness = Harness(flavor, cluster.endpoints, f"{prefix}lg/")
    yield harness
    harness.close()


# --- items, deletes, re-creation -------------------------------------------------------


def test_put_get_delete_and_put_again(lg: Harness, api: Cairn) -> None:
    store = lg.store()
    before = datetime.now(timezone.utc) - timedelta(seconds=5)
    store.put(("users", "alice"), "prefs", {"theme": "dark"})
    store.put(("users", "alice"), "prefs", {"theme": "light", "font": 12})
    item = store.get(("users", "alice"), "prefs")
    assert item is not None
    assert (item.namespace, item.key, item.value) == (
        ("users", "alice"),
        "prefs",
        {"theme": "light", "font": 12},
    )
    assert item.created_at == item.updated_at
    assert before < item.updated_at < datetime.now(timezone.utc) + timedelta(seconds=5)
    key = f"{lg.prefix}users/alice/prefs"
    assert api.read(key).value == {"theme": "light", "font": 12}

    store.delete(("users", "alice"), "prefs")
    assert store.get(("users", "alice"), "prefs") is None
    forgotten = api.read(key)
    assert forgotten.state is State.FORGOTTEN
    assert forgotten.tombstone is not None
    assert forgotten.tombstone.reason == DELETE_REASON

    store.put(("users", "alice"), "prefs", {"theme": "dark"})
    again = store.get(("users", "alice"), "prefs")
    assert again is not None
    assert again.value == {"theme": "dark"}
    assert api.read(key).generation == 2, "the put cleared the tombstone: a new incarnation"


def test_with_recreate_deleted_off_a_forget_is_final(lg: Harness, api: Cairn) -> None:
    store = lg.store(recreate_deleted=False, reason="the user asked to forget it")
    store.put(NOTES, "address", {"city": "Lyon"})
    store.delete(NOTES, "address")
    with pytest.raises(KeyForgotten) as refused:
        store.put(NOTES, "address", {"city": "Lyon"})
    assert refused.value.tombstone is not None
    assert refused.value.tombstone.reason == "the user asked to forget it"
    assert api.read(f"{lg.prefix}notes/address").state is State.FORGOTTEN


def test_namespaces_and_keys_with_odd_characters_map_to_escaped_cairn_keys(
    lg: Harness, api: Cairn
) -> None:
    store = lg.store()
    namespace = ("a/b", "100%", "tab\there", "ünï ☃")
    store.put(namespace, "k/1\x85", {"v": 1})
    store.put(("a/bc",), "sibling", {"v": 2})
    cairn_key = f"{lg.prefix}a%2Fb/100%25/tab%09here/ünï ☃/k%2F1%C2%85"
    assert api.read(cairn_key).value == {"v": 1}
    item = store.get(namespace, "k/1\x85")
    assert item is not None
    assert (item.namespace, item.key) == (namespace, "k/1\x85")
    assert [found.key for found in store.search(("a/b",))] == ["k/1\x85"]
    assert store.list_namespaces(prefix=("a/b",)) == [namespace]


def test_notes_under_the_prefix_that_the_store_cannot_have_written_are_not_items(
    lg: Harness, api: Cairn
) -> None:
    store = lg.store()
    store.put(NOTES, "mine", {"v": 1})
    api.write(f"{lg.prefix}notes/scalar", "not a JSON object")
    api.write(f"{lg.prefix}notes%2fbad/k", {"v": 2})  # not how the store escapes "/"
    api.write(f"{lg.prefix}toplevel", {"v": 3})  # no namespace: a put cannot make it
    assert store.get(NOTES, "scalar") is None
    assert [item.key for item in store.search(())] == ["mine"]
    assert store.list_namespaces() == [NOTES]


def test_ttl_and_bad_namespaces_are_refused_before_anything_is_written(lg: Harness) -> None:
    store = lg.store()
    with pytest.raises(NotImplementedError, match="TTL"):
        store.put(NOTES, "k", {"v": 1}, ttl=5)
    with pytest.raises(NotImplementedError, match="TTL"):
        store.batch([PutOp(NOTES, "first", {"v": 1}), PutOp(NOTES, "k", {"v": 1}, ttl=1.0)])
    with pytest.raises(InvalidNamespaceError):
        store.batch([PutOp(NOTES, "first", {"v": 1}), GetOp(("a.b",), "k")])
    assert store.search(NOTES) == []


@pytest.mark.parametrize(
    "ops",
    [
        [GetOp((), "toplevel")],
        [PutOp(NOTES, "first", {"v": 1}), PutOp((), "toplevel", None)],
        [PutOp(NOTES, "first", {"v": 1}), PutOp((), "toplevel", {"owner": "agent"})],
        [PutOp(NOTES, "first", {"v": 1}), PutOp(("langgraph", "x"), "k", {"v": 1})],
    ],
)
def test_a_batch_reaches_no_note_right_under_the_prefix_and_puts_no_langgraph_root(
    lg: Harness, api: Cairn, ops: list[Op]
) -> None:
    store = lg.store()
    toplevel = f"{lg.prefix}toplevel"
    api.write(toplevel, {"owner": "ops"})  # not an item: no namespace
    with pytest.raises(InvalidNamespaceError):
        store.batch(ops)
    record = api.read(toplevel)
    assert (record.state, record.value) == (State.ACTIVE, {"owner": "ops"})
    assert store.search(()) == [], "checked before any operation ran"


@pytest.mark.parametrize(
    ("op", "operation"),
    [
        (PutOp(NOTES, 7, {"v": 1}), "put"),  # type: ignore[arg-type]
        (PutOp(NOTES, b"k", None), "delete"),  # type: ignore[arg-type]
        (GetOp(NOTES, None), "get"),  # type: ignore[arg-type]
    ],
)
def test_a_key_that_is_not_a_str_is_refused_before_the_batch_changes_anything(
    lg: Harness, op: Op, operation: str
) -> None:
    store = lg.store()
    with pytest.raises(InvalidInput, match=f"^invalid_input: {operation}: key: expected a str"):
        store.batch([PutOp(NOTES, "first", {"v": 1}), op])
    assert store.search(NOTES) == []


_WRITTEN = [State.ACTIVE, State.REVOKED, State.FORGOTTEN]


@pytest.mark.parametrize(
    ("op", "refusal"),
    [
        (PutOp("ns", "k", {"v": 1}), "put: namespace"),  # type: ignore[arg-type]
        (PutOp("ns", "k", None), "delete: namespace"),  # type: ignore[arg-type]
        (GetOp("ns", "k"), "get: namespace"),  # type: ignore[arg-type]
        (SearchOp("ns"), "search: namespace_prefix"),  # type: ignore[arg-type]
        (
            ListNamespacesOp((MatchCondition("suffix", "ns"),)),  # type: ignore[arg-type]
            "list_namespaces: suffix",
        ),
    ],
)
def test_a_namespace_that_is_a_str_is_refused_before_the_batch_changes_anything(
    lg: Harness, api: Cairn, op: Op, refusal: str
) -> None:
    store = lg.store()
    with pytest.raises(InvalidNamespaceError, match=f"^{refusal}: expected a tuple of labels"):
        store.batch([PutOp(NOTES, "first", {"v": 1}), op])
    assert api.list_page(lg.prefix, states=_WRITTEN).items == [], "not ('n', 's'), nor first"


def test_the_methods_refuse_a_namespace_that_is_a_str_and_take_a_list(
    lg: Harness, api: Cairn
) -> None:
    store = lg.store()
    with pytest.raises(InvalidNamespaceError, match="put: namespace"):
        store.put("ns", "k", {"v": 1})  # type: ignore[arg-type]
    with pytest.raises(InvalidNamespaceError, match="get: namespace"):
        store.get("ns", "k")  # type: ignore[arg-type]
    with pytest.raises(InvalidNamespaceError, match="delete: namespace"):
        store.delete("ns", "k")  # type: ignore[arg-type]
    with pytest.raises(InvalidNamespaceError, match="search: namespace_prefix"):
        store.search("ns")  # type: ignore[arg-type]
    with pytest.raises(InvalidNamespaceError, match="list_namespaces: prefix"):
        store.list_namespaces(prefix="ns")  # type: ignore[arg-type]
    assert api.list_page(lg.prefix, states=_WRITTEN).items == []
    store.put(["users", "bob"], "k", {"v": 1})  # type: ignore[arg-type]
    item = store.get(("users", "bob"), "k")
    assert item is not None
    assert item.namespace == ("users", "bob")


def test_get_and_delete_need_a_namespace_as_put_does(lg: Harness, api: Cairn) -> None:
    store = lg.store()
    toplevel = f"{lg.prefix}toplevel"
    api.write(toplevel, {"owner": "ops"})
    with pytest.raises(InvalidNamespaceError):
        store.get((), "toplevel")
    with pytest.raises(InvalidNamespaceError):
        store.delete((), "toplevel")
    assert api.read(toplevel).state is State.ACTIVE
    # LangGraph's get and delete allow the root label its put refuses; so does the store.
    assert store.get(("langgraph",), "k") is None
    store.delete(("langgraph",), "k")


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"page_size": 1001}, "page_size"),
        ({"recall_limit": 10**6}, "recall_limit"),
        ({"reason": ""}, "reason"),
        ({"reason": " \n\t"}, "reason"),
        ({"reason": "erased\x00"}, "reason"),
        ({"reason": "r" * 4097}, "reason: 4097 bytes; at most 4096"),
        ({"reason": "é" * 2049}, "reason: 4098 bytes"),  # bytes of UTF-8, not characters
        ({"reason": "lone \ud800"}, "reason"),  # no UTF-8: could never be sent
        ({"prefix": "a\n/"}, "prefix"),
        ({"prefix": "p" * 510 + "/"}, "prefix: 511 bytes; at most 510"),
        ({"prefix": "p" * 600 + "/"}, "prefix: 601 bytes"),
        ({"prefix": "\ud800/"}, "prefix"),
    ],
)
def test_options_the_node_would_refuse_at_every_call_are_refused_by_the_constructor(
    lg: Harness, options: dict[str, Any], named: str
) -> None:
    with pytest.raises(InvalidInput, match=f"^invalid_input: {named}"):
        lg.cairn_store(**options)


def test_the_largest_page_and_recall_sizes_and_a_multi_line_reason_are_taken_by_the_node(
    lg: Harness, api: Cairn
) -> None:
    with pytest.raises(InvalidRequest):
        api.list_page(lg.prefix, limit=1001)  # the cap the constructor's bound mirrors
    reason = "erased on request:\n\tticket 42"
    store = lg.store(page_size=1000, recall_limit=1000, reason=reason)
    _one_item_round_trip(store, api, f"{lg.prefix}notes/k", NOTES, "k", reason)
    assert [item.key for item in store.search(NOTES, query="topic:db")] == []


def _one_item_round_trip(
    store: BaseStore, api: Cairn, cairn_key: str, namespace: tuple[str, ...], key: str, reason: str
) -> None:
    """Put, get, search, list and delete one item (anchored ``topic:db``) through ``store``,
    whose cairn key is ``cairn_key``: the delete's tombstone carries ``reason``."""
    store.put(namespace, key, {"anchors": ["topic:db"]})
    item = store.get(namespace, key)
    assert item is not None
    assert (item.namespace, item.key) == (namespace, key)
    assert [found.key for found in store.search(namespace)] == [key]
    assert [found.key for found in store.search(namespace, query="topic:db")] == [key]
    assert store.list_namespaces() == [namespace]
    store.delete(namespace, key)
    tombstone = api.read(cairn_key).tombstone
    assert tombstone is not None
    assert tombstone.reason == reason


def test_the_longest_reason_and_prefix_the_constructor_takes_are_taken_by_the_node(
    lg: Harness, api: Cairn
) -> None:
    reason = "é" * 2048  # 4096 bytes
    with pytest.raises(InvalidRequest, match="reason"):
        api.forget(f"{lg.prefix}notes/k", reason + ".")  # the cap the constructor mirrors
    # 510 bytes: room for the shortest item, a one-byte label, its "/" and an empty key.
    prefix = lg.prefix + "p" * (509 - len(lg.prefix)) + "/"
    with pytest.raises(InvalidRequest, match="key: 513 bytes"):
        api.write(f"{prefix}a/k", {"v": 1})  # any other item is one byte too long
    store = lg.store(prefix=prefix, reason=reason)
    _one_item_round_trip(store, api, f"{prefix}a/", ("a",), "", reason)


# --- revoked notes ---------------------------------------------------------------------


def test_a_revoked_note_comes_with_its_warning_and_is_not_overwritten(
    lg: Harness, api: Cairn
) -> None:
    store = lg.store()
    store.put(NOTES, "diet", {"text": "likes peanuts"})
    key = f"{lg.prefix}notes/diet"
    api.revoke(key, "allergic to peanuts")

    item = store.get(NOTES, "diet")
    assert item is not None
    assert list(item.value) == [WARNING_FIELD, "text"], "the warning comes first"
    warning = item.value[WARNING_FIELD]
    assert warning.startswith(f'[{key}] [REVOKED] Previously believed: {{"text":"likes peanuts"}}.')
    assert "allergic to peanuts" in warning
    assert [found.value for found in store.search(NOTES)] == [item.value]

    with pytest.raises(KeyRevoked) as refused:
        store.put(NOTES, "diet", {"text": "loves peanuts"})
    assert refused.value.rendered == warning
    still = store.get(NOTES, "diet")
    assert still is not None
    assert still.value["text"] == "likes peanuts"

    overriding = lg.store(override_revocation=True)
    # Read, modify, write: the store's warning field is not written back.
    overriding.put(NOTES, "diet", {**item.value, "text": "no peanuts"})
    rewritten = store.get(NOTES, "diet")
    assert rewritten is not None
    assert rewritten.value == {"text": "no peanuts"}


def test_a_superseded_note_comes_with_its_marker(lg: Harness, api: Cairn) -> None:
    store = lg.store()
    store.put(NOTES, "old", {"text": "deploy with make"})
    store.put(NOTES, "new", {"text": "deploy with just"})
    api.supersede(f"{lg.prefix}notes/old", f"{lg.prefix}notes/new")
    old = store.get(NOTES, "old")
    new = store.get(NOTES, "new")
    assert old is not None
    assert new is not None
    assert f"[SUPERSEDED by {lg.prefix}notes/new]" in old.value[WARNING_FIELD]
    assert WARNING_FIELD not in new.value


# --- search ----------------------------------------------------------------------------


def test_search_keeps_the_values_that_pass_the_filter(lg: Harness) -> None:
    store = lg.store()
    store.put(NOTES, "a", {"kind": "fact", "score": 3, "meta": {"lang": "py"}})
    store.put(NOTES, "b", {"kind": "fact", "score": 7, "meta": {"lang": "rs"}})
    store.put(NOTES, "c", {"kind": "plan", "score": 9, "meta": {"lang": "py"}})

    def keys(**query: Any) -> list[str]:
        return [item.key for item in store.search(NOTES, **query)]

    assert keys(filter={"kind": "fact"}) == ["a", "b"]
    assert keys(filter={"kind": "fact", "meta": {"lang": "py"}}) == ["a"]
    assert keys(filter={"score": {"$gt": 3, "$lte": 9}}) == ["b", "c"]
    assert keys(filter={"kind": {"$ne": "fact"}}) == ["c"]
    assert keys(filter={"missing": 1}) == []
    # As LangGraph's in-memory store: a limit of 0 is no items, by listing or by cues.
    assert keys(limit=0) == []
    assert keys(limit=0, offset=1) == []
    assert keys(limit=1, offset=1) == ["b"]


def test_search_pages_through_more_than_one_cairn_page(lg: Harness) -> None:
    store = lg.store(page_size=3)
    for n in range(10):
        store.put(NOTES, f"k{n:02}", {"n": n, "even": n % 2 == 0})
    assert [item.key for item in store.search(NOTES, limit=4, offset=5)] == [
        "k05",
        "k06",
        "k07",
        "k08",
    ]
    evens = store.search(NOTES, filter={"even": True}, limit=3, offset=1)
    assert [item.value["n"] for item in evens] == [2, 4, 6]
    assert len(store.search(NOTES, limit=100)) == 10
    assert store.search(NOTES, offset=10) == []


def test_a_query_of_anchors_recalls_by_cue_and_other_text_matches_words(lg: Harness) -> None:
    store = lg.store()
    store.put(NOTES, "db", {"text": "Use Postgres 16", "anchors": ["topic:db", "path:src/db/"]})
    store.put(NOTES, "ui", {"text": "React", "anchors": ["topic:ui"]})
    store.put(NOTES, "pool", {"text": "pgbouncer", "labels": ["topic:db"]}, index=["labels[*]"])
    store.put(NOTES, "quiet", {"text": "postgres internals", "anchors": ["topic:db"]}, index=False)

    by_topic = store.search(NOTES, query="topic:db")
    assert sorted(item.key for item in by_topic) == ["db", "pool"]
    assert all(item.score == 1.0 for item in by_topic)

    ranked = store.search(NOTES, query="topic:db path:src/db/schema.sql")
    assert [(item.key, item.score) for item in ranked] == [("db", 1.0), ("pool", 0.5)]
    assert [item.key for item in store.search(NOTES, query="topic:db path:src/", offset=1)] == [
        "pool"
    ]
    filtered = store.search(NOTES, query="topic:db", filter={"text": "pgbouncer"})
    assert [item.key for item in filtered] == ["pool"]

    assert [item.key for item in store.search(NOTES, query="postgres")] == ["db", "quiet"]
    assert [item.key for item in store.search(NOTES, query="POSTGRES 16")] == ["db"]
    assert [item.score for item in store.search(NOTES, query="react")] == [None]


@pytest.mark.parametrize(
    ("op", "named"),
    [
        (SearchOp(NOTES, limit=-1), "search: limit"),
        (SearchOp(NOTES, query="topic:db", offset=-1), "search: offset"),
        (ListNamespacesOp(limit=-1), "list_namespaces: limit"),
        (ListNamespacesOp(offset=-1), "list_namespaces: offset"),
    ],
)
def test_a_negative_limit_or_offset_is_refused_before_the_batch_changes_anything(
    lg: Harness, op: Op, named: str
) -> None:
    store = lg.store()
    with pytest.raises(InvalidInput, match=f"^invalid_input: {named}: -1; expected an int"):
        store.batch([PutOp(NOTES, "first", {"v": 1}), op])
    assert store.search(NOTES) == []


@pytest.mark.parametrize(
    ("op", "refused"),
    [
        (SearchOp(NOTES, filter={"v": {"$in": [1]}}), "search: filter: unsupported filter"),
        (SearchOp(NOTES, filter={"a": {"b": {"$ne": {"$nin": 1}}}}), "search: filter: "),
        (
            ListNamespacesOp(match_conditions=(MatchCondition("infix", ("a",)),)),  # type: ignore[arg-type]
            "list_namespaces: match_type: 'infix'",
        ),
    ],
)
def test_a_filter_or_match_type_the_store_cannot_evaluate_changes_nothing(
    lg: Harness, op: Op, refused: str
) -> None:
    """Refused before the batch runs, not when the operation's turn comes (a ValueError
    after the put before it was written)."""
    store = lg.store()
    with pytest.raises(InvalidInput, match=f"^invalid_input: {re.escape(refused)}"):
        store.batch([PutOp(NOTES, "first", {"v": 1}), op])
    assert store.search(NOTES) == []


def test_search_and_list_namespaces_refuse_a_negative_limit_or_offset(lg: Harness) -> None:
    store = lg.store()
    store.put(NOTES, "a", {"v": 1})
    store.put(NOTES, "b", {"v": 2})
    with pytest.raises(InvalidInput, match="search: limit"):
        store.search(NOTES, limit=-1)  # not every item but the last, as a slice would
    with pytest.raises(InvalidInput, match="search: offset"):
        store.search(NOTES, offset=-1)
    with pytest.raises(InvalidInput, match="list_namespaces: limit"):
        store.list_namespaces(limit=-1)
    with pytest.raises(InvalidInput, match="list_namespaces: offset"):
        store.list_namespaces(offset=-1)


def test_a_cue_given_twice_counts_once_in_the_score(lg: Harness) -> None:
    store = lg.store()
    store.put(NOTES, "db", {"anchors": ["topic:db"]})

    def scored(query: str) -> list[tuple[str, float | None]]:
        return [(item.key, item.score) for item in store.search(NOTES, query=query)]

    assert scored("topic:db topic:db") == [("db", 1.0)]
    assert scored("topic:db path:src/ topic:db") == [("db", 0.5)]


# --- namespaces ------------------------------------------------------------------------


def test_list_namespaces_by_prefix_suffix_and_depth(lg: Harness) -> None:
    store = lg.store(page_size=2)
    namespaces = [("a", "b", "c"), ("a", "b", "d", "e"), ("a", "b", "d", "i"), ("a", "b", "f")]
    namespaces.append(("a", "c", "f"))
    for namespace in namespaces:
        store.put(namespace, "k", {"v": 1})
    assert store.list_namespaces(prefix=("a", "b"), max_depth=3) == [
        ("a", "b", "c"),
        ("a", "b", "d"),
        ("a", "b", "f"),
    ]
    assert store.list_namespaces(suffix=("f",)) == [("a", "b", "f"), ("a", "c", "f")]
    assert store.list_namespaces(prefix=("a", "*", "f")) == [("a", "b", "f"), ("a", "c", "f")]
    assert store.list_namespaces(max_depth=2, limit=1, offset=1) == [("a", "c")]
    only_c = ListNamespacesOp((MatchCondition("prefix", ("a", "c")),))
    assert store.batch([only_c]) == [[("a", "c", "f")]]

    store.delete(("a", "c", "f"), "k")
    assert store.list_namespaces(max_depth=2) == [("a", "b")], "no live item, no namespace"


@pytest.mark.parametrize("max_depth", [0, -1, True, 1.5, "2"])
def test_a_max_depth_below_1_or_not_an_int_is_refused_before_the_batch_changes_anything(
    lg: Harness, max_depth: Any
) -> None:
    store = lg.store()
    listing = ListNamespacesOp(max_depth=max_depth)
    refusal = re.escape(f"list_namespaces: max_depth: {max_depth!r}; expected an int, 1 or more")
    with pytest.raises(InvalidInput, match=f"^invalid_input: {refusal}"):
        store.batch([PutOp(NOTES, "first", {"v": 1}), listing])
    assert store.search(NOTES) == []
    with pytest.raises(InvalidInput, match="max_depth"):
        store.list_namespaces(max_depth=max_depth)  # not [()] nor the namespaces cut short


def test_a_max_depth_of_1_lists_the_root_labels(lg: Harness) -> None:
    store = lg.store()
    store.put(("a", "b"), "k", {"v": 1})
    store.put(("c",), "k", {"v": 1})
    assert store.list_namespaces(max_depth=1) == [("a",), ("c",)]


# --- replicas --------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_a_deleted_item_is_returned_by_no_replica_to_a_session_reader(
    lg: Harness, make_cluster: Callable[..., LocalCluster]
) -> None:
    local = make_cluster(3)
    session = Session()
    writer = lg.store(endpoints=local.endpoints, session=session)
    writer.put(NOTES, "secret", {"text": "the door code is 1234"})
    # A replica that misses the delete and serves again before it caught up (without the
    # session, such a replica at times still answers the old value).
    lagging = next(node for node in local.node_ids if node != local.leader_id())
    local.stop(lagging)
    writer.delete(NOTES, "secret")
    local.start(lagging)
    # Each replica answers from its own state ("any"), yet never behind the session; the
    # lagging one first, while it may still be behind.
    lagging_url = local.node(lagging).url
    for endpoint in [lagging_url, *(url for url in local.endpoints if url != lagging_url)]:
        replica = lg.store(endpoints=[endpoint], session=session, consistency="any")
        assert replica.get(NOTES, "secret") is None
        assert replica.search(NOTES) == []


# --- a graph ---------------------------------------------------------------------------


class Memory(TypedDict, total=False):
    user: str
    fact: str
    recalled: list[str]
    warnings: list[str]


def _remember(state: dict[str, Any]) -> list[Op]:
    value = {"text": state["fact"], "anchors": ["topic:food"]}
    return [PutOp(("users", state["user"]), "latest", value)]


def _recall(state: dict[str, Any]) -> list[Op]:
    return [SearchOp(("users", state["user"]), query="topic:food")]


def _nothing(results: list[Result]) -> dict[str, Any]:
    return {}


def _recalled(results: list[Result]) -> dict[str, Any]:
    items = cast(list[Any], results[0])
    return {
        "recalled": [item.value["text"] for item in items],
        "warnings": [item.value[WARNING_FIELD] for item in items if WARNING_FIELD in item.value],
    }


def test_a_langgraph_graph_remembers_and_recalls_through_the_store(lg: Harness, api: Cairn) -> None:
    store = lg.cairn_store()
    lg.driven(store).put(
        ("users", "alice"), "old", {"text": "likes peanuts", "anchors": ["topic:food"]}
    )
    api.revoke(f"{lg.prefix}users/alice/old", "allergic to peanuts")

    builder = StateGraph(Memory)
    builder.add_node("remember", lg.node(_remember, _nothing))
    builder.add_node("recall", lg.node(_recall, _recalled))
    builder.add_edge(START, "remember")
    builder.add_edge("remember", "recall")
    builder.add_edge("recall", END)
    final = lg.invoke(builder.compile(store=store), {"user": "alice", "fact": "likes oat milk"})

    assert final["recalled"] == ["likes peanuts", "likes oat milk"], "the revoked note first"
    [warning] = final["warnings"]
    assert "] [REVOKED] Previously believed: {" in warning
    assert '"text":"likes peanuts"' in warning
    assert "allergic to peanuts" in warning
    latest = lg.driven(store).get(("users", "alice"), "latest")
    assert latest is not None
    assert latest.value == {"text": "likes oat milk", "anchors": ["topic:food"]}


# --- the guide ---------------------------------------------------------------------------


def _blocks(language: str) -> list[str]:
    """The guide's code blocks in ``language``, but those marked ``<!-- no-run: why -->``."""
    pattern = rf"(<!-- no-run: [^>]*-->\n)?```{language}\n(.*?)```"
    return [code for skip, code in re.findall(pattern, GUIDE.read_text(), re.DOTALL) if not skip]


def _timeless(text: str) -> str:
    return re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", "TIME", text)


def test_the_guide_example_prints_what_the_guide_shows(
    cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    [example] = _blocks("python")
    [shown] = _blocks("text")
    monkeypatch.setenv("CAIRN_ENDPOINTS", ",".join(cluster.endpoints))
    monkeypatch.setenv("CAIRN_ACTOR", "admin")
    for name in ("CAIRN_TOKEN", "CAIRN_TOKEN_FILE", "CAIRN_CACERT"):
        monkeypatch.delenv(name, raising=False)
    exec(compile(example, f"{GUIDE}:example", "exec"), {"__name__": "__guide__"})
    assert _timeless(capsys.readouterr().out) == _timeless(shown)


# --- without a cluster -----------------------------------------------------------------


def test_a_store_needs_the_client_of_the_calls_it_makes() -> None:
    with pytest.raises(TypeError, match="needs client"):
        CairnStore()
    with Cairn(["127.0.0.1:9"]) as client:
        with pytest.raises(ValueError, match="end with '/'"):
            CairnStore(client, prefix="langgraph")
        with pytest.raises(RuntimeError, match="only a sync client"):
            asyncio.run(CairnStore(client).aget(NOTES, "k"))

    async def sync_call_on_an_async_store() -> None:
        async with AsyncCairn(["127.0.0.1:9"]) as async_client:
            CairnStore(async_client=async_client).get(NOTES, "k")

    with pytest.raises(RuntimeError, match="only an async client"):
        asyncio.run(sync_call_on_an_async_store())


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"prefix": 5}, "prefix"),
        ({"reason": None}, "reason"),
        ({"recreate_deleted": "yes"}, "recreate_deleted"),
        ({"override_revocation": 1}, "override_revocation"),
        ({"anchor_fields": "tags[*]"}, "anchor_fields"),  # not the paths "t", "a", ...
        ({"anchor_fields": [1]}, "anchor_fields"),
        ({"page_size": 0}, "page_size"),
        ({"recall_limit": "10"}, "recall_limit"),
    ],
)
def test_store_options_of_the_wrong_type_are_invalid_input(
    options: dict[str, Any], named: str
) -> None:
    with (
        Cairn(["127.0.0.1:9"]) as client,
        pytest.raises(InvalidInput, match=f"^invalid_input: {named}"),
    ):
        CairnStore(client, **options)


def test_a_client_that_is_not_a_cairn_client_is_invalid_input() -> None:
    with pytest.raises(InvalidInput, match="client: expected Cairn"):
        CairnStore("notaclient")  # type: ignore[arg-type]
    with Cairn(["127.0.0.1:9"]) as client, pytest.raises(InvalidInput, match="async_client"):
        CairnStore(async_client=client)  # type: ignore[arg-type]


def test_a_put_of_a_value_or_index_of_the_wrong_type_is_refused_before_anything_is_sent() -> None:
    # Port 9 (discard) is never a cairn node: a put that reached the client would fail
    # with ConnectionFailed instead.
    with Cairn(["127.0.0.1:9"], retry=RetryPolicy(retries_max=0)) as client:
        store = CairnStore(client)
        with pytest.raises(InvalidInput, match="value: expected a dict"):
            store.put(NOTES, "k", "string")  # type: ignore[arg-type]
        with pytest.raises(InvalidInput, match="index: expected a list"):
            store.put(NOTES, "k", {"anchors": ["topic:a"]}, index="anchors[*]")  # type: ignore[arg-type]
        with pytest.raises(InvalidInput, match="index"):
            store.batch([PutOp(NOTES, "k", {"v": 1}, index=True)])  # type: ignore[arg-type]
        with pytest.raises(ConnectionFailed):
            store.put(NOTES, "k", {"anchors": ["topic:a"]}, index=["anchors[*]"])


@pytest.mark.parametrize(
    ("namespace", "key"),
    [
        (("users", "alice"), "prefs"),
        (("a/b", "%2F", "100%"), "k/1"),
        (("line\nbreak", "nul\x00", "c1\x85", "del\x7f"), "tab\t"),
        (("ünï", "☃ snow", "日本"), ""),
    ],
)
def test_keys_decode_to_the_namespace_and_key_they_encode(
    namespace: tuple[str, ...], key: str
) -> None:
    codec = KeyCodec("lg/")
    cairn_key = codec.key(namespace, key)
    assert not any(ord(char) < 0x20 or 0x7F <= ord(char) <= 0x9F for char in cairn_key)
    assert cairn_key.count("/") == len(namespace) + 1
    assert codec.decode(cairn_key) == (namespace, key)


@pytest.mark.parametrize(
    "cairn_key",
    [
        "other/k",
        "lg/a%2fb/k",
        "lg/a%zz/k",
        "lg/%FF/k",
        "lg/%2/k",
        "lg/a//k",
        "lg/%61/k",
        "lg/toplevel",  # an empty namespace, which LangGraph's put refuses
    ],
)
def test_keys_the_store_cannot_have_written_decode_to_nothing(cairn_key: str) -> None:
    assert KeyCodec("lg/").decode(cairn_key) is None


def test_filters_compare_like_langgraphs_in_memory_store() -> None:
    value = {"n": 5, "tags": ["x", "y"], "meta": {"lang": "py", "v": 2}, "flag": True}
    assert matches_filter(value, None)
    assert matches_filter(value, {"tags": ["x", "y"], "meta": {"lang": "py"}})
    assert not matches_filter(value, {"tags": ["x"]})
    assert matches_filter(value, {"n": {"$gte": 5, "$lt": 6}, "meta": {"v": {"$eq": 2}}})
    assert not matches_filter(value, {"n": {"$gt": 5}})
    assert not matches_filter(value, {"flag": {"$gt": 0}}), "booleans are not numbers"
    assert not matches_filter(value, {"missing": {"$lt": 1}})
    assert matches_filter(value, {"missing": {"$ne": 1}})
    with pytest.raises(ValueError, match=r"\$in"):
        matches_filter(value, {"n": {"$in": [5]}})


def test_a_query_is_cues_only_when_every_word_is_an_anchor() -> None:
    assert query_cues("topic:db  path:src/db/") == ["topic:db", "path:src/db/"]
    assert query_cues("path:a topic:db path:a") == ["path:a", "topic:db"]
    assert query_cues("topic:db and more") is None
    assert query_cues("color:red") is None
    assert query_cues("topic:") is None
    assert text_matches({"a": {"b": ["Deploy with JUST"]}, "n": 1}, "just deploy")
    assert not text_matches({"a": "deploy"}, "deploy 1")
