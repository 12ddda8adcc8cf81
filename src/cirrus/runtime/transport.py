"""The one small interface between the server and a worker: send a frame, receive a frame, close.

A local worker speaks it over one end of a Unix socket pair; a remote worker (a Ray actor, later) need only
implement the same three calls.
"""

import asyncio
import contextlib
import socket
import threading
from typing import Protocol

from cirrus.runtime.frames import HEADER, Frame, decode, encode, frame_length


class TransportClosed(ConnectionError):
    pass


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


class BlockingChannel:
    """The worker's end: plain blocking socket calls; send is safe from several threads."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._send_lock = threading.Lock()

    def send(self, frame: Frame) -> None:
        data = encode(frame)
        with self._send_lock:
            self._sock.sendall(data)

    def recv(self) -> Frame:
        header = self._recv_exactly(HEADER.size)
        return decode(self._recv_exactly(frame_length(header)))

    def _recv_exactly(self, size: int) -> bytes:
        chunks: list[bytes] = []
        remaining = size
        while remaining:
            chunk = self._sock.recv(remaining)
            if not chunk:
                raise TransportClosed("server connection closed")
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks)
