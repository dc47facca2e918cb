"""LangGraph long-term memory on cairn: ``CairnStore``, a ``BaseStore`` whose items are
cairn notes (docs/langgraph.md). Needs the extra: ``pip install 'cairn-client[langgraph]'``.
"""

try:
    import langgraph.store.base  # noqa: F401
except ImportError as missing:
    raise ImportError(
        "cairn_client.langgraph needs LangGraph: pip install 'cairn-client[langgraph]'"
    ) from missing

from ._store import DELETE_REASON, WARNING_FIELD, CairnStore

__all__ = ["DELETE_REASON", "WARNING_FIELD", "CairnStore"]
