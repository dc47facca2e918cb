"""Every operation of SPEC §5 against a real 3-node cluster, with ``Cairn`` and
``AsyncCairn`` alike (the ``api`` fixture runs each test once per flavor)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

import pytest

from cairn_client import (
    Cairn,
    Consistency,
    EventKind,
    ForgetRequest,
    InvalidInput,
    InvalidRequest,
    InvalidTransition,
    KeyForgotten,
    KeyRevoked,
    NotFound,
    RequestIdReused,
    Session,
    StaleWrite,
    State,
    TooLarge,
    VersionConflict,
    WriteRequest,
    new_request_id,
)
from cairn_client.testing import LocalCluster


def test_write_then_read_returns_the_value_rendered_and_where_it_was_served(
    api: Cairn, prefix: str
) -> None:
    key = f"{prefix}db"
    written = api.write(key, {"engine": "postgres"}, anchors=["path:src/db/"], tags=["infra"])
    assert (written.state, written.version, written.generation, written.replayed) == (
        State.ACTIVE,
        1,
        1,
        False,
    )
    record = api.read(key)
    assert record.value == {"engine": "postgres"}
    assert record.rendered == f'[{key}] {{"engine":"postgres"}}'
    assert record.meta.actor == "tester"
    assert record.meta.anchors == ["path:src/db/"]
    assert record.revision == written.revision
    assert record.served.applied_index >= written.revision
    assert record.served.consistency.value == "linearizable"


def test_bounded_and_any_reads_are_served_by_any_node_yet_read_your_writes(
    connect: Callable[..., Cairn], cluster: LocalCluster, prefix: str
) -> None:
    api = connect(cluster.endpoints, actor="tester", session=Session())
    key = f"{prefix}k"
    written = api.write(key, 1)
    reads = [api.read(key, consistency="any") for _ in range(6)]
    assert len({read.served.node_id for read in reads}) > 1, "round-robin over the endpoints"
    # The session's revision goes as min_revision: a follower answers once it applied it.
    assert all(read.served.applied_index >= written.revision for read in reads)
    assert all(read.value == 1 for read in reads)
    bounded = api.read(key, consistency="bounded", max_staleness_ms=5000)
    assert bounded.served.consistency.value == "bounded"
    # A staleness bound alone means bounded, per read and as the client's default; a
    # consistency named explicitly wins.
    alone = api.read(key, max_staleness_ms=5000)
    assert alone.served.consistency.value == "bounded"
    by_default = connect(cluster.endpoints, actor="tester", max_staleness_ms=5000)
    assert by_default.read(key).served.consistency.value == "bounded"
    assert by_default.list(prefix).served.consistency.value == "bounded"
    named = by_default.read(key, consistency="linearizable")
    assert named.served.consistency.value == "linearizable"


def test_expected_version_makes_a_write_conditional(api: Cairn, prefix: str) -> None:
    key = f"{prefix}cfg"
    api.write(key, 1, expected_version=0)
    with pytest.raises(VersionConflict) as conflict:
        api.write(key, 2, expected_version=0)
    assert conflict.value.current_version == 1
    assert conflict.value.status == 409
    assert api.write(key, 2, expected_version=1).version == 2


def test_forget_leaves_a_tombstone_that_blocks_writes_until_cleared(
    api: Cairn, prefix: str
) -> None:
    key = f"{prefix}ssn"
    api.write(key, "123-45-6789")
    forgotten = api.forget(key, "user asked for deletion")
    tombstone = forgotten.tombstone
    assert tombstone is not None
    assert (forgotten.state, tombstone.reason, tombstone.actor) == (
        State.FORGOTTEN,
        "user asked for deletion",
        "tester",
    )
    value_hash = hashlib.sha256(json.dumps("123-45-6789").encode()).hexdigest()
    assert tombstone.value_hash == value_hash

    again = api.forget(key, "again")
    assert again.already is True
    assert again.tombstone == tombstone

    record = api.read(key)
    assert (record.state, record.value, record.forget_epoch) == (State.FORGOTTEN, None, 2)
    assert api.tombstone(tombstone.id) == tombstone

    with pytest.raises(KeyForgotten) as refused:
        api.write(key, "123-45-6789")
    assert refused.value.tombstone == tombstone

    recreated = api.write(key, "new", clear_tombstone=True, reason="re-verified")
    assert (recreated.generation, recreated.forget_epoch) == (2, 2)


def test_revoke_keeps_a_warning_until_reinstated(api: Cairn, prefix: str) -> None:
    key = f"{prefix}retry"
    api.write(key, "retries fix the flake")
    revoked = api.revoke(key, "derived from a misread log")
    assert revoked.state == State.REVOKED
    record = api.read(key)
    assert record.rendered.startswith(f"[{key}] [REVOKED] Previously believed: retries fix")
    assert record.revocation is not None
    assert record.revocation.reason == "derived from a misread log"

    with pytest.raises(KeyRevoked) as refused:
        api.write(key, "retries fix the flake")
    assert refused.value.rendered == record.rendered
    assert refused.value.revocation == record.revocation

    assert api.reinstate(key, reason="the log was right").state == State.ACTIVE
    assert api.reinstate(key).already is True
    api.revoke(key, "wrong again")
    overridden = api.write(key, "new evidence", override_revocation=True, reason="checked")
    assert overridden.state == State.ACTIVE


def test_flag_stale_and_supersede_show_in_the_rendered_note_and_history(
    api: Cairn, prefix: str
) -> None:
    key, replacement = f"{prefix}old", f"{prefix}new"
    api.write(key, "v", anchors=["path:a.rs"])
    api.flag_stale(key, "path:a.rs", "abc123")
    api.supersede(key, replacement, reason="renamed")
    record = api.read(key)
    assert record.rendered == f"[{key}] [STALE: path:a.rs changed since written; verify] " + (
        f"[SUPERSEDED by {replacement}] v"
    )
    assert record.superseded_by == replacement
    assert record.stale[0].observed_hash == "abc123"
    events = api.history(key).events
    assert [event.kind for event in events] == [
        EventKind.WRITTEN,
        EventKind.STALE_FLAGGED,
        EventKind.SUPERSEDED,
    ]
    assert (events[1].anchor, events[2].by, events[2].reason) == (
        "path:a.rs",
        replacement,
        "renamed",
    )


def test_probe_reports_the_value_and_retention_records(api: Cairn, prefix: str) -> None:
    key = f"{prefix}p"
    absent = api.probe(key)
    assert (absent.state, absent.version, absent.value_present) == (State.ABSENT, 0, False)
    written = api.write(key, 1)
    api.forget(key, "gone")
    probed = api.probe(key)
    assert (probed.state, probed.value_present, probed.retention_present) == (
        State.FORGOTTEN,
        False,
        True,
    )
    assert probed.value_revision == written.revision
    assert probed.tombstone_id is not None


def test_batch_applies_all_operations_or_none(api: Cairn, prefix: str) -> None:
    a, b = f"{prefix}a", f"{prefix}b"
    result = api.batch(
        [
            WriteRequest(key=a, value=1),
            WriteRequest(key=b, value=2),
            ForgetRequest(key=a, reason="scratch"),
        ]
    )
    assert [r.state for r in result.results] == [State.ACTIVE, State.ACTIVE, State.FORGOTTEN]
    assert len({r.revision for r in result.results}) == 1, "one Raft entry"

    with pytest.raises(VersionConflict) as refused:
        api.batch([WriteRequest(key=b, value=3), WriteRequest(key=b, value=4, expected_version=9)])
    assert refused.value.op_index == 1
    assert api.read(b).value == 2, "nothing of a refused batch is applied"

    # Refused on a state an earlier op of the same batch would have made.
    with pytest.raises(KeyForgotten) as on_its_own_forget:
        api.batch([ForgetRequest(key=b, reason="r"), WriteRequest(key=b, value=5)])
    assert (on_its_own_forget.value.op_index, on_its_own_forget.value.after_op_index) == (1, 0)

    # An op given as a dict cannot say which operation it is: refused before anything is sent.
    with pytest.raises(InvalidInput) as not_a_model:
        api.batch([WriteRequest(key=b, value=6), {"key": b, "value": 7}])  # type: ignore[list-item]
    assert not_a_model.value.details == {"field": "ops[1]"}
    assert "ops[1] is a dict, not an operation model" in str(not_a_model.value)
    assert api.read(b).value == 2


def test_list_pages_and_list_all_walks_every_page(api: Cairn, prefix: str) -> None:
    keys = [f"{prefix}{i:02}" for i in range(5)]
    for key in keys:
        api.write(key, key)
    api.forget(keys[0], "drop")
    page = api.list(prefix, limit=2)
    assert [item.key for item in page.items] == keys[:2]
    assert page.next_after == keys[1]
    assert [r.key for r in api.list_all(prefix, page_size=2)] == keys
    active = api.list_all(prefix, states=["active"], page_size=3)
    assert [r.key for r in active] == keys[1:]
    assert [r.key for r in api.get_all(prefix)] == keys


def test_recall_matches_cues_with_revoked_warnings_first(api: Cairn, prefix: str) -> None:
    good, bad = f"{prefix}good", f"{prefix}bad"
    api.write(good, "use the pool", anchors=["path:src/db/"])
    api.write(bad, "raise the timeout", anchors=["path:src/db/"])
    api.revoke(bad, "made it worse")
    notes = api.recall(["path:src/db/pool.rs"], prefix=prefix).notes
    assert [note.key for note in notes] == [bad, good]
    assert notes[0].state == State.REVOKED
    assert "[REVOKED]" in notes[0].rendered
    assert notes[1].matched == ["path:src/db/pool.rs"]
    assert api.recall("path:elsewhere.rs", prefix=prefix).notes == []


def test_a_retried_request_id_replays_and_a_reused_one_is_refused(api: Cairn, prefix: str) -> None:
    key = f"{prefix}once"
    request_id = new_request_id()
    first = api.write(key, "v", request_id=request_id)
    retried = api.write(key, "v", request_id=request_id)
    assert (first.replayed, retried.replayed) == (False, True)
    assert retried.version == first.version
    with pytest.raises(RequestIdReused):
        api.write(key, "other", request_id=request_id)
    assert len(api.history(key).events) == 1


def test_based_on_revision_refuses_a_write_from_before_a_forget(api: Cairn, prefix: str) -> None:
    key = f"{prefix}fenced"
    seen = api.write(key, "v1")
    fence = api.forget(key, "wrong")
    with pytest.raises(StaleWrite) as refused:
        api.write(key, "v1 again", clear_tombstone=True, based_on_revision=seen.revision)
    assert refused.value.fence_revision == fence.revision


def test_errors_of_bad_input_are_typed(api: Cairn, prefix: str) -> None:
    with pytest.raises(NotFound) as missing:
        api.read(f"{prefix}never")
    assert missing.value.status == 404
    served = missing.value.served
    assert served is not None
    assert served.consistency == Consistency.LINEARIZABLE
    with pytest.raises(NotFound) as no_history:
        api.history(f"{prefix}never", consistency=Consistency.ANY)
    assert no_history.value.served is not None
    assert no_history.value.served.consistency == Consistency.ANY
    with pytest.raises(InvalidRequest) as bad_key:
        api.write("", 1)
    assert bad_key.value.status == 400
    with pytest.raises(InvalidRequest) as long_key:
        api.write("k" * 513, 1)
    assert (long_key.value.field, long_key.value.limit, long_key.value.size) == ("key", 512, 513)
    with pytest.raises(InvalidRequest):
        api.tombstone("not-hex!")
    with pytest.raises(InvalidRequest):
        api.recall(["path:x"], include=["forgotten"])


def test_an_explicit_empty_actor_or_request_id_is_refused_not_replaced(
    api: Cairn, prefix: str
) -> None:
    key = f"{prefix}explicit"
    api.write(key, "v1")
    with pytest.raises(InvalidRequest) as no_actor:
        api.write(key, "v2", actor="")
    assert no_actor.value.field == "actor"
    with pytest.raises(InvalidRequest) as no_actor_forget:
        api.forget(key, "why", actor="")
    assert no_actor_forget.value.field == "actor"
    with pytest.raises(InvalidRequest) as no_id:
        api.write(key, "v2", request_id="")
    assert no_id.value.field == "request_id"
    with pytest.raises(InvalidRequest) as no_batch_id:
        api.batch([WriteRequest(key=key, value="v2")], request_id="")
    assert no_batch_id.value.field == "request_id"
    assert (api.read(key).version, api.read(key).value) == (1, "v1")


def test_an_argument_too_long_for_a_url_is_invalid_input(api: Cairn) -> None:
    with pytest.raises(InvalidInput):
        api.tombstone("a" * 70_000)
    with pytest.raises(InvalidInput):
        api.rotate_token("n" * 70_000)


def test_a_value_over_the_limit_is_too_large(api: Cairn, prefix: str) -> None:
    with pytest.raises(TooLarge) as refused:
        api.write(f"{prefix}big", "x" * (1024 * 1024 + 10))
    assert refused.value.status == 413
    with pytest.raises(NotFound):
        api.read(f"{prefix}big")


def test_mem0_names_are_aliases_of_the_cairn_operations(api: Cairn, prefix: str) -> None:
    key = f"{prefix}m"
    assert api.add(key, "remember this").version == 1
    assert api.get(key).value == "remember this"
    assert [r.key for r in api.get_all(prefix)] == [key]
    api.write(key, "v2", anchors=["topic:mem0"])
    assert [n.key for n in api.search(["topic:mem0"], prefix=prefix).notes] == [key]
    deleted = api.delete(key, reason="cleanup")
    assert deleted.state == State.FORGOTTEN
    assert [e.kind for e in api.history(key).events][-1] == EventKind.FORGOTTEN


def test_watch_delivers_changes_in_revision_order(api: Cairn, prefix: str) -> None:
    key = f"{prefix}w"
    with api.watch(prefix) as events:
        written = api.write(key, 1)
        forgotten = api.forget(key, "done")
        first, second = next(events), next(events)
    assert (first.revision, first.kind, first.key) == (written.revision, EventKind.WRITTEN, key)
    assert (second.revision, second.kind, second.forget_epoch) == (
        forgotten.revision,
        EventKind.FORGOTTEN,
        2,
    )
    replay = api.watch(prefix, from_revision=written.revision)
    assert [event.revision for _, event in zip(range(2), replay, strict=False)] == [
        written.revision,
        forgotten.revision,
    ]
    replay.close()


def test_cluster_status_health_metrics_leader_and_compact(
    api: Cairn, cluster: LocalCluster
) -> None:
    status = api.cluster_status()
    assert status.role == "leader"
    assert sorted(status.voters) == cluster.node_ids
    assert api.leader() == cluster.node(status.node_id).url
    follower = next(i for i in cluster.node_ids if i != status.node_id)
    assert api.cluster_status(cluster.node(follower).client_addr).leader_id == status.node_id
    health = api.healthz(cluster.endpoints[1])
    assert (health.ok, health.node_id) == (True, 2)
    assert "cairn_mutations_ok_total" in api.metrics()
    compacted = api.compact(cluster.endpoints[2])
    assert compacted.log_purged_through <= compacted.snapshot_index


def test_init_of_an_initialized_cluster_is_refused(api: Cairn, cluster: LocalCluster) -> None:
    nodes = [cluster.node(i) for i in cluster.node_ids]
    specs = [{"id": n.id, "client_addr": n.client_addr, "peer_addr": n.peer_addr} for n in nodes]
    with pytest.raises(InvalidTransition):
        api.cluster_init(specs)


def test_a_started_node_joins_and_is_removed(
    connect: Callable[..., Cairn], make_cluster: Callable[..., LocalCluster]
) -> None:
    local = make_cluster(3)
    client = connect(local.endpoints, actor="operator")
    new = local.add_node()
    node = local.node(new)
    joined = client.cluster_join(new, node.client_addr, node.peer_addr)
    assert new in joined.voters + joined.learners
    assert {spec.id for spec in joined.nodes} == {1, 2, 3, new}
    written = client.write("k", "v")
    local.wait_applied(new, written.revision)
    removed = client.cluster_remove(new)
    assert sorted(removed.voters) == [1, 2, 3]
    with pytest.raises(NotFound):
        client.cluster_remove(new)
