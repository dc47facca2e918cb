"""A real local cairn cluster for tests: ``LocalCluster``.

``LocalCluster`` starts N real ``cairn-node`` processes on free loopback ports in a
temporary directory, initializes them as one cluster (optionally with auth on and HTTPS),
waits for a leader, and offers the faults a test needs: stop, SIGKILL, restart with the same
data, and SIGSTOP/SIGCONT to make a follower lag. Leaving the ``with`` block (or ``close()``)
kills every process it started, whatever happened inside::

    from cairn_client.testing import LocalCluster

    with LocalCluster(3, auth=True) as cluster:
        print(cluster.endpoints, cluster.leader_id())
        cluster.kill(cluster.leader_id())

The node binary is the ``node_bin`` argument, else ``$CAIRN_NODE_BIN``, else
``$CARGO_TARGET_DIR/debug/cairn-node`` (``$CARGO_TARGET_DIR`` defaulting to
``~/.cache/cairn/target``), else ``cairn-node`` on ``PATH``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import httpx

__all__ = ["ClusterError", "LocalCluster", "NodeInfo", "find_node_binary"]

DEFAULT_ADMIN = "admin"
# The node requires a peer secret of at least 32 bytes.
_PEER_SECRET_BYTES = 48
_POLL_S = 0.1
_STOP_GRACE_S = 10.0
_PORT_ATTEMPTS = 3
_LOG_TAIL_LINES = 30
_PR_SET_PDEATHSIG = 1


class ClusterError(RuntimeError):
    """The local cluster could not be started or did not reach the awaited state."""


@dataclass(frozen=True)
class NodeInfo:
    """One node of a ``LocalCluster``: its addresses, files and process."""

    id: int
    client_addr: str
    peer_addr: str
    url: str
    data_dir: Path
    log_path: Path
    pid: int | None
    running: bool
    paused: bool


def find_node_binary(node_bin: str | os.PathLike[str] | None = None) -> Path:
    """The ``cairn-node`` executable: the argument, ``$CAIRN_NODE_BIN``,
    ``$CARGO_TARGET_DIR/debug/cairn-node``, or ``cairn-node`` on ``PATH``."""
    target_dir = os.environ.get("CARGO_TARGET_DIR") or str(Path.home() / ".cache/cairn/target")
    candidates: list[tuple[str, str | None]] = [
        ("node_bin argument", os.fspath(node_bin) if node_bin is not None else None),
        ("CAIRN_NODE_BIN", os.environ.get("CAIRN_NODE_BIN")),
        ("CARGO_TARGET_DIR", str(Path(target_dir) / "debug" / "cairn-node")),
        ("PATH", shutil.which("cairn-node")),
    ]
    for origin, candidate in candidates:
        if not candidate:
            continue
        path = Path(candidate)
        if path.is_file() and os.access(path, os.X_OK):
            return path
        if origin in ("node_bin argument", "CAIRN_NODE_BIN"):
            raise ClusterError(f"{origin} {candidate!r} is not an executable file")
    raise ClusterError(
        "no cairn-node binary: pass node_bin, set CAIRN_NODE_BIN, or build it with "
        "`cargo build --workspace --bins`"
    )


# Nodes' ports are drawn from here up to the kernel's first ephemeral port.
_PORTS_FIRST = 10_000


def _ephemeral_first() -> int:
    """The first port the kernel hands to outgoing connections (Linux; 32768 elsewhere)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def _all_threads_stopped(pid: int) -> bool:
    """Whether every thread of ``pid`` is stopped (state ``T`` in
    ``/proc/PID/task/*/stat``); ``True`` where there is no ``/proc`` to ask."""
    tasks = Path(f"/proc/{pid}/task")
    if not Path("/proc/self/task").is_dir():
        return True
    try:
        stats = [(task / "stat").read_text() for task in tasks.iterdir()]
    except OSError:
        return False
    # The state follows the parenthesized command name, which may itself hold spaces.
    return all(stat.rpartition(") ")[2][:1] == "T" for stat in stats)


def _free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports below the kernel's ephemeral range, so that
    while a node is stopped no outgoing connection (a client's, another node's) can take
    its port as a local port and keep it from starting again. Every socket stays bound
    until all are picked: a node given the same port twice refuses to start."""
    candidates = list(range(_PORTS_FIRST, _ephemeral_first()))
    random.shuffle(candidates)
    with contextlib.ExitStack() as held:
        ports: list[int] = []
        for port in candidates:
            if len(ports) == count:
                break
            sock = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            ports.append(port)
        if len(ports) < count:
            raise ClusterError(f"fewer than {count} free ports in {_PORTS_FIRST}..ephemeral")
        return ports


def _die_with_parent() -> None:
    """Runs in the child before exec: the kernel SIGKILLs the node when the thread that
    started it exits, so a test runner killed without cleanup leaves no node behind."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _kill_all(processes: dict[int, subprocess.Popen[bytes]]) -> None:
    for process in processes.values():
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
    for process in processes.values():
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=5)


class _Node:
    """Mutable state of one node; ``NodeInfo`` is its public snapshot."""

    def __init__(self, node_id: int, base: Path, client_port: int, peer_port: int) -> None:
        self.id = node_id
        self.client_addr = f"127.0.0.1:{client_port}"
        self.peer_addr = f"127.0.0.1:{peer_port}"
        self.data_dir = base / f"node-{node_id}" / "data"
        self.log_path = base / f"node-{node_id}.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.paused = False

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def spec(self) -> dict[str, Any]:
        return {"id": self.id, "client_addr": self.client_addr, "peer_addr": self.peer_addr}


class LocalCluster:
    """A real N-node cairn cluster on 127.0.0.1, for tests and experiments.

    Args:
        size: number of nodes (ids 1..size), all voters.
        node_bin: the ``cairn-node`` executable (see ``find_node_binary``).
        auth: init with auth on; ``admin_token`` then holds the first admin's token.
        admin: name of that first admin principal.
        peer_secret: peers prove membership with a random shared secret (ignored with
            ``tls``, where peers use mutual TLS).
        tls: HTTPS on the client ports and mutual TLS between peers, from certificates
            made by ``cairn-node certs``; ``ca_cert`` is the CA to trust, and
            ``client_cert``/``client_key`` a client certificate it signed.
        client_auth: with ``tls``, the client ports also require a client certificate
            signed by ``ca_cert``.
        base_dir: where data and logs go; default a fresh temporary directory, removed by
            ``close()`` (a given ``base_dir`` is kept).
        wait_s: bound on each wait (health, leader).
        env: extra environment for the nodes (e.g. ``{"RUST_LOG": "debug"}``).

    The cluster starts in ``__enter__`` (or ``start_cluster()``) and every process it
    started is killed by ``__exit__``/``close()``, on garbage collection and at interpreter
    exit. Nodes started from the main thread also die with the test process itself.
    """

    def __init__(
        self,
        size: int = 3,
        *,
        node_bin: str | os.PathLike[str] | None = None,
        auth: bool = False,
        admin: str = DEFAULT_ADMIN,
        peer_secret: bool = True,
        tls: bool = False,
        client_auth: bool = False,
        base_dir: str | os.PathLike[str] | None = None,
        wait_s: float = 30.0,
        env: dict[str, str] | None = None,
    ) -> None:
        if size < 1:
            raise ValueError(f"size must be at least 1, not {size}")
        self.size = size
        self.node_bin = find_node_binary(node_bin)
        self.auth = auth
        self.admin = admin
        self.tls = tls
        if client_auth and not tls:
            raise ValueError("client_auth needs tls")
        self.client_auth = client_auth
        self.wait_s = wait_s
        self._peer_secret = peer_secret and not tls
        self._env = dict(env or {})
        self._owns_base = base_dir is None
        self.base_dir = Path(base_dir or tempfile.mkdtemp(prefix="cairn-cluster-"))
        self._admin_token: str | None = None
        self._nodes: dict[int, _Node] = {}
        self._processes: dict[int, subprocess.Popen[bytes]] = {}
        self._finalizer = weakref.finalize(self, _kill_all, self._processes)

    # --- lifecycle ---------------------------------------------------------------------

    def __enter__(self) -> LocalCluster:
        try:
            self.start_cluster()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"LocalCluster(size={self.size}, auth={self.auth}, tls={self.tls}, "
            f"base_dir={str(self.base_dir)!r})"
        )

    def start_cluster(self) -> None:
        """Starts every node, initializes the cluster and waits for a leader.

        Free ports are picked just before the nodes start; if another process takes one
        first (a node exits at startup), the cluster is retried on new ports."""
        if self._nodes:
            raise ClusterError("the cluster was already started")
        self.base_dir.mkdir(parents=True, exist_ok=True)
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            self._nodes = self._plan_nodes()
            self._prepare_transport()
            try:
                for node_id in self._nodes:
                    self.start(node_id, wait=False)
                for node_id in self._nodes:
                    self._wait_healthy(node_id)
                break
            except ClusterError:
                self._kill_everything()
                if attempt == _PORT_ATTEMPTS or not self._any_port_taken():
                    raise
                for node in self._nodes.values():
                    shutil.rmtree(node.data_dir, ignore_errors=True)
        self._init()
        self.wait_for_leader()

    def close(self) -> None:
        """Kills every node process (SIGCONT first for paused ones) and removes the
        temporary directory this cluster made."""
        self._kill_everything()
        if self._owns_base:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    # --- what tests read ---------------------------------------------------------------

    @property
    def endpoints(self) -> list[str]:
        """Client URLs of every node, in id order (``http://`` or ``https://``)."""
        return [self._url(node) for node in self._nodes.values()]

    @property
    def admin_token(self) -> str:
        """The first admin's bearer token (auth-on clusters only)."""
        if self._admin_token is None:
            raise ClusterError("this cluster was made without auth: it has no admin token")
        return self._admin_token

    @property
    def ca_cert(self) -> Path:
        """The CA certificate the client ports are signed by (``tls=True`` only)."""
        return self._cert_path("ca.pem")

    @property
    def client_cert(self) -> Path:
        """A client certificate signed by ``ca_cert`` (``tls=True`` only)."""
        return self._cert_path("client.pem")

    @property
    def client_key(self) -> Path:
        """The private key of ``client_cert`` (``tls=True`` only)."""
        return self._cert_path("client.key")

    @property
    def log_paths(self) -> dict[int, Path]:
        """Each node's log file (stdout and stderr, appended across restarts)."""
        return {node.id: node.log_path for node in self._nodes.values()}

    @property
    def node_ids(self) -> list[int]:
        return list(self._nodes)

    def node(self, node_id: int) -> NodeInfo:
        """Addresses, files and process state of node ``node_id``."""
        node = self._node(node_id)
        return NodeInfo(
            id=node.id,
            client_addr=node.client_addr,
            peer_addr=node.peer_addr,
            url=self._url(node),
            data_dir=node.data_dir,
            log_path=node.log_path,
            pid=node.process.pid if node.process is not None else None,
            running=node.running,
            paused=node.paused,
        )

    def log_tail(self, node_id: int, lines: int = _LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines of a node's log (for failure messages)."""
        path = self._node(node_id).log_path
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def status(self, node_id: int, timeout: float = 2.0) -> dict[str, Any]:
        """``GET /cluster/status`` of one node, as JSON."""
        with self._http(timeout) as http:
            response = http.get(f"{self._url(self._node(node_id))}/cluster/status")
            response.raise_for_status()
            result: dict[str, Any] = response.json()
            return result

    def leader_id(self, timeout: float | None = None) -> int:
        """The id of the current leader, waiting up to ``timeout`` (default ``wait_s``)
        until a running node says it is the leader."""
        return self.wait_for_leader(timeout=timeout)

    def wait_for_leader(self, *, exclude: int | None = None, timeout: float | None = None) -> int:
        """Waits until a running, unpaused node other than ``exclude`` reports itself
        leader, and returns its id."""
        deadline = time.monotonic() + (self.wait_s if timeout is None else timeout)
        while True:
            leader = self._confirmed_leader(exclude)
            if leader is not None:
                return leader
            if time.monotonic() >= deadline:
                raise ClusterError(f"no leader within the wait ({self._describe()})")
            time.sleep(_POLL_S)

    def wait_applied(self, node_id: int, index: int, timeout: float | None = None) -> None:
        """Waits until node ``node_id`` has applied log index ``index``."""
        deadline = time.monotonic() + (self.wait_s if timeout is None else timeout)
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if int(self.status(node_id)["applied_index"]) >= index:
                    return
            if time.monotonic() >= deadline:
                raise ClusterError(f"node {node_id} did not apply index {index} in time")
            time.sleep(_POLL_S)

    # --- faults ------------------------------------------------------------------------

    def start(self, node_id: int, *, wait: bool = True) -> None:
        """Starts node ``node_id`` (again) with its data directory and ports; with
        ``wait``, returns once it answers ``/healthz``."""
        node = self._node(node_id)
        if node.running:
            raise ClusterError(f"node {node_id} is already running")
        node.data_dir.mkdir(parents=True, exist_ok=True)
        with node.log_path.open("ab") as log:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            log.write(f"=== {stamp}: starting node {node_id}\n".encode())
            log.flush()
            node.process = self._spawn(node, log)
        node.paused = False
        self._processes[node_id] = node.process
        if wait:
            self._wait_healthy(node_id)

    def stop(self, node_id: int, timeout: float = _STOP_GRACE_S) -> None:
        """Stops node ``node_id`` with SIGTERM (SIGKILL after ``timeout`` seconds)."""
        node = self._node(node_id)
        if not node.running or node.process is None:
            return
        self.resume(node_id)
        node.process.terminate()
        try:
            node.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            node.process.kill()
            node.process.wait(timeout=5)

    def kill(self, node_id: int) -> None:
        """Kills node ``node_id`` with SIGKILL (a crash: no shutdown path runs)."""
        node = self._node(node_id)
        if not node.running or node.process is None:
            return
        node.process.kill()
        node.process.wait(timeout=5)
        node.paused = False

    def add_node(self) -> int:
        """Starts one more node (the next id) on free ports, not a member yet: it joins with
        ``POST /cluster/join`` (``Cairn.cluster_join``). Returns its id."""
        node_id = max(self._nodes) + 1
        client_port, peer_port = _free_ports(2)
        self._nodes[node_id] = _Node(node_id, self.base_dir, client_port, peer_port)
        if self.tls:
            self._make_certificates([node_id])
        self.start(node_id)
        return node_id

    def restart(self, node_id: int) -> None:
        """Stops node ``node_id`` (SIGTERM) and starts it again with the same data."""
        self.stop(node_id)
        self.start(node_id)

    def pause(self, node_id: int) -> None:
        """Freezes node ``node_id`` with SIGSTOP: it keeps its sockets but answers
        nothing and applies nothing until ``resume`` (a lagging or partitioned node).

        Returns once every thread of the process has stopped: ``kill`` only queues the
        signal, and on a loaded machine the node's threads can go on serving requests
        until they get a CPU to take it (Linux; elsewhere it returns at once)."""
        node = self._node(node_id)
        if node.process is None or not node.running:
            raise ClusterError(f"node {node_id} is not running")
        node.process.send_signal(signal.SIGSTOP)
        node.paused = True
        deadline = time.monotonic() + _STOP_GRACE_S
        while not _all_threads_stopped(node.process.pid):
            if time.monotonic() >= deadline:
                raise ClusterError(f"node {node_id} did not stop within {_STOP_GRACE_S} s")
            time.sleep(0.002)

    def resume(self, node_id: int) -> None:
        """Lets a paused node run again (SIGCONT)."""
        node = self._node(node_id)
        if node.paused and node.process is not None and node.running:
            node.process.send_signal(signal.SIGCONT)
        node.paused = False

    # --- internals ---------------------------------------------------------------------

    def _node(self, node_id: int) -> _Node:
        try:
            return self._nodes[node_id]
        except KeyError:
            raise ClusterError(f"no node {node_id} (nodes: {list(self._nodes)})") from None

    def _cert_path(self, name: str) -> Path:
        if not self.tls:
            raise ClusterError("this cluster was made without tls: it has no certificates")
        return self.base_dir / "certs" / name

    def _url(self, node: _Node) -> str:
        return f"{'https' if self.tls else 'http'}://{node.client_addr}"

    def _plan_nodes(self) -> dict[int, _Node]:
        ports = iter(_free_ports(2 * self.size))
        return {
            node_id: _Node(node_id, self.base_dir, next(ports), next(ports))
            for node_id in range(1, self.size + 1)
        }

    def _any_port_taken(self) -> bool:
        """True if some planned port is held by a process this cluster did not start."""
        for node in self._nodes.values():
            for addr in (node.client_addr, node.peer_addr):
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                    try:
                        sock.bind(("127.0.0.1", int(addr.rsplit(":", 1)[1])))
                    except OSError:
                        return True
        return False

    def _prepare_transport(self) -> None:
        if self._peer_secret:
            secret = self.base_dir / "peer.secret"
            if not secret.exists():
                fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w") as out:
                    out.write(secrets.token_urlsafe(_PEER_SECRET_BYTES))
        if self.tls:
            self._make_certificates(list(self._nodes))

    def _make_certificates(self, node_ids: list[int]) -> None:
        """Node certificates from ``cairn-node certs``, which reuses the CA once made."""
        ids = ",".join(str(node_id) for node_id in node_ids)
        certs = ["certs", "--out", str(self.base_dir / "certs"), "--nodes", ids]
        subprocess.run(  # noqa: S603 (a fixed argument list, no shell)
            [str(self.node_bin), *certs], check=True, capture_output=True, timeout=60
        )

    def _transport_flags(self, node: _Node) -> list[str]:
        if self.tls:
            certs = self.base_dir / "certs"
            cert, key = str(certs / f"node-{node.id}.pem"), str(certs / f"node-{node.id}.key")
            return [
                "--tls-cert", cert, "--tls-key", key,
                "--peer-tls-cert", cert, "--peer-tls-key", key,
                "--peer-tls-ca", str(certs / "ca.pem"),
                *(["--tls-client-ca", str(certs / "ca.pem")] if self.client_auth else []),
            ]  # fmt: skip
        if self._peer_secret:
            return ["--peer-secret-file", str(self.base_dir / "peer.secret")]
        return []

    def _spawn(self, node: _Node, log: IO[bytes]) -> subprocess.Popen[bytes]:
        args = [
            str(self.node_bin),
            "--id", str(node.id),
            "--data-dir", str(node.data_dir),
            "--client-addr", node.client_addr,
            "--peer-addr", node.peer_addr,
            *self._transport_flags(node),
        ]  # fmt: skip
        on_main_thread = threading.current_thread() is threading.main_thread()
        return subprocess.Popen(  # noqa: S603 (a fixed argument list, no shell)
            args,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **self._env},
            # The death signal fires when the starting *thread* exits, so it is set only
            # for the main thread: a node started from a worker thread would otherwise die
            # with that thread.
            preexec_fn=_die_with_parent if on_main_thread else None,  # noqa: PLW1509
        )

    def _http(self, timeout: float) -> httpx.Client:
        headers = {"authorization": f"Bearer {self._admin_token}"} if self._admin_token else {}
        return httpx.Client(timeout=timeout, headers=headers, verify=self._tls_context())

    def _tls_context(self) -> ssl.SSLContext | bool:
        if not self.tls:
            return True
        context = ssl.create_default_context(cafile=str(self.ca_cert))
        if self.client_auth:
            context.load_cert_chain(str(self.client_cert), str(self.client_key))
        return context

    def _wait_healthy(self, node_id: int) -> None:
        node = self._node(node_id)
        deadline = time.monotonic() + self.wait_s
        with self._http(1.0) as http:
            while True:
                if not node.running:
                    raise ClusterError(
                        f"node {node_id} exited at startup; log {node.log_path}:\n"
                        f"{self.log_tail(node_id)}"
                    )
                with contextlib.suppress(httpx.HTTPError):
                    if http.get(f"{self._url(node)}/healthz").status_code == 200:
                        return
                if time.monotonic() >= deadline:
                    raise ClusterError(
                        f"node {node_id} not healthy after {self.wait_s}s; log "
                        f"{node.log_path}:\n{self.log_tail(node_id)}"
                    )
                time.sleep(_POLL_S)

    def _init(self) -> None:
        body: dict[str, Any] = {"nodes": [node.spec() for node in self._nodes.values()]}
        if self.auth:
            body["auth"] = {"admin": self.admin}
        first = next(iter(self._nodes.values()))
        with self._http(10.0) as http:
            response = http.post(f"{self._url(first)}/cluster/init", json=body)
        if response.status_code != 200:
            raise ClusterError(f"cluster/init answered {response.status_code}: {response.text}")
        if self.auth:
            token = (response.json().get("auth") or {}).get("token")
            if not token:
                raise ClusterError("cluster/init with auth answered without the admin token")
            self._admin_token = str(token)

    def _confirmed_leader(self, exclude: int | None) -> int | None:
        for node in self._nodes.values():
            if node.id == exclude or not node.running or node.paused:
                continue
            with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
                status = self.status(node.id, timeout=1.0)
                if status["role"] == "leader" and status["node_id"] != exclude:
                    return int(status["node_id"])
        return None

    def _describe(self) -> str:
        states = []
        for node in self._nodes.values():
            state = "paused" if node.paused else "running" if node.running else "stopped"
            states.append(f"node {node.id} {state}")
        return ", ".join(states)

    def _kill_everything(self) -> None:
        for node in self._nodes.values():
            if node.paused and node.running and node.process is not None:
                node.process.send_signal(signal.SIGCONT)
            node.paused = False
        _kill_all(self._processes)
        self._processes.clear()
