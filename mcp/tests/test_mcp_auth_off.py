"""A cluster with auth off: the server learns it from the cluster, serves callers without a
token, and records its ``--actor`` (never an argument) as the actor of their changes."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import anyio
import pytest
from cairn_client import Cairn
from cairn_client.testing import LocalCluster

from mcp_e2e import mcp_binary, ok, refused, stdio_client

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(90)]


@pytest.fixture(scope="module")
def open_cluster() -> Iterator[LocalCluster]:
    with LocalCluster(3) as local:
        yield local


async def test_auth_off_mutations_carry_the_server_actor(
    open_cluster: LocalCluster, prefix: str
) -> None:
    key = f"{prefix}open"
    with anyio.fail_after(30):
        async with stdio_client(open_cluster, None) as client:
            await ok(client, "write", {"key": key, "value": "no token needed"})
            message = await refused(client, "write", {"key": key, "value": 2, "actor": "me"})
            # Named by its code first, as every other refusal is.
            assert message.startswith("invalid_request: arguments: unknown field `actor`")
            await ok(client, "revoke", {"key": key, "reason": "wrong"})
            history = await ok(client, "history", {"key": key})
    assert [(e["kind"], e["actor"]) for e in history["events"]] == [
        ("written", "cairn-mcp"),
        ("revoked", "cairn-mcp"),
    ]


async def test_auth_enabled_later_is_noticed_and_tokenless_calls_refused(prefix: str) -> None:
    key = f"{prefix}later"
    with LocalCluster(3) as local, anyio.fail_after(60):
        async with stdio_client(local, None) as client:
            await ok(client, "write", {"key": key, "value": "before auth"})
            with Cairn(endpoints=local.endpoints) as anyone:
                admin_token = anyone.enable_auth("admin").token
            # "auth is off" is believed for at most a second (gateway::AUTH_OFF_RECHECK).
            await anyio.sleep(1.5)
            message = await refused(client, "write", {"key": key, "value": "after auth"})
            assert message.startswith("unauthenticated"), message
        with Cairn(endpoints=local.endpoints, token=admin_token) as admin:
            assert admin.read(key).value == "before auth"


async def test_auth_off_every_key_is_subscribable(open_cluster: LocalCluster, prefix: str) -> None:
    """Without auth every caller may read every key: a listen to a key not written yet is
    acknowledged and then notified."""
    uri = f"cairn://key/{prefix}watched"
    with anyio.fail_after(30):
        async with (
            stdio_client(open_cluster, None) as client,
            client.listen(resource_subscriptions=[uri]) as events,
        ):
            assert events.honored.resource_subscriptions == [uri]
            for attempt in range(10):
                await ok(client, "write", {"key": f"{prefix}watched", "value": attempt})
                with anyio.move_on_after(1.0):
                    event = await events.__anext__()
                    break
            else:
                pytest.fail("no notification for the subscribed key")
    assert event.uri == uri  # type: ignore[union-attr]


def _run_with_closed_input(
    flags: list[str], env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(mcp_binary()), *flags],
        check=False,
        env={"PATH": os.environ.get("PATH", ""), **env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_an_empty_actor_flag_is_refused_at_start() -> None:
    """An empty ``--actor`` would make every mutation fail later: a configuration error,
    exit code 2, before anything is served."""
    started = _run_with_closed_input(["--actor", ""], {})
    assert started.returncode == 2, started
    assert "actor" in started.stderr, started


def test_an_empty_actor_variable_counts_as_unset_and_closed_input_stops_cleanly() -> None:
    """``CAIRN_ACTOR=""`` is no actor at all, as in the CLI and the Python client; the
    server then serves stdio, and input closed before ``initialize`` is a clean stop."""
    started = _run_with_closed_input([], {"CAIRN_ACTOR": "", "CAIRN_CACERT": ""})
    assert started.returncode == 0, started
    assert "stdio closed before initialize" in started.stderr, started
