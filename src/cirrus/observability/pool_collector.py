"""Gauges read from the pool when Prometheus scrapes, so nothing polls in the background."""

import logging
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

from prometheus_client.core import GaugeMetricFamily, Metric

from cirrus.pool.instance import InstanceStatus

log = logging.getLogger(__name__)


class PoolLike(Protocol):
    """What the collector reads of `cirrus.pool.Pool`."""

    @property
    def budget_bytes(self) -> int: ...

    def statuses(self) -> list[InstanceStatus]: ...

    def used_bytes(self) -> int: ...

    def waiting(self, model_id: str) -> int: ...


def _no_models() -> Iterable[str]:
    return ()


def _no_spares() -> int:
    return 0


@dataclass(frozen=True)
class PoolSource:
    """Where the pool gauges come from. model_ids names the models whose queues to report (the catalog's);
    models with instances are always reported."""

    pool: PoolLike
    spares_ready: Callable[[], int] = _no_spares
    model_ids: Callable[[], Iterable[str]] = _no_models


class PoolCollector:
    def __init__(self, source: PoolSource) -> None:
        self._source = source

    def collect(self) -> Iterator[Metric]:
        try:
            families = self._families()
        except Exception:  # a broken reading must not take the request metrics down with it
            log.exception("could not read the pool for metrics")
            return iter(())
        return iter(families)

    def _families(self) -> list[Metric]:
        pool = self._source.pool
        statuses = pool.statuses()
        models = sorted({s.model for s in statuses} | set(self._source.model_ids()))
        return [
            _instances(statuses),
            _instance_memory(statuses),
            _active_requests(statuses),
            _gauge(
                "cirrus_memory_budget_bytes", "Memory the pool may use for model instances", pool.budget_bytes
            ),
            _gauge("cirrus_memory_used_bytes", "Estimated memory of the instances loaded", pool.used_bytes()),
            _queue_depth(pool, models),
            _gauge(
                "cirrus_spare_workers_ready",
                "Worker processes started ahead of need",
                self._source.spares_ready(),
            ),
        ]


def _gauge(name: str, documentation: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, value=value)


def _instances(statuses: list[InstanceStatus]) -> GaugeMetricFamily:
    family = GaugeMetricFamily("cirrus_instances", "Model instances by state", labels=["model", "state"])
    for (model, state), count in sorted(Counter((s.model, s.state) for s in statuses).items()):
        family.add_metric([model, state], count)
    return family


def _instance_memory(statuses: list[InstanceStatus]) -> GaugeMetricFamily:
    family = GaugeMetricFamily(
        "cirrus_instance_memory_bytes",
        "Memory of a model's instances: the pool's estimate, and the workers' resident set where known",
        labels=["model", "kind"],
    )
    estimated: dict[str, int] = defaultdict(int)
    rss: dict[str, int] = defaultdict(int)
    for status in statuses:
        estimated[status.model] += status.memory_bytes
        if status.rss_bytes is not None:
            rss[status.model] += status.rss_bytes
    for model in sorted(estimated):
        family.add_metric([model, "estimated"], estimated[model])
    for model in sorted(rss):
        family.add_metric([model, "rss"], rss[model])
    return family


def _active_requests(statuses: list[InstanceStatus]) -> GaugeMetricFamily:
    family = GaugeMetricFamily("cirrus_active_requests", "Requests being generated", labels=["model"])
    active: dict[str, int] = defaultdict(int)
    for status in statuses:
        active[status.model] += status.active_requests
    for model in sorted(active):
        family.add_metric([model], active[model])
    return family


def _queue_depth(pool: PoolLike, models: list[str]) -> GaugeMetricFamily:
    family = GaugeMetricFamily("cirrus_queue_depth", "Requests waiting for an instance", labels=["model"])
    for model in models:
        family.add_metric([model], pool.waiting(model))
    return family
