"""The two figures of a run (PNG): error survival per arm, and re-derivations per arm."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only; no display on the machines this runs on

import matplotlib.pyplot as plt

from .arms import ARMS

SURVIVAL_PNG = "survival.png"
REDERIVATIONS_PNG = "rederivations.png"


def write_plots(document: Mapping[str, Any], directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    return [
        _survival(document, directory / SURVIVAL_PNG),
        _rederivations(document, directory / REDERIVATIONS_PNG),
    ]


def _survival(document: Mapping[str, Any], path: Path) -> Path:
    premises = list(dict.fromkeys(r["premise"] for r in document["records"]))
    figure, axes = plt.subplots(1, len(premises), figsize=(5.5 * len(premises), 4), squeeze=False)
    for axis, premise in zip(axes[0], premises, strict=True):
        for record in document["records"]:
            if record["premise"] == premise:
                curve = record["survival_curve"]
                axis.step(
                    range(len(curve)),
                    curve,
                    where="post",
                    label=f"{record['arm']} {ARMS[record['arm']].title}",
                )
        axis.set_title(f"stale premise {premise}")
        axis.set_xlabel("sessions after disposal")
        axis.set_ylim(-0.02, 1.02)
        axis.grid(alpha=0.3)
    axes[0][0].set_ylabel("runs whose false belief still rules")
    axes[0][-1].legend(loc="upper right", fontsize="small")
    figure.suptitle(f"Error survival ({_provenance(document)})", fontsize="medium")
    return _save(figure, path)


def _rederivations(document: Mapping[str, Any], path: Path) -> Path:
    premises = list(dict.fromkeys(r["premise"] for r in document["records"]))
    arms = list(dict.fromkeys(r["arm"] for r in document["records"]))
    width = 0.8 / len(premises)
    figure, axis = plt.subplots(figsize=(8, 4.5))
    for offset, premise in enumerate(premises):
        means = {
            r["arm"]: r["rederivations"] for r in document["records"] if r["premise"] == premise
        }
        positions = [i + (offset - (len(premises) - 1) / 2) * width for i in range(len(arms))]
        bars = axis.bar(positions, [means[arm] for arm in arms], width, label=f"premise {premise}")
        axis.bar_label(bars, fmt="%.2f", fontsize="small")
    labels = [f"{arm}\n{textwrap.fill(ARMS[arm].title, 20)}" for arm in arms]
    axis.set_xticks(range(len(arms)), labels, fontsize="small")
    axis.set_ylabel("re-derivations per run (mean)")
    axis.legend()
    axis.set_title(
        f"Re-derivations of the false belief ({_provenance(document)})", fontsize="medium"
    )
    return _save(figure, path)


def _provenance(document: Mapping[str, Any]) -> str:
    world = document["world"]
    return (
        f"{document['agent']['kind']} agent, {document['seeds']} seeds x "
        f"{world['sessions']} sessions"
    )


def _save(figure: Any, path: Path) -> Path:
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path
