"""How a LangGraph namespace and key become one cairn key, and back.

``("users", "alice")`` + ``"prefs"`` under the prefix ``langgraph/`` is the cairn key
``langgraph/users/alice/prefs``: the labels and the key joined by ``/``. Each part is
escaped so the mapping is reversible and every key is one cairn accepts: ``%``, ``/`` and
the control characters cairn keys refuse (Unicode category Cc, as Rust's
``char::is_control``) become the percent-encoding of their UTF-8 bytes
(``a/b`` → ``a%2Fb``, ``%`` → ``%25``, tab → ``%09``); everything else, any other Unicode
included, stays as it is.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from urllib.parse import quote, unquote

from ..errors import InvalidInput

__all__ = ["KeyCodec", "first_control_character", "utf8_size"]

_SEPARATOR = "/"
_ALWAYS_ESCAPED = frozenset("%/")
_KEY_BYTES_MAX = 512
"""The node's default ``limits.key_bytes_max`` (SPEC §5): the longest cairn key."""
_SHORTEST_ITEM = len("a" + _SEPARATOR)
"""What the shortest item adds to the prefix: a one-byte label and its ``/`` (a label is
never empty), then an empty key."""
_PREFIX_BYTES_MAX = _KEY_BYTES_MAX - _SHORTEST_ITEM
"""The longest prefix under which an item still fits in a cairn key."""


def _is_control(char: str) -> bool:
    """Whether cairn counts ``char`` as a control character (Rust's ``char::is_control``:
    Unicode category Cc)."""
    return unicodedata.category(char) == "Cc"


def first_control_character(text: str, allowed: str = "") -> str | None:
    """The first control character of ``text`` that is not in ``allowed``, if any."""
    return next((char for char in text if _is_control(char) and char not in allowed), None)


def utf8_size(name: str, text: str) -> int:
    """The bytes of ``text`` in UTF-8, as the node counts them; a lone surrogate, which
    has no UTF-8 and could never be sent, is refused naming the argument ``name``."""
    try:
        return len(text.encode())
    except UnicodeEncodeError as err:
        raise InvalidInput(f"{name}: {err.object[err.start]!r} is not valid Unicode") from None


def _needs_escape(char: str) -> bool:
    return char in _ALWAYS_ESCAPED or _is_control(char)


def escape(part: str) -> str:
    """``part`` with ``%``, ``/`` and control characters percent-encoded."""
    return "".join(quote(char, safe="") if _needs_escape(char) else char for char in part)


def unescape(part: str) -> str | None:
    """The text ``escape`` turned into ``part``; ``None`` when no text escapes to exactly
    ``part`` (a key the store did not write, such as ``a%2fb`` or a stray ``%``)."""
    try:
        text = unquote(part, errors="strict")
    except UnicodeDecodeError:
        return None
    return text if escape(text) == part else None


class KeyCodec:
    """The cairn keys of one store: ``prefix`` + escaped labels and key, ``/``-joined."""

    def __init__(self, prefix: str) -> None:
        if not isinstance(prefix, str):
            raise InvalidInput(f"prefix: expected a str, not {type(prefix).__name__}")
        if prefix and not prefix.endswith(_SEPARATOR):
            # Without the separator, "lg" would also claim the keys of "lgx/...".
            raise InvalidInput(f"prefix {prefix!r} must be empty or end with '/'")
        control = first_control_character(prefix)
        if control is not None:
            # The prefix is not escaped (it is the store's own), and the node refuses a key
            # with a control character: every call of the store would fail.
            raise InvalidInput(
                f"prefix {prefix!r} contains the control character {control!r}, which cairn "
                "keys refuse"
            )
        size = utf8_size("prefix", prefix)
        if size > _PREFIX_BYTES_MAX:
            # No item's key would fit: the node would refuse every put, get and delete
            # (a search could find nothing, and past 512 bytes is refused as well).
            raise InvalidInput(
                f"prefix: {size} bytes; at most {_PREFIX_BYTES_MAX}, so that an item's key "
                f"(the prefix, a label, '/', the key) fits in {_KEY_BYTES_MAX} bytes (the "
                "node's default limits.key_bytes_max)"
            )
        self.prefix = prefix

    def key(self, namespace: Sequence[str], key: str) -> str:
        """The cairn key of item ``key`` in ``namespace``."""
        return self.namespace_prefix(namespace) + escape(key)

    def namespace_prefix(self, labels: Sequence[str]) -> str:
        """The cairn key prefix under which every item of ``labels`` and of the namespaces
        below it lives (``labels=()``: every item of the store)."""
        return self.prefix + "".join(escape(label) + _SEPARATOR for label in labels)

    def decode(self, cairn_key: str) -> tuple[tuple[str, ...], str] | None:
        """``(namespace, key)`` of a cairn key; ``None`` for a key this store cannot have
        written (outside the prefix, no label or an empty one, a non-canonical escape): a
        put needs a namespace of at least one label, so a note right under the prefix is
        not an item."""
        if not cairn_key.startswith(self.prefix):
            return None
        texts: list[str] = []
        for part in cairn_key[len(self.prefix) :].split(_SEPARATOR):
            text = unescape(part)
            if text is None:
                return None
            texts.append(text)
        *labels, key = texts
        if not labels or "" in labels:
            return None
        return tuple(labels), key
