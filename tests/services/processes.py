"""What every test server needs: a free loopback port, and a way to stop the process it started."""

import socket
import subprocess

STOP_TIMEOUT_S = 5.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop(process: "subprocess.Popen[bytes]", timeout_s: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM, then SIGKILL if it has not exited in time."""
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
