"""The serverless pool: instances per model, cold start, keep-alive, memory budget, eviction, queues."""

from cirrus.pool.instance import Instance, InstanceStatus, Worker
from cirrus.pool.pool import Launcher, Lease, Pool

__all__ = ["Instance", "InstanceStatus", "Launcher", "Lease", "Pool", "Worker"]
