"""The one small interface between the server and a worker: send a frame, receive a frame, close.

A local worker speaks it over one end of a Unix socket pair; a remote worker (a Ray actor, later) need only
implement the same three calls.
"""

import asyncio
import contextlib
import socket
from typing import Protocol

from cirrus.runtime.channel import TransportClosed
from cirrus.runtime.frames import HEADER, Frame, decode, encode, frame_length


class Transport(Protocol):
    async def send(self, frame: Frame) -> None: ...

    async def recv(self) -> Frame: ...

    async def close(self) -> None: ...


class SocketTransport:
    """The server's end: asyncio streams over a connected Unix socket."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    @classmethod
    async def over(cls, sock: socket.socket) -> "SocketTransport":
        reader, writer = await asyncio.open_unix_connection(sock=sock)
        return cls(reader, writer)

    async def send(self, frame: Frame) -> None:
        if self._writer.is_closing():
            raise TransportClosed("worker connection is closed")
        self._writer.write(encode(frame))
        try:
            await self._writer.drain()
        except (ConnectionError, OSError) as exc:
            raise TransportClosed(str(exc)) from exc

    async def recv(self) -> Frame:
        try:
            header = await self._reader.readexactly(HEADER.size)
            body = await self._reader.readexactly(frame_length(header))
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
            raise TransportClosed("worker connection closed") from exc
        return decode(body)

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self._writer.wait_closed()
