"""One simulated node running the pool's rules (src/cirrus/pool/pool.py), and the snapshot it reports.

A request takes a free slot on a ready instance of its model (the least busy); else, if the model may have another
instance here (fewer than max_instances, none starting) and its memory fits after stopping idle instances least
recently used first, an instance cold-starts for it (pulling the artifact first if it is not on disk); else it
waits in the model's queue. Whenever a slot frees, an instance becomes ready or memory is released, the queues
are served again in order. An idle instance stops when its keep-alive runs out. Stopping is instant here.

One difference from pool.py as it stands: here the requests queued behind a starting instance take its free
slots the moment it is ready; pool.py wakes them only at the next release or watchdog tick (about 1 s).
"""

from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from bench.fleet_workload import DISK_BYTES, PROCESS_START_S, Model, NodeSpec
from cirrus.placement import InstanceView, NodeMeasures, NodeView


@dataclass(eq=False)
class SimInstance:
    model: Model
    started_at: float
    ready_at: float
    pulled: bool = False
    ready: bool = False
    stopped: bool = False
    busy: int = 0
    last_used: float = 0.0
    releases: int = 0  # bumped at each release, so a stale keep-alive check is recognised
    view: InstanceView | None = field(default=None, repr=False)  # the last reported view, while unchanged


class Events:
    """What a node asks the simulation for (implemented by bench/fleet_sim.py)."""

    def __init__(
        self,
        serve: Callable[["SimNode", SimInstance, int, float], None],
        ready_at: Callable[["SimNode", SimInstance], None],
        expire_at: Callable[["SimNode", SimInstance], None],
    ) -> None:
        self.serve = serve  # (node, instance, request, when its slot was taken)
        self.ready_at = ready_at
        self.expire_at = expire_at


class SimNode:
    def __init__(self, spec: NodeSpec, models: list[Model], keep_alive_s: float, events: Events) -> None:
        self.spec = spec
        self.models = models
        self.keep_alive_s = keep_alive_s
        self.events = events
        self.instances: dict[int, list[SimInstance]] = {}
        self.used_bytes = 0
        self.idle_bytes = 0  # held by ready instances with no request: what eviction could free
        self.busy_slots = 0
        self.queued = 0  # requests waiting in any model's queue
        self.waiting: dict[int, deque[int]] = {}
        self.disk: OrderedDict[int, int] = OrderedDict((i, models[i].artifact_bytes) for i in spec.disk)
        self.disk_bytes = sum(self.disk.values())
        self.cold_starts = 0
        self.pulls = 0
        self._measured_cold: dict[str, float] = {}
        self._measured_service: dict[str, float] = {}  # a moving average per model
        self._reported_service: dict[str, float] = {}  # the same to two significant digits, as reported
        self._cached_view: frozenset[str] | None = None
        self._measures: NodeMeasures | None = None
        self._max_instances: Mapping[str, int] = {model.id: model.max_instances for model in models}

    def prewarm(self) -> None:
        """The instances the node holds when the run starts: ready, idle, their keep-alive running from 0."""
        for model in self.spec.warm:
            instance = SimInstance(self.models[model], started_at=0.0, ready_at=0.0, ready=True)
            self.instances.setdefault(model, []).append(instance)
            self.used_bytes += instance.model.memory_bytes
            self.idle_bytes += instance.model.memory_bytes
            self.events.expire_at(self, instance)

    # -- the pool's rules -------------------------------------------------------------------------------------

    def arrive(self, request: int, model: int, now: float) -> None:
        # The pool would refuse it (ModelTooLarge): a policy that sends it here has a bug.
        if self.models[model].memory_bytes > self.spec.budget_bytes:
            raise ValueError(f"{self.models[model].id} can never fit {self.spec.id}")
        if not self._admit(request, model, now):
            self.waiting.setdefault(model, deque()).append(request)
            self.queued += 1

    def release(self, instance: SimInstance, served_s: float, now: float) -> None:
        instance.busy -= 1
        if instance.busy == 0:
            self.idle_bytes += instance.model.memory_bytes
        self.busy_slots -= 1
        instance.last_used = now
        instance.releases += 1
        instance.view = None
        model_id = instance.model.id
        previous = self._measured_service.get(model_id)
        average = served_s if previous is None else 0.9 * previous + 0.1 * served_s
        self._measured_service[model_id] = average
        rounded = float(f"{average:.2g}")
        if self._reported_service.get(model_id) != rounded:
            self._reported_service[model_id] = rounded
            self._measures = None
        self.pump(now)
        if instance.busy == 0 and not instance.stopped:
            self.events.expire_at(self, instance)

    def become_ready(self, instance: SimInstance, now: float) -> None:
        instance.ready = True
        if instance.busy == 0:
            self.idle_bytes += instance.model.memory_bytes
        instance.view = None
        self.pump(now)

    def expire(self, instance: SimInstance, releases: int, now: float) -> None:
        if instance.ready and not instance.stopped and instance.busy == 0 and instance.releases == releases:
            self._stop(instance)
            self.pump(now)

    def pump(self, now: float) -> None:
        """Serve the queues again, oldest model queue first, as far as slots and memory allow."""
        for model in list(self.waiting):
            queue = self.waiting[model]
            while queue and self._admit(queue[0], model, now):
                queue.popleft()
                self.queued -= 1
            if not queue:
                del self.waiting[model]

    def _admit(self, request: int, model: int, now: float) -> bool:
        instance = self._with_room(model)
        if instance is None:
            if not self._may_add(model):
                return False
            victims = self._victims_for(self.models[model].memory_bytes)
            if victims is None:
                return False
            for victim in victims:
                self._stop(victim)
            instance = self._cold_start(model, now)
        elif instance.busy == 0:
            self.idle_bytes -= instance.model.memory_bytes
        instance.busy += 1
        self.busy_slots += 1
        instance.view = None
        self.events.serve(self, instance, request, now)
        return True

    def _with_room(self, model: int) -> SimInstance | None:
        best = None
        for instance in self.instances.get(model, ()):
            if (
                instance.ready
                and instance.busy < instance.model.slots
                and (best is None or instance.busy < best.busy)
            ):
                best = instance
        return best

    def _may_add(self, model: int) -> bool:
        mine = self.instances.get(model, ())
        return len(mine) < self.models[model].max_instances and all(instance.ready for instance in mine)

    def _victims_for(self, needed: int) -> list[SimInstance] | None:
        shortfall = self.used_bytes + needed - self.spec.budget_bytes
        if shortfall <= 0:
            return []
        if shortfall > self.idle_bytes:
            return None
        idle = sorted(
            (i for group in self.instances.values() for i in group if i.ready and i.busy == 0),
            key=lambda i: i.last_used,
        )
        victims = []
        for instance in idle:
            victims.append(instance)
            shortfall -= instance.model.memory_bytes
            if shortfall <= 0:
                return victims
        return None

    def _cold_start(self, model: int, now: float) -> SimInstance:
        spec = self.models[model]
        pull_s = 0.0
        if model not in self.disk:
            pull_s = spec.artifact_bytes / self.spec.pull_bytes_per_s
            self._store(model)
            self.pulls += 1
        else:
            self.disk.move_to_end(model)
        load_s = PROCESS_START_S + spec.artifact_bytes / self.spec.load_bytes_per_s
        ready_at = now + pull_s + load_s
        instance = SimInstance(spec, started_at=now, ready_at=ready_at, pulled=pull_s > 0, last_used=now)
        self.instances.setdefault(model, []).append(instance)
        self.used_bytes += spec.memory_bytes
        self.cold_starts += 1
        self._measured_cold[spec.id] = load_s
        self._measures = None
        self.events.ready_at(self, instance)
        return instance

    def _stop(self, instance: SimInstance) -> None:
        instance.stopped = True
        if instance.ready and instance.busy == 0:
            self.idle_bytes -= instance.model.memory_bytes
        group = self.instances[instance.model.index]
        group.remove(instance)
        if not group:
            del self.instances[instance.model.index]
        self.used_bytes -= instance.model.memory_bytes

    def _store(self, model: int) -> None:
        """Keep the artifact, dropping least recently used ones no instance needs while the disk is over."""
        self.disk[model] = self.models[model].artifact_bytes
        self.disk_bytes += self.models[model].artifact_bytes
        for old in list(self.disk):
            if self.disk_bytes <= DISK_BYTES:
                break
            if old != model and old not in self.instances:
                self.disk_bytes -= self.disk.pop(old)
        self._cached_view = None

    # -- what it reports --------------------------------------------------------------------------------------

    def holds(self, model: int) -> bool:
        return model in self.instances

    def view(self) -> NodeView:
        return NodeView(
            node_id=self.spec.id,
            alive=True,
            budget_bytes=self.spec.budget_bytes,
            instances=tuple(self._instance_view(i) for group in self.instances.values() for i in group),
            cached=self._cached(),
            queued={self.models[m].id: len(queue) for m, queue in self.waiting.items()},
            measures=self._measures_view(),
            max_instances=self._max_instances,
        )

    def _instance_view(self, instance: SimInstance) -> InstanceView:
        if instance.view is None:
            idle = instance.ready and instance.busy == 0
            instance.view = InstanceView(
                model=instance.model.id,
                state="ready" if instance.ready else "starting",
                slots=instance.model.slots,
                busy=instance.busy,
                memory_bytes=instance.model.memory_bytes,
                idle_since=instance.last_used if idle else None,
                started_at=instance.started_at,
            )
        return instance.view

    def _cached(self) -> frozenset[str]:
        if self._cached_view is None:
            self._cached_view = frozenset(self.models[m].id for m in self.disk)
        return self._cached_view

    def _measures_view(self) -> NodeMeasures:
        if self._measures is None:
            measured_load = bool(self._measured_cold)
            self._measures = NodeMeasures(
                load_bytes_per_s=self.spec.load_bytes_per_s if measured_load else None,
                pull_bytes_per_s=self.spec.pull_bytes_per_s if self.pulls else None,
                process_start_s=PROCESS_START_S if measured_load else None,
                cold_start_s=dict(self._measured_cold),
                service_s=dict(self._reported_service),
            )
        return self._measures
