"""The test Ray cluster itself: separate nodes with their own resources and environment, nodes that stop,
die and join while a driver is connected, and no process left behind afterwards."""

import logging
import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from tests.services.ray_cluster import NODE_IP, RayCluster, RayNode, running_ray_cluster, session_processes

pytestmark = pytest.mark.integration

DEATH_TIMEOUT_S = 30.0


@ray.remote(num_cpus=0)
class NodeProbe:
    """Tells which node it runs on and what state directory that node's environment gives it."""

    def where(self) -> tuple[str, str | None]:
        return ray.get_runtime_context().get_node_id(), os.environ.get("CIRRUS_STATE_DIR")


@contextmanager
def driver(cluster: RayCluster) -> Iterator[None]:
    ray.init(address=cluster.address, logging_level=logging.WARNING, _node_ip_address=NODE_IP)
    try:
        yield
    finally:
        ray.shutdown()


def probe(node: RayNode) -> tuple[str, str | None]:
    node_id = node.node_id()
    assert node_id is not None
    strategy = NodeAffinitySchedulingStrategy(node_id, soft=False)
    actor = NodeProbe.options(scheduling_strategy=strategy).remote()  # type: ignore[attr-defined]
    where: tuple[str, str | None] = ray.get(actor.where.remote(), timeout=60)
    ray.kill(actor)
    return where


def leftover_processes(cluster: RayCluster) -> list[str]:
    """`ps` lines of live processes in a session of the cluster's nodes or naming its temp dir."""
    sessions = {str(session) for session in cluster.sessions()}
    ps = subprocess.run(["ps", "-eo", "pid=,sid=,stat=,args="], capture_output=True, text=True, check=True)
    lines = [line.split(None, 3) for line in ps.stdout.splitlines()]
    return [
        " ".join(fields)
        for fields in lines
        if len(fields) == 4 and not fields[2].startswith("Z")
        and (fields[1] in sessions or str(cluster.root) in fields[3])
    ]  # fmt: skip


def test_nodes_keep_their_own_environment_and_come_and_go() -> None:
    with running_ray_cluster(("a", "b")) as cluster:
        head, a, b = (cluster.nodes[name] for name in ("head", "a", "b"))
        ids = {node.node_id() for node in (head, a, b)}
        assert None not in ids and len(ids) == 3
        assert cluster.alive_node_ids() == ids
        assert leftover_processes(cluster)  # the check below sees the cluster's processes while they run

        with driver(cluster):
            assert probe(b) == (b.node_id(), b.env["CIRRUS_STATE_DIR"])
            assert b.env["CIRRUS_STATE_DIR"] != a.env["CIRRUS_STATE_DIR"]

            b.stop()
            cluster.wait_dead(b, DEATH_TIMEOUT_S)
            assert cluster.alive_node_ids() == ids - {b.node_id()}
            assert session_processes(b.process.pid) == []

            c = cluster.add_cirrus_node("c")
            assert c.node_id() not in ids
            assert probe(c) == (c.node_id(), c.env["CIRRUS_STATE_DIR"])

            a.kill()
            cluster.wait_dead(a, DEATH_TIMEOUT_S)
            assert session_processes(a.process.pid) == []
            assert cluster.alive_node_ids() == {head.node_id(), c.node_id()}
            assert probe(c)[0] == c.node_id()  # the cluster still serves after a node died uncleanly

    assert leftover_processes(cluster) == []
    assert not cluster.root.exists()
