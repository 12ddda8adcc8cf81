"""Cirrus on a real Ray cluster: a head and Cirrus nodes, each its own `ray start` with its own state and model
cache, and a gateway (`cirrus serve --cluster`) in front. Placement by warmth and cache, pulls, joins, a node
dying mid-stream, an agent crashing, a second gateway."""

import json
import os
import signal
import threading
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.cluster.conftest import (
    FRESH,
    ON_B,
    ON_C,
    SMOLLM,
    ClusterUnderTest,
    alive_nodes,
    chat,
    usage_of,
    usage_rows,
)
from tests.integration.server import process_exists, running_server, wait_until

pytestmark = pytest.mark.integration
NODE = "x-cirrus-node"


def instances(cluster: ClusterUnderTest, model: str) -> list[dict[str, Any]]:
    body = httpx.get(f"{cluster.gateway.url}/admin/instances", timeout=10).json()
    return [i for i in body["result"]["instances"] if i["model"] == model and i["state"] != "stopping"]


def placements(cluster: ClusterUnderTest, model: str) -> dict[tuple[str, str], float]:
    """(rule, node) -> requests the gateway placed so, from its /metrics."""
    text = httpx.get(f"{cluster.gateway.url}/metrics", timeout=10).text
    return {
        (sample.labels["rule"], sample.labels["node"]): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "cirrus_placements_total" and sample.labels["model"] == model
    }


def served_by(response: httpx.Response) -> str:
    assert response.status_code == 200, response.text
    return response.headers[NODE]


def test_admin_nodes_lists_every_node_with_its_budget_and_cache(cluster: ClusterUnderTest) -> None:
    nodes = alive_nodes(cluster.gateway)
    assert set(nodes) == {cluster.node_id("a"), cluster.node_id("b")}
    b = nodes[cluster.node_id("b")]
    assert b["memory_budget_bytes"] > 0 and b["agent_pid"] > 0
    assert ON_B in b["cached_models"] and ON_B not in nodes[cluster.node_id("a")]["cached_models"]


def test_the_second_request_lands_where_the_model_is_warm(cluster: ClusterUnderTest) -> None:
    first = served_by(chat(cluster.gateway.url, SMOLLM))
    second = served_by(chat(cluster.gateway.url, SMOLLM))
    assert second == first
    assert [i["node"] for i in instances(cluster, SMOLLM)] == [first]


def test_a_token_count_runs_on_a_node_and_matches_what_a_generation_reads(cluster: ClusterUnderTest) -> None:
    body = {"model": SMOLLM, "messages": [{"role": "user", "content": "Count these words, please."}]}
    counted = httpx.post(f"{cluster.gateway.url}/v1/messages/count_tokens", json=body, timeout=120)
    assert counted.status_code == 200, counted.text
    created = httpx.post(f"{cluster.gateway.url}/v1/messages", json={**body, "max_tokens": 2}, timeout=120)
    assert created.status_code == 200, created.text
    usage = created.json()["usage"]
    assert counted.json()["input_tokens"] == usage["input_tokens"] + usage["cache_read_input_tokens"]


def test_a_model_cached_only_on_node_b_cold_starts_on_node_b(cluster: ClusterUnderTest) -> None:
    assert served_by(chat(cluster.gateway.url, ON_B)) == cluster.node_id("b")


def test_a_model_cached_nowhere_is_pulled_onto_one_node_which_is_preferred_next(
    cluster: ClusterUnderTest,
) -> None:
    digest_gets = len(cluster.registry.access_log())
    puller = served_by(chat(cluster.gateway.url, FRESH))
    assert len(cluster.registry.access_log()) > digest_gets  # it came from the registry
    assert wait_until(lambda: FRESH in alive_nodes(cluster.gateway)[puller]["cached_models"], 10)
    unloaded = httpx.post(f"{cluster.gateway.url}/admin/models/{FRESH}/unload", timeout=30)
    assert unloaded.status_code == 200 and unloaded.json()["result"]["stopped"] == 1
    assert wait_until(lambda: not instances(cluster, FRESH), 10)
    assert served_by(chat(cluster.gateway.url, FRESH)) == puller
    placed = placements(cluster, FRESH)
    assert placed[("pull", puller)] == 1 and placed[("cached", puller)] == 1, placed


def test_a_node_that_joins_gets_an_agent_and_takes_placements(cluster: ClusterUnderTest) -> None:
    cluster.add_node("c", pulled=(ON_C,))
    node_c = cluster.node_id("c")
    assert wait_until(lambda: node_c in alive_nodes(cluster.gateway), 15), cluster.gateway.log()[-2000:]
    assert served_by(chat(cluster.gateway.url, ON_C)) == node_c


def test_a_crashed_agent_is_restarted_and_its_workers_do_not_leak(cluster: ClusterUnderTest) -> None:
    node_a = cluster.node_id("a")
    assert served_by(chat(cluster.gateway.url, SMOLLM)) == node_a or instances(cluster, SMOLLM)
    before = alive_nodes(cluster.gateway)[node_a]
    workers = [i["pid"] for i in instances(cluster, SMOLLM) if i["node"] == node_a and i["pid"]]
    os.kill(before["agent_pid"], signal.SIGKILL)

    def restarted() -> bool:
        now = alive_nodes(cluster.gateway).get(node_a)
        return now is not None and now["agent_pid"] not in (0, before["agent_pid"])

    assert wait_until(restarted, 30), cluster.gateway.log()[-3000:]
    assert wait_until(lambda: not any(process_exists(pid) for pid in workers), 10)
    assert chat(cluster.gateway.url, SMOLLM).status_code == 200


def test_a_client_that_leaves_mid_stream_stops_the_generation_on_its_node(cluster: ClusterUnderTest) -> None:
    """The cancel crosses the cluster: the node's slot is free again at once, and the request is metered as 499
    with the tokens the node's worker really generated."""
    url = f"{cluster.gateway.url}/v1/chat/completions"
    with httpx.stream("POST", url, json=long_stream(SMOLLM), timeout=120) as response:
        request_id = response.headers["x-request-id"]
        node = response.headers[NODE]
        lines = response.iter_lines()
        assert sum(1 for line, _ in zip(lines, range(20), strict=False) if line.startswith("data: ")) > 0

    def settled() -> bool:
        return sum(int(i["active_requests"]) for i in instances(cluster, SMOLLM) if i["node"] == node) == 0

    assert wait_until(settled, 10)
    assert wait_until(lambda: usage_rows(cluster.gateway_state, request_id) == 1, 10)
    status, completion = usage_of(cluster.gateway_state, request_id)
    assert status == 499 and 0 < completion < 1500


def long_stream(model: str) -> dict[str, Any]:
    """A streamed chat request that runs for seconds: long enough to leave it, or to kill its node, midway."""
    return {
        "model": model,
        "messages": [{"role": "user", "content": "Count from 1 to 1000."}],
        "max_tokens": 1500,
        "temperature": 0,
        "stream": True,
    }


def read_stream(url: str, model: str, started: threading.Event, events: list[dict[str, Any]]) -> None:
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=long_stream(model), timeout=120) as response:
        events.append({"node": response.headers.get(NODE), "request_id": response.headers["x-request-id"]})
        for line in response.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append(json.loads(line.removeprefix("data: ")))
                started.set()


def test_a_node_that_dies_mid_stream_ends_that_stream_and_the_rest_fail_over(
    cluster: ClusterUnderTest,
) -> None:
    """Node b dies (its raylet killed) while it streams: that stream ends with an error, never a hang; the
    requests sent afterwards are answered by the other nodes; each request is metered exactly once."""
    assert served_by(chat(cluster.gateway.url, ON_B)) == cluster.node_id("b")  # warm on b
    started, events = threading.Event(), list[dict[str, Any]]()
    reader = threading.Thread(target=read_stream, args=(cluster.gateway.url, ON_B, started, events))
    reader.start()
    assert started.wait(60)
    assert events[0]["node"] == cluster.node_id("b")
    cluster.node("b").kill()
    reader.join(60)
    assert not reader.is_alive(), "the stream hung after its node died"
    assert "error" in events[-1], events[-1]
    assert events[-1]["error"]["code"] == "worker_crashed"

    # b's models come up elsewhere on demand; b is never chosen again
    after = [chat(cluster.gateway.url, model) for model in (ON_B, SMOLLM, ON_B)]
    assert [r.status_code for r in after] == [200, 200, 200], after[0].text
    assert cluster.node_id("b") not in {r.headers[NODE] for r in after}
    assert cluster.node_id("b") not in alive_nodes(cluster.gateway)
    ids = [events[0]["request_id"], *(r.headers["x-request-id"] for r in after)]
    assert wait_until(lambda: all(usage_rows(cluster.gateway_state, i) == 1 for i in ids), 10)


def test_two_gateways_on_one_cluster_one_killed_the_other_keeps_serving(cluster: ClusterUnderTest) -> None:
    second_dir = cluster.tmp / "second-gateway"
    second_dir.mkdir()
    with running_server(
        second_dir, "--cluster", cluster.ray.address, "--catalog", str(cluster.catalog)
    ) as second:
        assert wait_until(lambda: len(alive_nodes(second)) >= 2, 30), second.log()[-3000:]
        assert chat(second.url, SMOLLM).status_code == 200
        second.process.send_signal(signal.SIGKILL)
        second.process.wait(10)
    answered = [chat(cluster.gateway.url, SMOLLM) for _ in range(2)]
    assert [r.status_code for r in answered] == [200, 200]
    assert len(alive_nodes(cluster.gateway)) >= 2  # the agents outlive the gateway that was killed
