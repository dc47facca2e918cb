"""``Session``: what one agent has already seen, so no read can take it back (SPEC §3,
"Forget epochs on every read"), with the same rules and token format as the Rust client
(``client/src/session.rs``), so a session passes between Rust and Python agents.

A session records the highest revision seen and, per key, the highest
``(generation, forget_epoch, version)`` seen (plus the revision it was seen at, used only to
pick which keys to keep). The client sends the session revision as ``min_revision`` and
checks every answer against the per-key marks: an answer whose generation, version or
forget_epoch is below what the session knows is stale. Versions never reset (SPEC §2), so
the three numbers only grow and any decrease is a regression.

Memory is bounded: at most ``keys_max`` keys (default ``SESSION_KEYS_MAX``); when full, the
lowest-revision tenth is evicted. Eviction only weakens the per-key check for those keys to
the session revision, which still applies: a node that honours ``min_revision`` has applied
every revision the session saw, including the evicted key's last one.

Token format: ``base64url_nopad(json)`` with
``json = {"r": REV, "k": [[KEY, GEN, FORGET_EPOCH, VERSION, KEY_REV], ...]}``, keys ordered
by ``KEY_REV`` descending (then key), at most ``TOKEN_KEYS_MAX`` keys and
``TOKEN_JSON_BYTES_MAX`` bytes of JSON (the most recently changed keys are kept; the rest
are covered by ``r``).
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .errors import InvalidInput, SessionRegression
from .models import (
    BatchResult,
    EventKind,
    HistoryResponse,
    ListResponse,
    MutationResult,
    ProbeResponse,
    ReadResponse,
    RecallNote,
    RecallResponse,
    Record,
)

__all__ = [
    "SESSION_KEYS_MAX",
    "TOKEN_CHARS_MAX",
    "TOKEN_JSON_BYTES_MAX",
    "TOKEN_KEYS_MAX",
    "KeyMark",
    "Observable",
    "Session",
]

SESSION_KEYS_MAX = 10_000
"""Default bound on the number of keys a session tracks individually."""
# Share of keys_max kept after an eviction: evicting a tenth at a time keeps the sort cost
# amortized instead of paid on every new key.
_EVICT_KEEP_PERCENT = 90
TOKEN_KEYS_MAX = 256
"""Most keys an exported token names."""
TOKEN_JSON_BYTES_MAX = 16 * 1024
"""Most bytes of JSON inside an exported token."""
TOKEN_CHARS_MAX = 64 * 1024
"""Longest token accepted on import (generous: other producers may pack more keys)."""
# SPEC §5 key limit, checked on import so a token cannot smuggle absurd keys.
_KEY_BYTES_MAX = 512
# Bytes of {"r":<20 digits>,"k":[]}, the part of a token that is not entries.
_TOKEN_FRAME_BYTES = 32

Observable = (
    MutationResult
    | BatchResult
    | ReadResponse
    | ListResponse
    | RecallResponse
    | ProbeResponse
    | HistoryResponse
)
"""An answer that reports key states a session can observe and check."""


@dataclass(frozen=True)
class KeyMark:
    """The highest state of one key a session has seen."""

    generation: int
    forget_epoch: int
    version: int
    revision: int
    """Revision of the change that produced this state (eviction order only)."""

    def merge(self, other: KeyMark) -> KeyMark:
        """Component-wise maximum: all four only grow for a key, so this is the newest."""
        return KeyMark(
            generation=max(self.generation, other.generation),
            forget_epoch=max(self.forget_epoch, other.forget_epoch),
            version=max(self.version, other.version),
            revision=max(self.revision, other.revision),
        )

    def regression(self, got: KeyMark) -> str | None:
        """Why ``got`` is older than this mark, if it is."""
        for name in ("generation", "forget_epoch", "version"):
            got_value, known = getattr(got, name), getattr(self, name)
            if got_value < known:
                return f"{name} {got_value} < {known} already seen"
        return None


class Session:
    """What one agent has seen; see the module docs. Thread-safe: a client shares it
    between calls (and threads); the lock is never held across I/O."""

    def __init__(self, keys_max: int = SESSION_KEYS_MAX) -> None:
        self._revision = 0
        self._keys: dict[str, KeyMark] = {}
        self._keys_max = max(keys_max, 1)
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"Session(revision={self._revision}, keys={len(self._keys)})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Session):
            return NotImplemented
        return self._revision == other._revision and self._keys == other._keys

    __hash__ = None  # type: ignore[assignment]  # mutable

    @property
    def revision(self) -> int:
        """Highest revision seen; sent as ``min_revision`` on every read."""
        return self._revision

    def key(self, key: str) -> KeyMark | None:
        """The highest state seen for ``key``, unless never seen or evicted."""
        return self._keys.get(key)

    def __len__(self) -> int:
        """Number of keys tracked individually."""
        return len(self._keys)

    def observe(self, answer: Observable) -> None:
        """Records everything a mutation result or read answer reports. A read's
        ``served.applied_index`` counts as seen too: a list or recall shows the state at
        that index, keys it leaves out included (a forgotten key is not recalled), so a
        later read must not come from a node that applied less."""
        applied = applied_index_of(answer)
        if applied is not None:
            with self._lock:
                self._revision = max(self._revision, applied)
        for key, mark in marks_of(answer):
            self.observe_key(key, mark)

    def observe_key(self, key: str, mark: KeyMark) -> None:
        """Records one key state."""
        with self._lock:
            self._revision = max(self._revision, mark.revision)
            if mark.version == 0:
                # Version 0: the key was never written (probe of an absent key).
                return
            known = self._keys.get(key)
            if known is not None:
                self._keys[key] = known.merge(mark)
                return
            if len(self._keys) >= self._keys_max:
                self._evict_lowest()
            self._keys[key] = mark

    def check(self, answer: Observable) -> None:
        """Raises ``SessionRegression`` when the answer is older than what the session saw:
        the serving node had applied less than the session revision, or a key's
        generation, forget_epoch or version is below the session's mark."""
        applied = applied_index_of(answer)
        if applied is not None and applied < self._revision:
            raise SessionRegression(
                f"served at applied index {applied} < session revision {self._revision}"
            )
        for key, mark in marks_of(answer):
            self.check_key(key, mark)

    def check_key(self, key: str, mark: KeyMark) -> None:
        """Raises ``SessionRegression`` when ``mark`` is older than the mark for ``key``."""
        known = self._keys.get(key)
        reason = known.regression(mark) if known is not None else None
        if reason is not None:
            raise SessionRegression(f"key {key!r}: {reason}", key=key)

    def check_absent(self, key: str) -> None:
        """Raises ``SessionRegression`` when a node says ``key`` is absent but the session
        saw it: a key never returns to absent (forgotten keys keep their record)."""
        known = self._keys.get(key)
        if known is not None:
            raise SessionRegression(
                f"key {key!r}: reported absent, but version {known.version} already seen",
                key=key,
            )

    def export_token(self) -> str:
        """The session as a token another agent (Python or Rust) can import."""
        with self._lock:
            newest = sorted(self._keys.items(), key=lambda item: (-item[1].revision, item[0]))
            revision = self._revision
        entries: list[list[Any]] = []
        json_bytes = _TOKEN_FRAME_BYTES
        for key, mark in newest[:TOKEN_KEYS_MAX]:
            entry = [key, mark.generation, mark.forget_epoch, mark.version, mark.revision]
            entry_bytes = len(_compact_json(entry)) + 1
            if json_bytes + entry_bytes > TOKEN_JSON_BYTES_MAX:
                break
            json_bytes += entry_bytes
            entries.append(entry)
        raw = _compact_json({"r": revision, "k": entries})
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")

    @classmethod
    def import_token(cls, token: str) -> Session:
        """Parses a token made by ``export_token`` (here or in the Rust client); raises
        ``InvalidInput`` for anything else."""
        if not isinstance(token, str):
            raise _malformed(f"expected a str, not {type(token).__name__}")
        body = _decode_token(token.strip())
        session = cls()
        session._revision = body.revision
        for key, mark in body.entries:
            session.observe_key(key, mark)
        return session

    def _evict_lowest(self) -> None:
        keep = self._keys_max * _EVICT_KEEP_PERCENT // 100
        evict = max(len(self._keys) - keep, 1)
        oldest = sorted((mark.revision, key) for key, mark in self._keys.items())
        for _, key in oldest[:evict]:
            del self._keys[key]


@dataclass(frozen=True)
class _TokenBody:
    revision: int
    entries: list[tuple[str, KeyMark]]


def _compact_json(value: Any) -> bytes:
    """JSON as serde_json writes it: no spaces, non-ASCII kept as UTF-8."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _malformed(why: str) -> InvalidInput:
    return InvalidInput(f"malformed session token: {why}")


def _decode_token(token: str) -> _TokenBody:
    if not token:
        raise _malformed("empty")
    if len(token) > TOKEN_CHARS_MAX:
        raise _malformed(f"{len(token)} characters, at most {TOKEN_CHARS_MAX}")
    if "=" in token or not token.isascii():
        raise _malformed("not base64url without padding")
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        parsed = json.loads(raw)
    except (binascii.Error, ValueError) as err:
        raise _malformed(f"not base64url JSON: {err}") from None
    shape = '{"r":REV,"k":[[KEY,GEN,FE,VER,REV],...]}'
    if not isinstance(parsed, dict) or set(parsed) != {"r", "k"}:
        raise _malformed(f"not {shape}")
    revision, raw_entries = parsed["r"], parsed["k"]
    if not _is_u64(revision) or not isinstance(raw_entries, list):
        raise _malformed(f"not {shape}")
    entries = [_decode_entry(entry, shape) for entry in raw_entries]
    _validate(revision, entries)
    return _TokenBody(revision, entries)


def _decode_entry(entry: Any, shape: str) -> tuple[str, KeyMark]:
    if (
        not isinstance(entry, list)
        or len(entry) != 5
        or not isinstance(entry[0], str)
        or not all(_is_u64(number) for number in entry[1:])
    ):
        raise _malformed(f"not {shape}")
    key, generation, forget_epoch, version, revision = entry
    return key, KeyMark(generation, forget_epoch, version, revision)


def _validate(revision: int, entries: Iterable[tuple[str, KeyMark]]) -> None:
    """Rejects entries no real session could hold."""
    seen: set[str] = set()
    for key, mark in entries:
        problem = None
        if not 1 <= len(key.encode()) <= _KEY_BYTES_MAX:
            problem = "key must be 1-512 bytes"
        elif key in seen:
            problem = "key listed twice"
        elif mark.generation == 0 or mark.version == 0:
            problem = "generation and version start at 1"
        elif mark.forget_epoch > mark.version:
            problem = "forget_epoch above version"
        elif mark.revision > revision:
            problem = "key revision above session revision"
        if problem is not None:
            raise _malformed(f"entry {key!r}: {problem}")
        seen.add(key)


def _is_u64(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**64


def marks_of(answer: Observable) -> list[tuple[str, KeyMark]]:
    """Every key an answer reports, with its state."""
    if isinstance(answer, BatchResult):
        return [mark for result in answer.results for mark in marks_of(result)]
    if isinstance(answer, ListResponse):
        return [(item.key, _mark(item)) for item in answer.items]
    if isinstance(answer, RecallResponse):
        return [(note.key, _mark(note)) for note in answer.notes]
    if isinstance(answer, ProbeResponse):
        # A probe reports no revision for the key; 0 only means "no newer than anything".
        mark = KeyMark(answer.generation, answer.forget_epoch, answer.version, 0)
        return [(answer.key, mark)]
    if isinstance(answer, HistoryResponse):
        return [(answer.key, _history_mark(answer))]
    return [(answer.key, _mark(answer))]


def applied_index_of(answer: Observable) -> int | None:
    """Applied index of the node that served a read; ``None`` for mutation results."""
    if isinstance(answer, MutationResult | BatchResult):
        return None
    return answer.served.applied_index


def _mark(answer: MutationResult | Record | RecallNote) -> KeyMark:
    return KeyMark(answer.generation, answer.forget_epoch, answer.version, answer.revision)


def _history_mark(history: HistoryResponse) -> KeyMark:
    """The history holds the whole life of the key: one generation per
    ``tombstone_cleared`` after the first, the last forget's version as forget epoch, the
    last event's version and revision."""
    generation, forget_epoch, version, revision = 1, 0, 0, 0
    for event in history.events:
        if event.kind is EventKind.TOMBSTONE_CLEARED:
            generation += 1
        elif event.kind is EventKind.FORGOTTEN:
            forget_epoch = event.version
        version, revision = event.version, event.revision
    return KeyMark(generation, forget_epoch, version, revision)
