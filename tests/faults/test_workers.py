"""Workers that hang or run past their limit cost only what they touch: a real `cirrus serve`, a real worker
process, real signals. A stopped worker is replaced; a request past its time limit stops its worker's work."""

import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.conftest import SMOLLM
from tests.integration.server import Server, process_exists, running_server, wait_until

LIMIT_S = 2.0
CANCEL_GRACE_S = 1.0
HEARTBEAT_TIMEOUT_S = 2.0
# Generous on a slow, shared machine: starting a replacement, a client's own overhead.
MARGIN_S = 8.0
COUNTING = {"prompt": "1, 2, 3, 4, 5, 6, 7, 8, 9, 10,", "raw": True, "temperature": 0, "max_tokens": 1000}
SHORT = {"prompt": "Hi", "max_tokens": 4}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with running_server(
        tmp_path,
        request_timeout_s=str(LIMIT_S),
        worker_cancel_grace_s=str(CANCEL_GRACE_S),
        worker_heartbeat_timeout_s=str(HEARTBEAT_TIMEOUT_S),
    ) as running:
        assert httpx.post(f"{running.url}/admin/models/{SMOLLM}/load", timeout=60).status_code == 200
        yield running


def run(server: Server, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{server.url}/ai/run/{SMOLLM}", json=body, timeout=60)


def instances(server: Server) -> list[dict[str, Any]]:
    return [i for i in server.instances() if i["model"] == SMOLLM]


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process, from /proc/PID/stat (fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def release(pid: int) -> None:
    """Leave nothing behind: a stopped process the server has not killed is woken and killed."""
    if process_exists(pid):
        os.kill(pid, signal.SIGCONT)
        os.kill(pid, signal.SIGKILL)


def test_a_stopped_worker_is_replaced_and_the_next_requests_are_served_by_a_new_instance(
    server: Server,
) -> None:
    [stopped] = [int(i["pid"]) for i in instances(server)]
    os.kill(stopped, signal.SIGSTOP)
    began = time.monotonic()
    try:
        assert wait_until(lambda: stopped_state(server, stopped) != "ready", 2 * HEARTBEAT_TIMEOUT_S), (
            "a worker that misses its heartbeat is no longer shown ready"
        )
        answers = []
        while time.monotonic() - began < LIMIT_S + CANCEL_GRACE_S + HEARTBEAT_TIMEOUT_S + MARGIN_S:
            response = run(server, SHORT)
            answers.append(response.status_code)
            if response.status_code == 200:
                break
            assert response.status_code == 408, response.text
            assert response.json()["errors"][0]["code"] == 3007
        assert answers[-1] == 200, answers
        assert any(int(i["pid"]) != stopped for i in instances(server)), "a new instance answered"
        assert wait_until(lambda: stopped_state(server, stopped) is None, HEARTBEAT_TIMEOUT_S + MARGIN_S)
        assert wait_until(lambda: not process_exists(stopped), 10), "the stopped process was killed"
        assert run(server, SHORT).status_code == 200
    finally:
        release(stopped)


def stopped_state(server: Server, pid: int) -> str | None:
    """The state shown for the instance of that worker; None once it is gone."""
    return next((str(i["state"]) for i in instances(server) if i["pid"] == pid), None)


def test_a_request_past_its_limit_gets_408_and_its_worker_stops_at_once(server: Server) -> None:
    [pid] = [int(i["pid"]) for i in instances(server)]
    response = run(server, COUNTING)
    answered = time.monotonic()
    assert response.status_code == 408 and response.json()["errors"][0]["code"] == 3007
    assert wait_until(lambda: instances(server)[0]["active_requests"] == 0, 1.5)
    time.sleep(max(0.0, answered + 1.0 - time.monotonic()))
    before = cpu_seconds(pid)
    time.sleep(1.0)
    used = cpu_seconds(pid) - before
    assert used < 0.1, f"the worker used {used:.2f}s of CPU in the second after it should have stopped"
    assert [int(i["pid"]) for i in instances(server)] == [pid], "the same worker serves on"


def test_eight_requests_past_their_limit_do_not_starve_a_ninth(server: Server) -> None:
    statuses: list[int] = []

    def call() -> None:
        statuses.append(run(server, COUNTING).status_code)

    threads = [threading.Thread(target=call) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert statuses == [408] * 8
    ninth = run(server, SHORT)
    assert ninth.status_code == 200, ninth.text
    assert ninth.json()["success"]
