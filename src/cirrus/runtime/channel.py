"""The worker's end of the transport: plain blocking socket calls, no asyncio (it costs a worker 25 ms to import)."""

import socket
import threading

from cirrus.runtime.frames import HEADER, Frame, decode, encode, frame_length


class TransportClosed(ConnectionError):
    pass


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
