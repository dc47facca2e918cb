"""Which items a search keeps and which namespaces a listing keeps: the ``filter`` of
LangGraph's ``SearchOp``, its ``query`` (anchor cues or words), and ``MatchCondition``s."""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from langgraph.store.base import MatchCondition

__all__ = [
    "ANCHOR_KINDS",
    "MATCH_TYPES",
    "filter_fault",
    "matches_condition",
    "matches_filter",
    "query_cues",
    "text_matches",
]

ANCHOR_KINDS = frozenset({"path", "symbol", "tag", "topic", "url"})
"""The kinds of a cairn anchor (``kind:value``, SPEC §4)."""

_ORDERINGS: Mapping[str, Callable[[Any, Any], bool]] = {
    "$gt": operator.gt,
    "$gte": operator.ge,
    "$lt": operator.lt,
    "$lte": operator.le,
}


def matches_filter(value: Mapping[str, Any], field_filter: Mapping[str, Any] | None) -> bool:
    """Whether ``value`` passes a LangGraph filter: every field equal to the filter's
    (nested objects field by field, lists element by element), or satisfying its
    operators (``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``)."""
    return not field_filter or all(
        _matches(value.get(name), wanted) for name, wanted in field_filter.items()
    )


def _matches(actual: Any, wanted: Any) -> bool:
    if isinstance(wanted, Mapping) and any(str(name).startswith("$") for name in wanted):
        return all(_satisfies(actual, name, operand) for name, operand in wanted.items())
    if isinstance(wanted, Mapping):
        return isinstance(actual, Mapping) and all(
            _matches(actual.get(name), inner) for name, inner in wanted.items()
        )
    if isinstance(wanted, list | tuple):
        return (
            isinstance(actual, list)
            and len(actual) == len(wanted)
            and all(_matches(a, w) for a, w in zip(actual, wanted, strict=True))
        )
    return bool(actual == wanted)


def _satisfies(actual: Any, name: str, operand: Any) -> bool:
    if name == "$eq":
        return _matches(actual, operand)
    if name == "$ne":
        return not _matches(actual, operand)
    ordering = _ORDERINGS.get(name)
    if ordering is None:
        raise ValueError(f"unsupported filter operator {name!r}: use $eq $ne $gt $gte $lt $lte")
    # Only numbers are ordered: a missing field or a string never passes (no TypeError).
    return _is_number(actual) and _is_number(operand) and ordering(actual, operand)


def filter_fault(field_filter: Mapping[str, Any] | None) -> str | None:
    """What in a filter ``matches_filter`` cannot evaluate (an operator other than the six
    it knows), found before a batch runs rather than when its search's turn comes;
    ``None`` when all of it can be."""
    return _first_fault((field_filter or {}).values())


def _wanted_fault(wanted: Any) -> str | None:
    """As ``_matches`` walks ``wanted``: the first operator it would refuse."""
    if isinstance(wanted, Mapping) and any(str(name).startswith("$") for name in wanted):
        for name, operand in wanted.items():
            if name in ("$eq", "$ne"):
                fault = _wanted_fault(operand)
                if fault is not None:
                    return fault
            elif name not in _ORDERINGS:
                return f"unsupported filter operator {name!r}: use $eq $ne $gt $gte $lt $lte"
        return None
    if isinstance(wanted, Mapping):
        return _first_fault(wanted.values())
    if isinstance(wanted, list | tuple):
        return _first_fault(wanted)
    return None


def _first_fault(wanted: Iterable[Any]) -> str | None:
    return next((fault for fault in map(_wanted_fault, wanted) if fault is not None), None)


MATCH_TYPES = ("prefix", "suffix")
"""The ``match_type``s ``matches_condition`` evaluates."""


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def query_cues(query: str) -> list[str] | None:
    """The query's distinct words, in order, as recall cues when every word is an anchor
    (``topic:db path:src/``); ``None`` when it is free text. Distinct because cairn counts
    a cue given twice once (SPEC §4): a score is matched cues over distinct cues."""
    words = query.split()
    if not words or not all(_is_anchor(word) for word in words):
        return None
    return list(dict.fromkeys(words))


def _is_anchor(word: str) -> bool:
    kind, colon, value = word.partition(":")
    return bool(colon) and kind in ANCHOR_KINDS and bool(value)


def text_matches(value: Mapping[str, Any], query: str) -> bool:
    """Whether every word of ``query`` occurs, ignoring case, in the string values of
    ``value`` (at any depth)."""
    text = "\n".join(_strings(value)).casefold()
    return all(word.casefold() in text for word in query.split())


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for inner in value.values():
            yield from _strings(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _strings(inner)


def matches_condition(condition: MatchCondition, namespace: Sequence[str]) -> bool:
    """Whether ``namespace`` starts (``prefix``) or ends (``suffix``) with the condition's
    path, where a ``*`` label matches any label."""
    path = condition.path
    if len(namespace) < len(path):
        return False
    if condition.match_type == "prefix":
        labels = namespace[: len(path)]
    elif condition.match_type == "suffix":
        labels = namespace[len(namespace) - len(path) :]
    else:
        raise ValueError(f"unsupported match type {condition.match_type!r}")
    return all(want in ("*", label) for want, label in zip(path, labels, strict=True))
