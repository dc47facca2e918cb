"""``AsyncCairn``: the asynchronous client, on ``httpx.AsyncClient`` (asyncio or trio).

Every operation is a program of the sans-IO core (``_core.py``), the same programs
``Cairn`` runs; this module only performs their effects with ``await``.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable, Coroutine
from types import TracebackType
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar

import anyio
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

__all__ = ["AsyncCairn", "AsyncStream"]

P = ParamSpec("P")
T = TypeVar("T")


class _OpenStream:
    """The body of a 2xx watch answer, read as it arrives."""

    def __init__(self, base: str, response: httpx.Response, read_only: bool) -> None:
        self.base = base
        self.response = response
        self.read_only = read_only
        self.chunks = response.aiter_bytes()

    async def close(self) -> None:
        await self.response.aclose()


class _Transport:
    """Performs the effects of programs with one ``httpx.AsyncClient``."""

    def __init__(self, http: httpx.AsyncClient, core: Core) -> None:
        self.http = http
        self.core = core

    async def run(self, program: Program[T]) -> T:
        opened: list[_OpenStream] = []
        outcome: Any = None
        try:
            while True:
                try:
                    effect = program.send(outcome)
                except StopIteration as stop:
                    result: T = stop.value
                    return result
                outcome = await self.perform(effect, opened)
        finally:
            for stream in opened:
                await stream.close()

    async def perform(self, effect: Any, opened: list[_OpenStream]) -> Any:
        if isinstance(effect, Exchange):
            return await self._exchange(effect, opened)
        if isinstance(effect, ReadChunk):
            return await self._read_chunk(effect.stream)
        if isinstance(effect, CloseStream):
            await effect.stream.close()
            opened.remove(effect.stream)
            return None
        if isinstance(effect, Sleep):
            await anyio.sleep(effect.seconds)
            return None
        raise TypeError(f"not an effect: {effect!r}")

    async def _exchange(self, effect: Exchange, opened: list[_OpenStream]) -> Any:
        request = build_request(self.http, self.core, effect)
        try:
            response = await self.http.send(request, stream=effect.stream)
        except TRANSPORT_ERRORS as err:
            return connection_failed(effect.base, err, read_only=effect.read_only)
        if effect.stream and is_success(response.status_code):
            stream = _OpenStream(effect.base, response, effect.read_only)
            opened.append(stream)
            return Reply(response.status_code, b"", stream)
        try:
            return Reply(response.status_code, await response.aread())
        except TRANSPORT_ERRORS as err:
            return connection_failed(effect.base, err, read_only=effect.read_only)
        finally:
            await response.aclose()

    @staticmethod
    async def _read_chunk(stream: _OpenStream) -> Any:
        try:
            return await anext(stream.chunks, b"")
        except TRANSPORT_ERRORS as err:
            return connection_failed(stream.base, err, read_only=stream.read_only)


class AsyncStream(Generic[T]):
    """The items of ``list_all()`` or ``watch()``: an async iterator, and an async context
    manager that opens it on entry (a watch is connected when the ``async with`` block
    starts) and closes its connection on exit."""

    def __init__(self, transport: _Transport, program: StreamProgram[T]) -> None:
        self._transport = transport
        self._steps = StreamSteps(program)
        self._opened: list[_OpenStream] = []

    async def open(self) -> AsyncStream[T]:
        """Runs the stream until it is open (a watch connected); items that arrive on the
        way are kept for iteration."""
        while not self._steps.ready and not self._steps.done:
            await self._pump()
        return self

    async def __aenter__(self) -> AsyncStream[T]:
        return await self.open()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __aiter__(self) -> AsyncIterator[T]:
        return self

    async def __anext__(self) -> T:
        while not self._steps.items and not self._steps.done:
            await self._pump()
        if not self._steps.items:
            raise StopAsyncIteration
        return self._steps.items.popleft()

    async def aclose(self) -> None:
        """Stops the stream and closes its connection."""
        self._steps.stop()
        for stream in self._opened:
            await stream.close()
        self._opened.clear()

    async def _pump(self) -> None:
        """Performs effects until the program emits, opens or ends."""
        try:
            outcome: Any = None
            while (effect := self._steps.advance(outcome)) is not None:
                outcome = await self._transport.perform(effect, self._opened)
        except BaseException:
            await self.aclose()
            raise
        if self._steps.done:
            await self.aclose()


def _op(
    program: Callable[Concatenate[Core, P], Program[T]],
) -> Callable[Concatenate[AsyncCairn, P], Coroutine[Any, Any, T]]:
    """An ``AsyncCairn`` method that runs one core program."""

    @functools.wraps(program)
    async def method(self: AsyncCairn, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self._transport.run(program(self._core, *args, **kwargs))

    return method


def _stream(
    program: Callable[Concatenate[Core, P], StreamProgram[T]],
) -> Callable[Concatenate[AsyncCairn, P], AsyncStream[T]]:
    """An ``AsyncCairn`` method that returns the items of one core stream program."""

    @functools.wraps(program)
    def method(self: AsyncCairn, /, *args: P.args, **kwargs: P.kwargs) -> AsyncStream[T]:
        return AsyncStream(self._transport, program(self._core, *args, **kwargs))

    return method


class AsyncCairn(ClientBase):
    """An asynchronous cairn client: the arguments, operations and rules of ``Cairn``,
    each operation a coroutine (``await cairn.write(...)``), and ``list_all()``/``watch()``
    async iterators. Use it as ``async with AsyncCairn() as cairn:`` or call ``aclose()``.
    """

    def _connect(self, settings: Settings) -> None:
        self._http = httpx.AsyncClient(**client_options(settings))
        self._transport = _Transport(self._http, self._core)

    def pinned(self, endpoint: str) -> AsyncCairn:
        twin = super().pinned(endpoint)
        twin._transport = _Transport(self._http, twin._core)
        return twin

    async def aclose(self) -> None:
        """Closes the connections (not those of the client a ``pinned()`` one came from)."""
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncCairn:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

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
    watch = _stream(Core.watch)
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
