"""The protocol client a transport sends with, replaced by a fresh one (new connections) on demand.

A gRPC channel, or an aiohttp session, keeps its connections open: behind a connection balancer they stay
on the server they reached first. ``replace`` makes the next calls use a new client (new connections, which
the balancer places anew); the old one is closed once its calls in flight ended (closing a gRPC channel
would cut them). See ``tritonrt.client._retry`` for when.

Example::

    slot = ClientSlot(make_channel, lambda channel: channel.close())
    with slot.use() as (channel, generation):
        ...  # refused by a stopping server: slot.replace(generation), then send again with slot.use()
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Generic, TypeVar

__all__ = ["AsyncClientSlot", "ClientSlot"]

_C = TypeVar("_C")
_FRESH = itertools.count(1)  # names the connections made after a replace(), unique in the process


class _SlotState(Generic[_C]):
    """The current protocol client, its generation, and how many calls use each client."""

    def __init__(self, make: Callable[[], _C]):
        self._make = make
        self._lock = threading.Lock()
        self._current: _C | None = None
        self.generation = 0
        self.fresh: int | None = None  # after a replace(): a number no other client of the process was made with
        self._users: dict[int, int] = {}  # id(client) -> calls in flight
        self._retired: dict[int, _C] = {}  # replaced clients waiting for their calls to end
        self.closed = False

    def enter(self) -> tuple[_C, int]:
        with self._lock:
            if self._current is None:
                self._current = self._make()
            client = self._current
            self._users[id(client)] = self._users.get(id(client), 0) + 1
            return client, self.generation

    def leave(self, client: _C) -> _C | None:
        """The client to close now (replaced, and this was its last call), if any."""
        with self._lock:
            left = self._users[id(client)] - 1
            if left:
                self._users[id(client)] = left
                return None
            del self._users[id(client)]
            return self._retired.pop(id(client), None)

    def replace(self, generation: int) -> _C | None:
        """Drop the current client if it is still that of ``generation``; return it when it is idle."""
        with self._lock:
            if generation != self.generation or self._current is None:
                return None  # another call replaced it already
            old, self._current = self._current, None
            self.generation += 1
            self.fresh = next(_FRESH)
            if id(old) in self._users:
                self._retired[id(old)] = old
                return None
            return old

    def take_all(self) -> list[_C]:
        with self._lock:
            self.closed = True
            clients = [*self._retired.values(), *([self._current] if self._current is not None else [])]
            self._current, self._retired = None, {}
            return clients


class _Slot(Generic[_C]):
    """What both slots tell of their client's replacements."""

    _state: _SlotState[_C]

    @property
    def generation(self) -> int:
        """How many times the client was replaced."""
        return self._state.generation

    @property
    def fresh(self) -> int | None:
        """None until the first :meth:`replace`; then a number, new at each, to make the clients with so that
        they share no connection with those made before (see ``tritonrt.client._grpc.channel_args``)."""
        return self._state.fresh


class ClientSlot(_Slot[_C]):
    """The protocol client (a gRPC channel's client) a blocking transport sends with, made on first use.

    :meth:`replace` makes the next call use a new one; the old one is closed once its calls in flight ended
    (closing a gRPC channel would cut them).
    """

    def __init__(self, make: Callable[[], _C], close: Callable[[_C], None]):
        self._state: _SlotState[_C] = _SlotState(make)
        self._close = close

    @contextlib.contextmanager
    def use(self) -> Iterator[tuple[_C, int]]:
        """The current client and its generation, for one call."""
        client, generation = self._state.enter()
        try:
            yield client, generation
        finally:
            idle = self._state.leave(client)
            if idle is not None:
                self._close(idle)

    def replace(self, generation: int) -> None:
        """Use a new client from now on, unless another call already replaced that of ``generation``."""
        idle = self._state.replace(generation)
        if idle is not None:
            self._close(idle)

    def close(self) -> None:
        """Close the clients (calls in flight on them are cut)."""
        for client in self._state.take_all():
            self._close(client)


class AsyncClientSlot(_Slot[_C]):
    """:class:`ClientSlot` for asyncio transports: the client is closed with an awaitable."""

    def __init__(self, make: Callable[[], _C], close: Callable[[_C], Awaitable[None]]):
        self._state: _SlotState[_C] = _SlotState(make)
        self._close = close

    @property
    def current(self) -> _C:
        """The current client, made if none (for calls that do not count as in flight: streams count)."""
        client, _ = self._state.enter()
        self._state.leave(client)
        return client

    @contextlib.asynccontextmanager
    async def use(self) -> AsyncIterator[tuple[_C, int]]:
        """The current client and its generation, for one call."""
        client, generation = self._state.enter()
        try:
            yield client, generation
        finally:
            idle = self._state.leave(client)
            if idle is not None:
                await self._close(idle)

    async def replace(self, generation: int) -> None:
        """Use a new client from now on, unless another call already replaced that of ``generation``."""
        idle = self._state.replace(generation)
        if idle is not None:
            await self._close(idle)

    async def close(self) -> None:
        """Close the clients."""
        for client in self._state.take_all():
            await self._close(client)
