"""The Python examples of docs/python.md run as written against a real cluster (all but
those marked ``<!-- no-run: why -->``), and those of the README against an auth-on one
as ``scripts/cluster up`` makes, so neither can drift from the package."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cairn_client.testing import LocalCluster

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "python.md"
README = REPO / "README.md"
_BLOCK = re.compile(r"(<!-- no-run: [^>]*-->\n)?```python\n(.*?)```", re.DOTALL)


def _runnable_examples(doc: Path = GUIDE) -> list[str]:
    return [code for skip, code in _BLOCK.findall(doc.read_text()) if not skip]


def test_the_guide_has_runnable_examples() -> None:
    assert len(_runnable_examples()) >= 4


@pytest.mark.parametrize("number", range(len(_runnable_examples())))
def test_a_guide_example_runs(
    number: int, cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CAIRN_ENDPOINTS", ",".join(cluster.endpoints))
    for name in ("CAIRN_TOKEN", "CAIRN_TOKEN_FILE", "CAIRN_CACERT", "CAIRN_ACTOR"):
        monkeypatch.delenv(name, raising=False)
    code = _runnable_examples()[number]
    exec(compile(code, f"{GUIDE}:example {number}", "exec"), {"__name__": "__guide__"})


@pytest.mark.parametrize("number", range(len(_runnable_examples(README))))
def test_a_readme_example_runs_on_an_auth_on_cluster(
    number: int, auth_cluster: LocalCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CAIRN_ENDPOINTS", ",".join(auth_cluster.endpoints))
    monkeypatch.setenv("CAIRN_TOKEN", auth_cluster.admin_token)
    for name in ("CAIRN_TOKEN_FILE", "CAIRN_CACERT", "CAIRN_ACTOR"):
        monkeypatch.delenv(name, raising=False)
    code = _runnable_examples(README)[number]
    exec(compile(code, f"{README}:example {number}", "exec"), {"__name__": "__readme__"})
