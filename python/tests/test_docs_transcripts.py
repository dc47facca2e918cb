"""The shell transcripts of the README and the guides run as written and print what the
page shows, so a page cannot drift from the binaries it documents.

A transcript is a ```` ```console ```` block: each ``$ `` line is a command (a trailing
``\\`` continues it), the lines after it are what it printed, stdout and stderr together.
A page runs top to bottom in one ``bash``, so a variable a command sets is there for the
next, on a fresh 3-node cluster of the mode the page names in a marker before its first
transcript, ``<!-- transcript: auth -->`` or ``<!-- transcript: no-auth -->``. The same
marker further down starts a fresh cluster of that mode for the rest of the page.
``<!-- no-run: why -->`` right before a block skips it.

The cluster is a ``LocalCluster`` on free ports, not ``scripts/cluster up``'s fixed ones:
each ``127.0.0.1:74NN`` and ``127.0.0.1:75NN`` of a command is moved to a real port (node
N's own for 7401-7403 and 7501-7503, a free one for any other) and moved back in what the
command prints. The working directory holds ``.cluster/admin.token`` and
``.cluster/peer.secret``, as the reader's clone does. What differs between any two honest
runs is masked on both sides before comparing: times (milliseconds since the epoch and
RFC 3339), tokens, and how long ago the leader was heard from."""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cairn_client.testing import LocalCluster

REPO = Path(__file__).resolve().parents[2]
PAGES = ("README.md", "docs/api.md", "docs/cli.md")
# Bound on one page's whole run; the slowest command (a join) waits seconds, not minutes.
PAGE_TIMEOUT_S = 300
_MODE = re.compile(r"<!-- transcript: (auth|no-auth) -->")
_NO_RUN = re.compile(r"<!-- no-run: [^>]*-->")
_DOC_ADDR = re.compile(r"127\.0\.0\.1:(7[45]\d\d)\b")
_MASKS = (
    (re.compile(r"\b1\d{12}\b"), "<ms>"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z"), "<time>"),
    (re.compile(r'("ms_since_leader_contact": ?)(\d+|null)'), r"\1<n>"),
    (re.compile(r"(leader contact )\d+( ms ago)"), r"\1<n>\2"),
    # `cairn cluster status`: CONTACT_MS, its last column.
    (re.compile(r"^(http\S+\s+\d+\s+\w+\b.*\s)(\d+|-)$", re.MULTILINE), r"\1<n>"),
    # A chunked body's size where reading stopped, which depends on how it arrived.
    (re.compile(r'(a lower bound: )\d+( bytes\)".*"size":)\d+'), r"\1<n>\2<n>"),
    # Column padding, which follows the width of the real addresses.
    (re.compile(r"  +"), "  "),
)
_CLIENT_ENV = re.compile(r"^CAIRN_")
_TOKEN = re.compile(r"cairn_[A-Za-z0-9_-]{43}")
# `--help` shows the value of CAIRN_ENDPOINTS, which the reader has not set.
_ENDPOINTS_HELP = re.compile(r"(\[env: CAIRN_ENDPOINTS=)[^\]]*\]")


@dataclass
class Command:
    line: int
    text: str
    expected: list[str] = field(default_factory=list)
    # The page's line number of the first line printed (after any continuation lines).
    output_line: int = 0


@dataclass
class Part:
    """Commands that run in order on one fresh cluster."""

    auth: bool
    commands: list[Command] = field(default_factory=list)


def parse(page: Path) -> list[Part]:
    """The page's transcripts, grouped by the cluster each runs on."""
    parts: list[Part] = []
    in_block = skip_next = skipping = False
    continuing: Command | None = None
    for number, line in enumerate(page.read_text().splitlines(), start=1):
        if not in_block:
            if mode := _MODE.search(line):
                parts.append(Part(auth=mode.group(1) == "auth"))
            elif _NO_RUN.search(line):
                skip_next = True
            elif line.startswith("```"):
                in_block = True
                skipping = skip_next or line.strip() != "```console"
                skip_next = False
            continue
        if line.startswith("```"):
            in_block = False
            continuing = None
            continue
        if skipping:
            continue
        if continuing is not None:
            continuing.text += "\n" + line
            continuing.output_line = number + 1
            if not line.endswith("\\"):
                continuing = None
        elif line.startswith("$ "):
            if not parts:
                raise AssertionError(f"{page}:{number}: a transcript before any mode marker")
            command = Command(number, line[2:], output_line=number + 1)
            parts[-1].commands.append(command)
            if line.endswith("\\"):
                continuing = command
        elif parts and parts[-1].commands:
            parts[-1].commands[-1].expected.append(line)
    return [part for part in parts if part.commands]


def mask(text: str) -> str:
    for pattern, replacement in _MASKS:
        text = pattern.sub(replacement, text)
    return text


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Ports:
    """The page's addresses and the real ones, both ways."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.real: dict[str, str] = {}
        for node_id in cluster.node_ids:
            node = cluster.node(node_id)
            self.real[str(7400 + node_id)] = node.client_addr.rsplit(":", 1)[1]
            self.real[str(7500 + node_id)] = node.peer_addr.rsplit(":", 1)[1]

    def to_real(self, text: str) -> str:
        doc_ports = sorted(set(_DOC_ADDR.findall(text)) - self.real.keys())
        for doc_port in doc_ports:
            self.real[doc_port] = str(_free_port())
        return _DOC_ADDR.sub(lambda m: f"127.0.0.1:{self.real[m.group(1)]}", text)

    def to_doc(self, text: str) -> str:
        back = {real: doc for doc, real in self.real.items()}
        real_addr = re.compile(r"127\.0\.0\.1:(\d+)\b")
        return real_addr.sub(lambda m: f"127.0.0.1:{back.get(m.group(1), m.group(1))}", text)


def as_the_reader_sees(printed: str) -> str:
    """What a command printed, as the page shows it: tokens redacted, and the help text
    without the endpoints the test gives the CLI."""
    return _ENDPOINTS_HELP.sub(r"\1]", _TOKEN.sub("cairn_…(redacted)", printed))


def _reader_dir(cluster: LocalCluster, home: Path) -> Path:
    """A directory laid out as the reader's clone is after ``scripts/cluster up``."""
    state = home / ".cluster"
    state.mkdir(parents=True)
    secret = cluster.base_dir / "peer.secret"
    if secret.exists():
        shutil.copy(secret, state / "peer.secret")
    if cluster.auth:
        token = state / "admin.token"
        token.write_text(cluster.admin_token + "\n")
        token.chmod(0o600)
    return home


def _script(part: Part, ports: Ports, outputs: Path) -> str:
    lines = ["set +e"]
    for number, command in enumerate(part.commands):
        out = shlex.quote(str(outputs / str(number)))
        lines += ["{", ports.to_real(command.text), f"}} > {out} 2>&1 < /dev/null"]
    return "\n".join(lines) + "\n"


def _environment(cluster: LocalCluster) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if not _CLIENT_ENV.match(name)}
    env["PATH"] = f"{cluster.node_bin.parent}{os.pathsep}{env.get('PATH', '')}"
    env["CAIRN_ENDPOINTS"] = ",".join(cluster.endpoints)
    env["NO_COLOR"] = "1"
    return env


def _run_script(script: str, cwd: Path, env: dict[str, str]) -> None:
    """Runs the script in a process group of its own and ends the group after it, so a
    process a page starts in the background (a fourth node) never outlives the test."""
    bash = subprocess.Popen(["bash", "-c", script], cwd=cwd, env=env, start_new_session=True)
    try:
        bash.wait(timeout=PAGE_TIMEOUT_S)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(bash.pid, signal.SIGKILL)
        bash.wait()


def run_part(part: Part, tmp: Path) -> Iterator[tuple[Command, str]]:
    """Runs the part's commands in one bash on a fresh cluster; yields each command with
    what it printed, its addresses moved back to the page's."""
    with LocalCluster(3, auth=part.auth) as cluster:
        home = _reader_dir(cluster, tmp / "reader")
        outputs = tmp / "outputs"
        outputs.mkdir()
        ports = Ports(cluster)
        script = _script(part, ports, outputs)
        _run_script(script, home, _environment(cluster))
        for number, command in enumerate(part.commands):
            printed = (outputs / str(number)).read_text(errors="replace")
            yield command, as_the_reader_sees(ports.to_doc(printed))


def _differs(command: Command, printed: str) -> bool:
    return mask("\n".join(command.expected)).rstrip("\n") != mask(printed).rstrip("\n")


def _aligned(printed: str) -> str:
    """A table (``cairn cluster status``) with its columns padded for the page's
    addresses, which are shorter than the real ones."""
    rows = [re.split(r"  +", line) for line in printed.splitlines()]
    if not printed.startswith("ENDPOINT") or len({len(row) for row in rows}) != 1:
        return printed
    widths = [max(len(cell) for cell in column) for column in zip(*rows, strict=True)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def _rewrite(page: Path, ran: list[tuple[Command, str]]) -> None:
    """Puts what every command printed in place of what the page showed, so the page is
    one run throughout."""
    lines = page.read_text().splitlines()
    for command, printed in sorted(ran, key=lambda pair: -pair[0].line):
        start = command.output_line - 1
        lines[start : start + len(command.expected)] = _aligned(printed).splitlines()
    page.write_text("\n".join(lines) + "\n")


def _report(page: str, found: list[tuple[Command, str]]) -> str:
    return f"{len(found)} transcripts differ (CAIRN_DOCS_UPDATE=1 rewrites them):\n\n" + (
        "\n\n".join(
            f"{page}:{command.line}: $ {command.text}\n--- page\n"
            + "\n".join(command.expected)
            + f"\n--- ran\n{printed}"
            for command, printed in found
        )
    )


@pytest.mark.parametrize("page", PAGES)
def test_the_transcripts_print_what_the_page_shows(page: str, tmp_path: Path) -> None:
    parts = parse(REPO / page)
    assert parts, f"{page} has no transcripts"
    ran: list[tuple[Command, str]] = []
    for number, part in enumerate(parts):
        ran += [
            (command, printed.rstrip("\n"))
            for command, printed in run_part(part, tmp_path / f"part-{number}")
        ]
    found = [(command, printed) for command, printed in ran if _differs(command, printed)]
    if found and os.environ.get("CAIRN_DOCS_UPDATE") == "1":
        _rewrite(REPO / page, ran)
    assert not found, _report(page, found)
