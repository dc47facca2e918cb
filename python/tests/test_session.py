"""Sessions (SPEC §3): the token format shared with the Rust client (checked against the real
``cairn`` CLI), the regression rules, and reads on a lagging follower that never show a
forgotten value."""

from __future__ import annotations

import base64
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from cairn_client import (
    Cairn,
    InvalidInput,
    KeyMark,
    ListResponse,
    MutationResult,
    NotFound,
    RetryPolicy,
    Session,
    SessionRegression,
    StaleRead,
    State,
)
from cairn_client.session import TOKEN_JSON_BYTES_MAX, TOKEN_KEYS_MAX
from cairn_client.testing import LocalCluster, find_node_binary


def _token_json(token: str) -> object:
    return json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))


def _result(key: str, version: int, revision: int, forget_epoch: int = 0) -> MutationResult:
    return MutationResult(
        key=key,
        state=State.ACTIVE,
        version=version,
        generation=1,
        forget_epoch=forget_epoch,
        revision=revision,
        replayed=False,
    )


def test_the_token_is_base64url_json_of_the_revision_and_newest_keys_first() -> None:
    session = Session()
    session.observe(_result("a", version=1, revision=5))
    session.observe(_result("b", version=3, revision=9, forget_epoch=2))
    token = session.export_token()
    assert "=" not in token
    assert _token_json(token) == {"r": 9, "k": [["b", 1, 2, 3, 9], ["a", 1, 0, 1, 5]]}
    assert Session.import_token(token) == session


def test_the_applied_index_of_a_read_counts_as_seen_even_with_no_key_in_it() -> None:
    """A list that leaves a key out (forgotten at 799) is a state seen at its applied
    index: the session must not accept a later answer from a node behind it."""
    served = {
        "node_id": 1,
        "role": "leader",
        "consistency": "linearizable",
        "applied_index": 799,
        "leader_commit_index": 799,
        "ms_since_leader_contact": 0,
    }
    empty = ListResponse.model_validate({"items": [], "next_after": None, "served": served})
    session = Session()
    session.observe(empty)
    assert session.revision == 799
    behind = ListResponse.model_validate({"items": [], "served": {**served, "applied_index": 798}})
    with pytest.raises(SessionRegression):
        session.check(behind)


def test_an_exported_token_keeps_the_newest_keys_within_its_bounds() -> None:
    session = Session()
    for i in range(TOKEN_KEYS_MAX + 10):
        session.observe_key(f"k{i:04}", KeyMark(1, 0, 1, i + 1))
    imported = Session.import_token(session.export_token())
    assert len(imported) == TOKEN_KEYS_MAX
    assert imported.revision == session.revision
    assert imported.key(f"k{TOKEN_KEYS_MAX + 9:04}") is not None
    assert imported.key("k0000") is None


def test_a_full_token_is_as_long_as_the_guide_says() -> None:
    """The 16 KiB bound is on the JSON; the token, its base64url, is 4/3 of it: at most
    ceil(16384 * 4 / 3) = 21,846 characters, which is what docs/python.md must say."""
    session = Session()
    for i in range(TOKEN_KEYS_MAX):
        top = 2**63 + i  # 19-digit numbers: the most JSON per entry
        session.observe_key(f"{i:04}" + "k" * 60, KeyMark(top, top, top, top))
    token = session.export_token()
    json_bytes = len(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    chars_max = -(-TOKEN_JSON_BYTES_MAX * 4 // 3)
    assert TOKEN_JSON_BYTES_MAX - 200 < json_bytes <= TOKEN_JSON_BYTES_MAX
    assert chars_max - 300 < len(token) <= chars_max
    guide = (Path(__file__).resolve().parents[2] / "docs" / "python.md").read_text()
    assert f"16 KiB of JSON, so at most {chars_max:,} characters of token" in guide


@pytest.mark.parametrize(
    "body",
    [
        "",
        "not base64!",
        base64.urlsafe_b64encode(b'{"r":1}').decode().rstrip("="),
        base64.urlsafe_b64encode(b'{"r":1,"k":[],"x":0}').decode().rstrip("="),
        base64.urlsafe_b64encode(b'{"r":1,"k":[["a",0,0,1,1]]}').decode().rstrip("="),
        base64.urlsafe_b64encode(b'{"r":1,"k":[["a",1,2,1,1]]}').decode().rstrip("="),
        base64.urlsafe_b64encode(b'{"r":1,"k":[["a",1,0,1,2]]}').decode().rstrip("="),
        base64.urlsafe_b64encode(b'{"r":2,"k":[["a",1,0,1,1],["a",1,0,2,2]]}').decode().rstrip("="),
        base64.urlsafe_b64encode(b'{"r":true,"k":[]}').decode().rstrip("="),
    ],
)
def test_malformed_tokens_are_refused(body: str) -> None:
    with pytest.raises(InvalidInput, match="malformed session token"):
        Session.import_token(body)


@pytest.mark.parametrize("token", [None, 5, b"eyJyIjowLCJrIjpbXX0"])
def test_a_session_token_that_is_not_a_str_is_invalid_input(token: object) -> None:
    with pytest.raises(InvalidInput, match="malformed session token: expected a str"):
        Session.import_token(token)  # type: ignore[arg-type]


def test_answers_older_than_the_session_are_regressions() -> None:
    session = Session()
    session.observe(_result("k", version=4, revision=10, forget_epoch=3))
    with pytest.raises(SessionRegression, match="forget_epoch 0 < 3"):
        session.check(_result("k", version=4, revision=10))
    with pytest.raises(SessionRegression, match="version 3 < 4"):
        session.check(_result("k", version=3, revision=8, forget_epoch=3))
    with pytest.raises(SessionRegression, match="reported absent"):
        session.check_absent("k")
    session.check(_result("k", version=5, revision=11, forget_epoch=3))
    session.check_absent("other")


def test_a_full_session_evicts_its_oldest_keys_but_keeps_the_revision() -> None:
    session = Session(keys_max=10)
    for i in range(11):
        session.observe_key(f"k{i}", KeyMark(1, 0, 1, i + 1))
    assert len(session) == 10
    assert session.key("k0") is None
    assert session.revision == 11


def _cairn_cli() -> Path:
    cli = find_node_binary().with_name("cairn")
    if not cli.exists():
        pytest.skip(f"no cairn CLI next to the node binary ({cli})")
    return cli


def _run_cli(cwd: Path, endpoints: list[str], session_file: Path, *args: str) -> object:
    # Only this test's settings: no CAIRN_* of the caller, and a directory without a
    # .cluster/admin.token for the CLI to find.
    env = {name: value for name, value in os.environ.items() if not name.startswith("CAIRN_")}
    command = [str(_cairn_cli()), "--endpoints", ",".join(endpoints), "--json"]
    command += ["--session-file", str(session_file), *args]
    done = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=30, check=True
    )
    return json.loads(done.stdout.splitlines()[-1])


def test_a_session_passes_between_the_rust_cli_and_python(
    connect: Callable[..., Cairn], cluster: LocalCluster, prefix: str, tmp_path: Path
) -> None:
    key = f"{prefix}handoff"
    session_file = tmp_path / "session.token"
    _run_cli(tmp_path, cluster.endpoints, session_file, "write", key, "rust", "--actor", "rust")
    forgotten = _run_cli(tmp_path, cluster.endpoints, session_file, "forget", key, "--reason", "r")
    assert isinstance(forgotten, dict)

    from_rust = Session.import_token(session_file.read_text())
    assert from_rust.key(key) == KeyMark(1, 2, 2, forgotten["revision"])
    python = connect(cluster.endpoints, actor="python", session=from_rust)
    assert python.read(key, consistency="any").state == State.FORGOTTEN
    python.write(key, "python", clear_tombstone=True)

    session_file.write_text(from_rust.export_token() + "\n")
    read = _run_cli(tmp_path, cluster.endpoints, session_file, "--consistency", "any", "read", key)
    assert isinstance(read, dict)
    assert (read["value"], read["generation"]) == ("python", 2)
    assert Session.import_token(session_file.read_text()).key(key) == from_rust.key(key)


@pytest.mark.timeout(90)
def test_session_reads_on_a_lagging_follower_never_show_a_forgotten_value(
    connect: Callable[..., Cairn], make_cluster: Callable[..., LocalCluster]
) -> None:
    local = make_cluster(3)
    leader = local.leader_id()
    lagging, other = (i for i in local.node_ids if i != leader)
    writer = connect(local.endpoints, actor="agent-a", session=Session())
    written = writer.write("facts/db", "postgres")
    local.wait_applied(lagging, written.revision)

    # The follower misses the forget (killed, so no message to it waits in a socket), and
    # comes back while the two nodes that have it are frozen: it can only lag.
    local.kill(lagging)
    forgotten = writer.forget("facts/db", "moved to sqlite")
    local.pause(leader)
    local.pause(other)
    local.start(lagging)
    follower_url = local.node(lagging).url

    without_session = connect(local.endpoints).pinned(follower_url)
    stale = without_session.read("facts/db", consistency="any")
    assert (stale.state, stale.value) == (State.ACTIVE, "postgres"), "the follower does lag"
    assert forgotten.tombstone is not None
    tombstone_id = forgotten.tombstone.id
    with pytest.raises(NotFound):
        without_session.tombstone(tombstone_id, consistency="any")

    # Agent B gets agent A's session token: the lagging follower cannot answer it...
    assert writer.session is not None
    token = writer.session.export_token()
    once = RetryPolicy(retries_max=0)
    impatient = connect(local.endpoints, session=Session.import_token(token), retry=once)
    with pytest.raises(StaleRead):
        impatient.pinned(follower_url).read("facts/db", consistency="any")
    with pytest.raises(StaleRead):
        impatient.pinned(follower_url).tombstone(tombstone_id, consistency="any")

    # ...and once it can catch up, it answers the forget, never the forgotten value.
    local.resume(leader)
    local.resume(other)
    reader = connect(local.endpoints, session=Session.import_token(token))
    seen = reader.pinned(follower_url).read("facts/db", consistency="any")
    assert (seen.state, seen.value) == (State.FORGOTTEN, None)
    assert seen.served.node_id == lagging
    assert seen.served.applied_index >= forgotten.revision
    assert reader.pinned(follower_url).tombstone(tombstone_id, consistency="any").key == "facts/db"


def test_a_staleness_bound_a_node_cannot_meet_is_stale_read_even_with_a_session(
    connect: Callable[..., Cairn], cluster: LocalCluster, prefix: str
) -> None:
    """A bound of 0 can never be met. The session does not turn that into a linearizable
    read at the leader: the bound is the caller's, so its StaleRead is the answer, and a
    pinned client is no different."""
    key = f"{prefix}k"
    seen = Session()
    writer = connect(cluster.endpoints, actor="tester", session=seen)
    writer.write(key, 1)
    tombstone = writer.forget(key, "gone").tombstone
    assert tombstone is not None
    follower = next(i for i in cluster.node_ids if i != cluster.leader_id())
    follower_url = cluster.node(follower).url
    once = RetryPolicy(retries_max=0)

    for session in (Session(), seen):
        reader = connect(cluster.endpoints, session=session, retry=once)
        for client in (reader, reader.pinned(follower_url)):
            with pytest.raises(StaleRead, match="read token within 0 ms"):
                client.read(key, max_staleness_ms=0)
            with pytest.raises(StaleRead, match="read token within 0 ms"):
                client.tombstone(tombstone.id, max_staleness_ms=0)
