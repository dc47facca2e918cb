"""Identity and access (SPEC §8) on a real auth-on cluster, with both flavors: principals,
grants, token rotation, the 401/403 errors, and no token in any repr, str or error."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from cairn_client import (
    ActorMismatch,
    Cairn,
    CairnError,
    Grant,
    InvalidInput,
    InvalidTransition,
    Permission,
    PermissionDenied,
    State,
    Unauthenticated,
)
from cairn_client.testing import LocalCluster


@pytest.fixture
def admin(connect: Callable[..., Cairn], auth_cluster: LocalCluster) -> Cairn:
    return connect(auth_cluster.endpoints, token=auth_cluster.admin_token)


def _name() -> str:
    return f"agent-{uuid.uuid4().hex[:8]}"


def test_a_principal_acts_within_its_grants_and_as_itself(
    admin: Cairn, connect: Callable[..., Cairn], auth_cluster: LocalCluster, prefix: str
) -> None:
    name = _name()
    created = admin.create_principal(name, [{"prefix": prefix, "permissions": ["read", "write"]}])
    assert created.name == name
    agent = connect(auth_cluster.endpoints, token=created.token)
    whoami = agent.whoami()
    assert whoami.name == name
    assert whoami.grants == [Grant(prefix=prefix, permissions=[Permission.READ, Permission.WRITE])]

    written = agent.write(f"{prefix}note", "mine")
    assert written.state == State.ACTIVE
    assert agent.read(f"{prefix}note").meta.actor == name, "the actor is the principal"

    with pytest.raises(PermissionDenied) as denied:
        agent.forget(f"{prefix}note", "no forget grant")
    assert (denied.value.status, denied.value.permission, denied.value.key) == (
        403,
        Permission.FORGET,
        f"{prefix}note",
    )
    with pytest.raises(PermissionDenied):
        agent.write("elsewhere/x", 1)
    with pytest.raises(ActorMismatch) as spoofed:
        agent.write(f"{prefix}note", "spoofed", actor="someone-else")
    assert spoofed.value.actor == "someone-else"
    assert spoofed.value.principal == agent.whoami().name


def test_grants_change_rotation_stops_the_old_token_and_deletion_ends_it(
    admin: Cairn, connect: Callable[..., Cairn], auth_cluster: LocalCluster, prefix: str
) -> None:
    name = _name()
    first = admin.create_principal(name, [Grant(prefix=prefix, permissions=[Permission.READ])])
    reader = connect(auth_cluster.endpoints, token=first.token)
    with pytest.raises(PermissionDenied):
        reader.write(f"{prefix}k", 1)

    changed = admin.set_grants(name, [{"prefix": prefix, "permissions": ["read", "write"]}])
    assert changed.name == name
    assert reader.write(f"{prefix}k", 1).version == 1
    assert name in [p.name for p in admin.principals().principals]

    rotated = admin.rotate_token(name)
    with pytest.raises(Unauthenticated) as stale_token:
        reader.whoami()
    assert stale_token.value.status == 401
    rotated_client = connect(auth_cluster.endpoints, token=rotated.token)
    assert rotated_client.whoami().name == name

    admin.delete_principal(name)
    with pytest.raises(Unauthenticated):
        rotated_client.whoami()


def test_no_token_is_refused_and_auth_cannot_be_enabled_twice(
    admin: Cairn, connect: Callable[..., Cairn], auth_cluster: LocalCluster, prefix: str
) -> None:
    anonymous = connect(auth_cluster.endpoints, actor="nobody")
    with pytest.raises(Unauthenticated):
        anonymous.write(f"{prefix}k", 1)
    with pytest.raises(InvalidTransition):
        admin.enable_auth("root")


def test_enable_auth_on_a_cluster_made_without_it(
    connect: Callable[..., Cairn], make_cluster: Callable[..., LocalCluster]
) -> None:
    local = make_cluster(1)
    client = connect(local.endpoints, actor="before")
    client.write("k", 1)
    enabled = client.enable_auth("root")
    assert enabled.admin == "root"
    with pytest.raises(Unauthenticated):
        client.write("k", 2)
    root = connect(local.endpoints, token=enabled.token)
    assert root.write("k", 2).version == 2


def test_the_token_never_shows_in_repr_str_or_errors(
    admin: Cairn, connect: Callable[..., Cairn], auth_cluster: LocalCluster, prefix: str
) -> None:
    created = admin.create_principal(_name(), [])
    token = created.token
    agent = connect(auth_cluster.endpoints, token=token)
    shown = [repr(created), str(created), repr(agent), repr(admin.rotate_token(created.name))]
    with pytest.raises(CairnError) as refused:
        agent.write(f"{prefix}k", 1)
    shown += [str(refused.value), repr(refused.value), str(refused.value.details)]
    with pytest.raises(InvalidInput) as malformed:
        Cairn(auth_cluster.endpoints, token=f"{token} trailing")
    shown += [str(malformed.value), repr(malformed.value)]
    assert all(token not in text for text in shown), shown
    assert all(auth_cluster.admin_token not in text for text in shown)


def test_the_token_never_reaches_a_log_line(
    connect: Callable[..., Cairn],
    auth_cluster: LocalCluster,
    prefix: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)  # httpx and httpcore log every request at DEBUG
    client = connect(auth_cluster.endpoints, token=auth_cluster.admin_token)
    client.write(f"{prefix}logged", 1)
    with client.watch(prefix, from_revision=0) as events:
        next(events)
    with pytest.raises(CairnError):
        connect(auth_cluster.endpoints, token="cairn_wrong").whoami()
    assert "HTTP Request" in caplog.text, "the transport did log"
    assert auth_cluster.admin_token not in caplog.text
    assert "cairn_wrong" not in caplog.text


def test_token_from_environment_and_files(
    auth_cluster: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "CAIRN_ENDPOINTS", ",".join(n.removeprefix("http://") for n in auth_cluster.endpoints)
    )
    monkeypatch.setenv("CAIRN_TOKEN", auth_cluster.admin_token)
    with Cairn() as from_env:
        assert from_env.endpoints == auth_cluster.endpoints
        assert from_env.whoami().name == "admin"
    token_file = tmp_path / "admin.token"
    token_file.write_text(auth_cluster.admin_token + "\n")
    monkeypatch.delenv("CAIRN_TOKEN")
    monkeypatch.setenv("CAIRN_TOKEN_FILE", str(token_file))
    with Cairn() as from_file:
        assert from_file.whoami().name == "admin"
    missing = tmp_path / "missing.token"
    with pytest.raises(InvalidInput, match=r"missing\.token"):
        Cairn(token_file=missing)
