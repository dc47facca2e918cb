"""The Python examples of docs/python.md run as written against a real cluster (all but
those marked ``<!-- no-run: why -->``), so the guide cannot drift from the package."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cairn_client.testing import LocalCluster

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "python.md"
_BLOCK = re.compile(r"(<!-- no-run: [^>]*-->\n)?```python\n(.*?)```", re.DOTALL)


def _runnable_examples() -> list[str]:
    return [code for skip, code in _BLOCK.findall(GUIDE.read_text()) if not skip]


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
