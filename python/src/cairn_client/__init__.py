"""Python client of cairn, the replicated memory cluster for AI agents."""
