"""``scripts/cluster``, the first command of the README, run as a reader runs it: in a copy
of the repository layout (so its ``.cluster/`` is the test's own) on port bases no other
test uses, with the built ``cairn-node`` (``CAIRN_NODE_BIN``, so it builds nothing).

Checked: a fresh ``up`` makes an auth-on cluster whose admin token the CLI finds; a
``--no-auth`` cluster turned on later with ``cairn auth enable`` is still restarted and
reported (leaders are found by ``/healthz``, which needs no token), ``status`` names the
401 and what to do, and once the token is saved everything works; other port bases than
the cluster's are refused."""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from cairn_client.testing import find_node_binary

REPO = Path(__file__).resolve().parents[2]
SCRIPT_TIMEOUT_S = 120
NODES = 3


@dataclass
class Checkout:
    """A directory laid out as a clone (``scripts/cluster`` inside it), and how to run the
    script and the CLI there."""

    root: Path
    env: dict[str, str]

    def cluster(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        return self._run([str(self.root / "scripts" / "cluster"), *args], env)

    def cairn(self, *args: str) -> subprocess.CompletedProcess[str]:
        endpoints = self.endpoints()
        return self._run(["cairn", "--endpoints", endpoints, *args], None)

    def endpoints(self) -> str:
        for line in (self.root / ".cluster" / "env").read_text().splitlines():
            if line.startswith("export CAIRN_ENDPOINTS="):
                return line.removeprefix("export CAIRN_ENDPOINTS=")
        raise AssertionError(".cluster/env names no endpoints")

    def _run(self, argv: list[str], env: dict[str, str] | None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv,
            cwd=self.root,
            env=env or self.env,
            capture_output=True,
            text=True,
            timeout=SCRIPT_TIMEOUT_S,
            check=False,
        )


def _free_port_bases() -> tuple[int, int]:
    """Client and peer bases whose ports 1..NODES are free, below the ephemeral range so
    no other test's kernel-picked port lands on them."""
    for _ in range(200):
        client, peer = random.randrange(10_000, 20_000), random.randrange(20_000, 30_000)
        ports = [base + i for base in (client, peer) for i in range(1, NODES + 1)]
        if all(_bindable(port) for port in ports):
            return client, peer
    raise AssertionError("no free port bases found")


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.fixture
def checkout(tmp_path: Path) -> Iterator[Checkout]:
    root = tmp_path / "clone"
    (root / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "cluster", root / "scripts" / "cluster")
    node_bin = find_node_binary()
    client, peer = _free_port_bases()
    env = {name: value for name, value in os.environ.items() if not name.startswith("CAIRN_")}
    env |= {
        "CAIRN_NODE_BIN": str(node_bin),
        "CAIRN_CLUSTER_PORT_BASES": f"{client},{peer}",
        "PATH": f"{node_bin.parent}{os.pathsep}{env.get('PATH', '')}",
    }
    made = Checkout(root, env)
    try:
        yield made
    finally:
        made.cluster("down", "--wipe")


def _ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def test_up_makes_an_auth_on_cluster_whose_token_the_cli_finds(checkout: Checkout) -> None:
    printed = _ok(checkout.cluster("up"))
    assert "auth on" in printed, printed
    token = checkout.root / ".cluster" / "admin.token"
    assert token.stat().st_mode & 0o777 == 0o600
    assert token.read_text().strip() not in printed, "the token is never printed"
    written = _ok(checkout.cairn("write", "script/k", "v"))
    assert "state:        active" in written
    assert "actor:           admin" in _ok(checkout.cairn("read", "script/k"))
    assert "already up" in _ok(checkout.cluster("up")), "a second up changes nothing"
    moved = checkout.env | {"CAIRN_CLUSTER_PORT_BASES": "7400,7500"}
    refused = checkout.cluster("up", env=moved)
    assert refused.returncode == 1
    assert "uses port bases" in refused.stderr, refused.stderr


def test_a_cluster_whose_auth_was_turned_on_later_is_restarted_and_reported(
    checkout: Checkout,
) -> None:
    assert "auth off" in _ok(checkout.cluster("up", "--no-auth"))
    enabled = _ok(checkout.cairn("--json", "auth", "enable", "--admin", "admin"))
    token = enabled.split('"token":"')[1].split('"')[0]

    status = checkout.cluster("status")
    assert status.returncode == 1
    assert "401, auth is on" in status.stdout, status.stdout

    _ok(checkout.cluster("down"))
    restarted = _ok(checkout.cluster("up"))
    assert "auth was turned on since this cluster was made" in restarted, restarted
    assert (checkout.root / ".cluster" / "auth").read_text().strip() == "on"
    assert "export CAIRN_TOKEN_FILE=" in (checkout.root / ".cluster" / "env").read_text()

    saved = checkout.root / ".cluster" / "admin.token"
    saved.write_text(token + "\n")
    saved.chmod(0o600)
    listed = _ok(checkout.cluster("status"))
    assert listed.count('"role":') == NODES, listed
    assert "state:        active" in _ok(checkout.cairn("write", "script/after", "v"))
    refused = checkout.cluster("up", "--no-auth")
    assert refused.returncode == 1
    assert "was made with auth on" in refused.stderr, refused.stderr
