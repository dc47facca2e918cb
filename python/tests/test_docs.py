"""The Python examples of docs/python.md run as written against a real cluster (all but
those marked ``<!-- no-run: why -->``), and those of the README too, so neither can drift
from the package.

Both run as a reader of the README runs them: on an auth-on cluster as ``scripts/cluster
up`` makes, with ``CAIRN_ENDPOINTS`` and ``CAIRN_TOKEN_FILE`` naming the admin's token file
and no actor (the token's principal is the actor). The guide's examples also run on a
cluster without auth, with the actor from ``CAIRN_ACTOR`` as the guide says."""

from __future__ import annotations

import inspect
import os
import re
from pathlib import Path

import pytest
from mypy import api as mypy

from cairn_client import AsyncCairn, Cairn
from cairn_client.testing import LocalCluster

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "python.md"
README = REPO / "README.md"
LANGGRAPH_GUIDE = REPO / "docs" / "langgraph.md"
_BLOCK = re.compile(r"(<!-- no-run: [^>]*-->\n)?```python\n(.*?)```", re.DOTALL)
_CLIENT_ENV = (
    "CAIRN_ENDPOINTS",
    "CAIRN_TOKEN",
    "CAIRN_TOKEN_FILE",
    "CAIRN_ACTOR",
    "CAIRN_CACERT",
    "CAIRN_CERT",
    "CAIRN_KEY",
)
# The actor the guide tells readers of a no-auth cluster to export.
GUIDE_NO_AUTH_ACTOR = "agent-a"


def _runnable_examples(doc: Path = GUIDE) -> list[str]:
    return [code for skip, code in _BLOCK.findall(doc.read_text()) if not skip]


def _run(doc: Path, number: int) -> None:
    code = _runnable_examples(doc)[number]
    exec(compile(code, f"{doc}:example {number}", "exec"), {"__name__": f"__{doc.stem}__"})


def _on_the_readers_cluster(examples: list[str]) -> list[int]:
    """The examples that use the reader's cluster, not one they start themselves (an
    auth-on ``LocalCluster``, where the guide says to unset ``CAIRN_ACTOR``)."""
    return [number for number, code in enumerate(examples) if "LocalCluster(" not in code]


@pytest.fixture
def as_readme_reader(
    auth_cluster: LocalCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The environment of the README: the cluster's endpoints and the admin's token in a
    file, mode 0600, as ``.cluster/admin.token`` is; nothing else."""
    for name in _CLIENT_ENV:
        monkeypatch.delenv(name, raising=False)
    token_file = tmp_path / "admin.token"
    fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(auth_cluster.admin_token + "\n")
    monkeypatch.setenv("CAIRN_ENDPOINTS", ",".join(auth_cluster.endpoints))
    monkeypatch.setenv("CAIRN_TOKEN_FILE", str(token_file))


def test_the_guide_has_runnable_examples() -> None:
    assert len(_runnable_examples()) >= 4


def test_the_guide_examples_leave_the_actor_to_the_token() -> None:
    """With auth on, an actor other than the principal's name is ``actor_mismatch``: an
    example that names one cannot run on the README's cluster."""
    for number, code in enumerate(_runnable_examples()):
        assert "actor=" not in code, f"{GUIDE}:example {number} names an actor"


def test_the_guide_says_how_to_name_the_actor_without_auth() -> None:
    assert f"export CAIRN_ACTOR={GUIDE_NO_AUTH_ACTOR}" in GUIDE.read_text()


def _documented_calls() -> list[tuple[str, list[str]]]:
    """The ``method(param, ...)`` calls of the guide's Operations table, each with the
    parameter names it shows (``*``, ``...`` and defaults left out)."""
    section = GUIDE.read_text().split("## Operations", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    calls = []
    for row in rows:
        for name, params in re.findall(r"`([a-z_]+)\(([^`]*)\)`", row.split(" | ")[0]):
            shown = [p.split("=")[0].strip() for p in params.split(",")]
            calls.append((name, [p for p in shown if p.isidentifier()]))
    return calls


def test_the_guide_names_parameters_as_the_methods_do() -> None:
    """A keyword call written from the guide (``cluster_join(node_id=4, ...)``) must not be
    a ``TypeError``: every parameter the Operations table shows is the method's."""
    calls = _documented_calls()
    assert len(calls) >= 20
    for name, shown in calls:
        for client in (Cairn, AsyncCairn):
            method = getattr(client, name)
            params = inspect.signature(method).parameters
            missing = [p for p in shown if p not in params]
            assert not missing, f"{client.__name__}.{name} has no parameter {missing}"


@pytest.mark.usefixtures("as_readme_reader")
@pytest.mark.parametrize("number", range(len(_runnable_examples())))
def test_a_guide_example_runs_on_an_auth_on_cluster(number: int) -> None:
    _run(GUIDE, number)


@pytest.mark.parametrize("number", _on_the_readers_cluster(_runnable_examples()))
def test_a_guide_example_runs_on_a_no_auth_cluster(
    number: int, cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in _CLIENT_ENV:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("CAIRN_ENDPOINTS", ",".join(cluster.endpoints))
    monkeypatch.setenv("CAIRN_ACTOR", GUIDE_NO_AUTH_ACTOR)
    _run(GUIDE, number)


@pytest.mark.usefixtures("as_readme_reader")
@pytest.mark.parametrize("number", range(len(_runnable_examples(README))))
def test_a_readme_example_runs_on_an_auth_on_cluster(number: int) -> None:
    _run(README, number)


def test_every_example_passes_mypy_strict(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The package is typed for ``mypy --strict`` users: an example they copy must pass it
    too, those not run included (``<!-- no-run -->`` marks what they need, not what they
    are). Checked against this clone's package, whatever the venv has installed."""
    monkeypatch.setenv("MYPYPATH", str(REPO / "python" / "src"))
    files = []
    for doc in (GUIDE, README, LANGGRAPH_GUIDE):
        for number, (_, code) in enumerate(_BLOCK.findall(doc.read_text())):
            example = tmp_path / f"{doc.stem}_example_{number}.py"
            example.write_text(code)
            files.append(str(example))
    config = str(REPO / "python" / "pyproject.toml")
    cache = str(tmp_path / ".mypy_cache")
    out, err, status = mypy.run(["--config-file", config, "--cache-dir", cache, *files])
    assert status == 0, out + err
