"""The sans-IO parts of ``watch()``: Server-Sent Events parsing and the resume position,
as the Rust client's ``client/src/watch.rs`` has them.

Resumption: a watch always knows the revision to resume from (the caller's
``from_revision``, or the leader's applied index + 1, then the last delivered revision). It
resumes *at* the last delivered revision, not after it, because one batch entry produces
several events with the same revision and the connection may break between them; events
already delivered at that revision are recognised by ``(key, version)`` and skipped.
"""

from __future__ import annotations

from pydantic import ValidationError

from .errors import CairnError, DecodeError, error_from_body
from .models import WatchEvent

# Longest SSE line accepted: one event is a few hundred bytes, so anything this long is a
# broken or hostile stream, not an event.
SSE_LINE_BYTES_MAX = 1 << 20


class SseParser:
    """Incremental SSE parser: feed it chunks, get the ``data`` of every complete event.
    ``event:``, ``id:``, ``retry:`` and ``:`` comment lines are ignored (the payload
    carries its revision)."""

    def __init__(self) -> None:
        self._line = bytearray()
        self._data: list[str] | None = None

    def push(self, chunk: bytes) -> list[str]:
        complete: list[str] = []
        lines = chunk.split(b"\n")
        for finished in lines[:-1]:
            self._line += finished
            line = bytes(self._line)
            self._line.clear()
            self._end_line(line.removesuffix(b"\r"), complete)
        self._line += lines[-1]
        if len(self._line) > SSE_LINE_BYTES_MAX:
            raise DecodeError(f"watch stream: line longer than {SSE_LINE_BYTES_MAX} bytes")
        return complete

    def _end_line(self, line: bytes, complete: list[str]) -> None:
        if not line:
            if self._data is not None:
                complete.append("\n".join(self._data))
                self._data = None
            return
        if len(line) > SSE_LINE_BYTES_MAX:
            raise DecodeError(f"watch stream: line longer than {SSE_LINE_BYTES_MAX} bytes")
        text = line.decode("utf-8", errors="replace")
        if not text.startswith("data:"):
            return
        value = text[len("data:") :].removeprefix(" ")
        if self._data is None:
            self._data = [value]
        else:
            self._data.append(value)


def decode_event(payload: str) -> WatchEvent:
    """A ``data:`` payload is a watch event, or an error body the node sends before closing
    the stream (raised as its exception)."""
    try:
        return WatchEvent.model_validate_json(payload)
    except ValidationError as err:
        error: CairnError | None = error_from_body(payload)
        if error is not None:
            raise error from None
        raise DecodeError(f"watch event: {_first_problem(err)}") from None


def _first_problem(err: ValidationError) -> str:
    problems = err.errors(include_input=False, include_url=False)
    return str(problems[0]["msg"]) if problems else str(err)


class WatchPosition:
    """Where a watch resumes, and which events at that revision it already delivered."""

    def __init__(self, from_revision: int) -> None:
        self.resume_from = from_revision
        self._delivered_at_resume: set[tuple[str, int]] = set()

    def already_delivered(self, event: WatchEvent) -> bool:
        return event.revision < self.resume_from or (
            event.revision == self.resume_from
            and (event.key, event.version) in self._delivered_at_resume
        )

    def remember(self, event: WatchEvent) -> None:
        if event.revision != self.resume_from:
            self.resume_from = event.revision
            self._delivered_at_resume.clear()
        self._delivered_at_resume.add((event.key, event.version))
