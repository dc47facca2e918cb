"""The four-arm disposal experiment on a live cairn cluster (docs/experiment.md)."""
