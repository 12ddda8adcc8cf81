"""The discrete-event loop of bench/fleet.py: arrivals, slots taken (first tokens), completions, instances
becoming ready (after their pull and load) and keep-alive expiry, over simulated nodes and one placement policy."""

import gc
import heapq
import itertools
import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from bench.fleet_node import Events, SimInstance, SimNode
from bench.fleet_workload import COLD_FIRST_TOKEN_S, KEEP_ALIVE_S, Workload

READY, DONE, EXPIRE = 0, 1, 2
MAX_EVENTS_PER_REQUEST = 20  # a bound on the loop; each request makes about four events


class Policy(Protocol):
    name: str

    def bind(self, fleet: "Fleet") -> None: ...

    def choose(self, request: int, model: int) -> int: ...

    def finished(self, request: int, node: int) -> None: ...

    def changed(self, node: SimNode) -> None: ...


@dataclass(frozen=True)
class Result:
    policy: str
    requests: int  # measured: those arriving after the warm-up
    warm_rate: float
    cold_starts: int
    pulls: int
    p50_ttft_s: float
    p99_ttft_s: float
    memory_utilisation: float
    decision_us: np.ndarray  # the policy's own time per decision
    decision_rules: np.ndarray  # the rule of each decision (Cirrus), so costs can be split by it
    wall_s: float

    @property
    def cold_per_1k(self) -> float:
        return 1000 * self.cold_starts / self.requests

    @property
    def pulls_per_1k(self) -> float:
        return 1000 * self.pulls / self.requests


class Fleet:
    def __init__(
        self, workload: Workload, policy: Policy, warmup: float, keep_alive_s: float = KEEP_ALIVE_S
    ) -> None:
        self.workload = workload
        self.policy = policy
        self.now = 0.0
        self.keep_alive_s = keep_alive_s
        events = Events(self._serve, self._ready_at, self._expire_at)
        self.nodes = [SimNode(spec, workload.models, keep_alive_s, events) for spec in workload.nodes]
        count = len(workload.arrival_s)
        self.measured_from = int(count * warmup)
        self.warmup_s = (
            float(workload.arrival_s[self.measured_from]) if count > self.measured_from else np.inf
        )
        self.first_token = np.full(count, np.nan)
        self.warm = np.zeros(count, dtype=bool)
        self.cold_starts = self.pulls = 0
        self._events: list[tuple[float, int, int, SimNode, SimInstance, int, float]] = []
        self._sequence = itertools.count()
        self._dirty: dict[int, SimNode] = {}
        self._used = 0
        self._node_used = [0] * len(self.nodes)
        self._memory_integral = 0.0
        self.end_s = float(workload.arrival_s[-1]) if count else 0.0
        self._budget = sum(node.spec.budget_bytes for node in self.nodes)

    def run(self) -> Result:
        """Simulate every request to its end. The garbage collector is paused (the loop makes no reference
        cycles), so its sweeps over millions of event tuples neither slow the run nor land in decision times."""
        gc.collect()
        gc.disable()
        try:
            return self._run()
        finally:
            gc.enable()

    def _run(self) -> Result:
        started = time.perf_counter()
        for node in self.nodes:
            node.prewarm()
        self._used = sum(node.used_bytes for node in self.nodes)
        self._node_used = [node.used_bytes for node in self.nodes]
        self.policy.bind(self)
        arrival, model_of = self.workload.arrival_s, self.workload.model_of
        count, next_request = len(arrival), 0
        for _ in range(MAX_EVENTS_PER_REQUEST * count):
            next_arrival = arrival[next_request] if next_request < count else np.inf
            if self._events and self._events[0][0] <= next_arrival:
                self._handle(heapq.heappop(self._events))
            elif next_request < count:
                self._advance(float(next_arrival))
                model = int(model_of[next_request])
                node = self.nodes[self.policy.choose(next_request, model)]
                node.arrive(next_request, model, self.now)
                self._dirty[node.spec.index] = node
                next_request += 1
            else:
                break
            self._flush()
        else:
            raise RuntimeError("the simulation did not finish within its event bound")
        return self._result(time.perf_counter() - started)

    # -- events -----------------------------------------------------------------------------------------------

    def _handle(self, event: tuple[float, int, int, SimNode, SimInstance, int, float]) -> None:
        at, _, kind, node, instance, request, taken_at = event
        self._advance(at)
        if kind == DONE:
            node.release(instance, at - taken_at, at)
            self.policy.finished(request, node.spec.index)
        elif kind == READY:
            node.become_ready(instance, at)
        else:
            node.expire(instance, request, at)
        self._dirty[node.spec.index] = node

    def _push(
        self, at: float, kind: int, node: SimNode, instance: SimInstance, request: int, taken: float
    ) -> None:
        heapq.heappush(self._events, (at, next(self._sequence), kind, node, instance, request, taken))

    def _serve(self, node: SimNode, instance: SimInstance, request: int, now: float) -> None:
        """A request took a slot: its first token comes now (warm) or once its instance is ready."""
        if instance.ready:
            first = now + instance.model.warm_first_token_s
        else:
            first = instance.ready_at + COLD_FIRST_TOKEN_S
        self.first_token[request] = first
        self.warm[request] = instance.ready_at <= self.workload.arrival_s[request]
        self._push(first + float(self.workload.hold_s[request]), DONE, node, instance, request, now)

    def _ready_at(self, node: SimNode, instance: SimInstance) -> None:
        if self.now >= self.warmup_s:
            self.cold_starts += 1
            self.pulls += instance.pulled
        self._push(instance.ready_at, READY, node, instance, 0, 0.0)

    def _expire_at(self, node: SimNode, instance: SimInstance) -> None:
        self._push(instance.last_used + self.keep_alive_s, EXPIRE, node, instance, instance.releases, 0.0)

    # -- bookkeeping ------------------------------------------------------------------------------------------

    def _advance(self, at: float) -> None:
        """Move the clock, adding memory in use over the measured window (warm-up to the last arrival)."""
        start, end = max(self.now, self.warmup_s), min(at, self.end_s)
        if end > start:
            self._memory_integral += self._used * (end - start)
        self.now = at

    def _flush(self) -> None:
        for index, node in self._dirty.items():
            self.policy.changed(node)
            self._used += node.used_bytes - self._node_used[index]
            self._node_used[index] = node.used_bytes
        self._dirty.clear()

    def _result(self, wall_s: float) -> Result:
        measured = slice(self.measured_from, None)
        ttft = self.first_token[measured] - self.workload.arrival_s[measured]
        span = self.end_s - self.warmup_s
        decisions = getattr(self.policy, "decision_us", [])
        return Result(
            policy=self.policy.name,
            requests=len(ttft),
            warm_rate=float(self.warm[measured].mean()),
            cold_starts=self.cold_starts,
            pulls=self.pulls,
            p50_ttft_s=float(np.percentile(ttft, 50)),
            p99_ttft_s=float(np.percentile(ttft, 99)),
            memory_utilisation=self._memory_integral / (self._budget * span) if span > 0 else 0.0,
            decision_us=np.asarray(decisions, dtype=float),
            decision_rules=np.asarray(getattr(self.policy, "decision_rules", []), dtype=str),
            wall_s=wall_s,
        )
