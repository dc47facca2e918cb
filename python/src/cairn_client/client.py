"""``Cairn``: the synchronous client, on ``httpx.Client``.

Every operation is a program of the sans-IO core (``_core.py``); this module only performs
its effects: HTTP exchanges, sleeps, reads of an open watch stream.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar

import httpx

from ._base import ClientBase
from ._config import Settings
from ._core import (
    CloseStream,
    Core,
    Exchange,
    Program,
    ReadChunk,
    Reply,
    Sleep,
    StreamProgram,
    StreamSteps,
    is_success,
)
from ._httpx import (
    TRANSPORT_ERRORS,
    build_request,
    client_options,
    connection_failed,
)

__all__ = ["Cairn", "Stream"]

P = ParamSpec("P")
T = TypeVar("T")


class _OpenStream:
    """The body of a 2xx watch answer, read as it arrives."""

    def __init__(self, base: str, response: httpx.Response, read_only: bool) -> None:
        self.base = base
        self.response = response
        self.read_only = read_only
        self.chunks = response.iter_bytes()

    def close(self) -> None:
        self.response.close()


class _Transport:
    """Performs the effects of programs with one ``httpx.Client``."""

    def __init__(self, http: httpx.Client, core: Core) -> None:
        self.http = http
        self.core = core

    def run(self, program: Program[T]) -> T:
        opened: list[_OpenStream] = []
        outcome: Any = None
        try:
            while True:
                try:
                    effect = program.send(outcome)
                except StopIteration as stop:
                    result: T = stop.value
                    return result
                outcome = self.perform(effect, opened)
        finally:
            for stream in opened:
                stream.close()

    def perform(self, effect: Any, opened: list[_OpenStream]) -> Any:
        if isinstance(effect, Exchange):
            return self._exchange(effect, opened)
        if isinstance(effect, ReadChunk):
            return self._read_chunk(effect.stream)
        if isinstance(effect, CloseStream):
            effect.stream.close()
            opened.remove(effect.stream)
            return None
        if isinstance(effect, Sleep):
            time.sleep(effect.seconds)
            return None
        raise TypeError(f"not an effect: {effect!r}")

    def _exchange(self, effect: Exchange, opened: list[_OpenStream]) -> Any:
        request = build_request(self.http, self.core, effect)
        try:
            response = self.http.send(request, stream=effect.stream)
        except TRANSPORT_ERRORS as err:
            return connection_failed(effect.base, err, read_only=effect.read_only)
        if effect.stream and is_success(response.status_code):
            stream = _OpenStream(effect.base, response, effect.read_only)
            opened.append(stream)
            return Reply(response.status_code, b"", stream)
        try:
            return Reply(response.status_code, response.read())
        except TRANSPORT_ERRORS as err:
            return connection_failed(effect.base, err, read_only=effect.read_only)
        finally:
            response.close()

    @staticmethod
    def _read_chunk(stream: _OpenStream) -> Any:
        try:
            return next(stream.chunks, b"")
        except TRANSPORT_ERRORS as err:
            return connection_failed(stream.base, err, read_only=stream.read_only)


class Stream(Generic[T]):
    """The items of ``list_all()`` or ``watch()``: an iterator, and a context manager that
    closes its connection on exit. ``watch()`` returns it connected; ``list_all()`` opens
    it on the first item or on entry."""

    def __init__(self, transport: _Transport, program: StreamProgram[T]) -> None:
        self._transport = transport
        self._steps = StreamSteps(program)
        self._opened: list[_OpenStream] = []

    def open(self) -> Stream[T]:
        """Runs the stream until it is open (a watch connected); items that arrive on the
        way are kept for iteration."""
        while not self._steps.ready and not self._steps.done:
            self._pump()
        return self

    def __enter__(self) -> Stream[T]:
        return self.open()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __iter__(self) -> Iterator[T]:
        return self

    def __next__(self) -> T:
        while not self._steps.items and not self._steps.done:
            self._pump()
        if not self._steps.items:
            raise StopIteration
        return self._steps.items.popleft()

    def close(self) -> None:
        """Stops the stream and closes its connection."""
        self._steps.stop()
        for stream in self._opened:
            stream.close()
        self._opened.clear()

    def _pump(self) -> None:
        """Performs effects until the program emits, opens or ends."""
        try:
            outcome: Any = None
            while (effect := self._steps.advance(outcome)) is not None:
                outcome = self._transport.perform(effect, self._opened)
        except BaseException:
            self.close()
            raise
        if self._steps.done:
            self.close()


def _op(program: Callable[Concatenate[Core, P], Program[T]]) -> Callable[Concatenate[Cairn, P], T]:
    """A ``Cairn`` method that runs one core program."""

    @functools.wraps(program)
    def method(self: Cairn, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self._transport.run(program(self._core, *args, **kwargs))

    return method


def _stream(
    program: Callable[Concatenate[Core, P], StreamProgram[T]],
    *,
    connect: bool = False,
) -> Callable[Concatenate[Cairn, P], Stream[T]]:
    """A ``Cairn`` method that returns the items of one core stream program; with
    ``connect``, opened before it is returned (a watch connected), so a plain iterator
    misses nothing that happens after the call either."""

    @functools.wraps(program)
    def method(self: Cairn, /, *args: P.args, **kwargs: P.kwargs) -> Stream[T]:
        stream = Stream(self._transport, program(self._core, *args, **kwargs))
        return stream.open() if connect else stream

    return method


class Cairn(ClientBase):
    """A synchronous cairn client.

    ``Cairn(endpoints=[...], token=...)``; ``Cairn()`` alone reads ``CAIRN_ENDPOINTS``
    (comma-separated ``host:port`` or URLs; default the three local nodes of
    ``scripts/cluster up``), ``CAIRN_TOKEN`` or ``CAIRN_TOKEN_FILE``, ``CAIRN_CACERT``,
    ``CAIRN_CERT``/``CAIRN_KEY`` and ``CAIRN_ACTOR``.

    Args:
        endpoints: nodes to talk to; any member works, the leader is discovered.
        token: bearer token (SPEC §8); ``token_file`` reads it from a file.
        actor: default ``actor`` of mutations (with auth on it may be left out: the
            token's principal is the actor).
        session: a ``Session`` to check and record every answer in (read-your-writes and
            never-read-a-forgotten-value across nodes and agents).
        ca_cert: the cluster CA (PEM): trusted alone, and a bare ``host:port`` means
            ``https://``. ``verify`` may instead be an ``ssl.SSLContext`` (or ``False``).
        client_cert: a PEM file with certificate and key, or a ``(cert, key)`` pair, for
            client ports that require client certificates.
        timeout, connect_timeout, discovery_timeout: seconds per attempt, per connection,
            per leader-discovery status request.
        watch_silence_timeout: seconds an open watch may go without a byte (the node
            sends a keep-alive every 5 s) before it is taken as broken and reopened at the
            leader the nodes name then: how a watch leaves a stopped leader (default 15).
        call_timeout: seconds for a whole call, its retries and their backoff included
            (default none: ``retry`` alone bounds it). A mutation cut off by it raises
            ``OutcomeUnknown`` with its ``request_id``; a read, the last answer a node gave.
        retry: a ``RetryPolicy`` (default 8 retries, backoff 50 ms to 2 s).
        consistency, max_staleness_ms: defaults of reads that name none.

    Use it as a context manager (``with Cairn() as cairn:``) or call ``close()``. The
    mem0-style names ``add``, ``get``, ``get_all``, ``search`` and ``delete`` are aliases of
    ``write``, ``read``, ``list_all``, ``recall`` and ``forget`` (docs/python.md).
    """

    def _connect(self, settings: Settings) -> None:
        self._http = httpx.Client(**client_options(settings))
        self._transport = _Transport(self._http, self._core)

    def pinned(self, endpoint: str) -> Cairn:
        twin = super().pinned(endpoint)
        twin._transport = _Transport(self._http, twin._core)
        return twin

    def close(self) -> None:
        """Closes the connections (not those of the client a ``pinned()`` one came from)."""
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> Cairn:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    write = _op(Core.write)
    forget = _op(Core.forget)
    revoke = _op(Core.revoke)
    reinstate = _op(Core.reinstate)
    flag_stale = _op(Core.flag_stale)
    supersede = _op(Core.supersede)
    batch = _op(Core.batch)
    read = _op(Core.read)
    probe = _op(Core.probe)
    history = _op(Core.history)
    tombstone = _op(Core.tombstone)
    list_page = _op(Core.list_page)
    list_all = _stream(Core.list_all)
    recall = _op(Core.recall)
    watch = _stream(Core.watch, connect=True)
    leader = _op(Core.leader)
    cluster_status = _op(Core.cluster_status)
    cluster_init = _op(Core.cluster_init)
    cluster_join = _op(Core.cluster_join)
    cluster_remove = _op(Core.cluster_remove)
    compact = _op(Core.compact)
    healthz = _op(Core.healthz)
    metrics = _op(Core.metrics)
    enable_auth = _op(Core.enable_auth)
    create_principal = _op(Core.create_principal)
    rotate_token = _op(Core.rotate_token)
    delete_principal = _op(Core.delete_principal)
    set_grants = _op(Core.set_grants)
    principals = _op(Core.principals)
    whoami = _op(Core.whoami)

    # mem0-style names (docs/python.md says where the meaning differs).
    add = write
    get = read
    get_all = list_all
    search = recall
    delete = forget
    # Last in the class body, so that ``list`` still means the builtin above.
    list = _op(Core.list_page)
