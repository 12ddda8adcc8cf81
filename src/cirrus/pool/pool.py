"""The serverless scheduler.

Requests acquire a lease on an instance of their model. An instance with room is reused (the one that may hold
the request's prompt prefix in its KV cache, else the least loaded); otherwise, if the model may have another
instance and its memory fits the budget (after stopping idle instances, least recently used first), one is
cold-started; otherwise the request waits in the model's bounded queue until something changes or its deadline
passes. Background work (batch items) takes only what no interactive request wants, and is preempted when one
has to wait (`pool.background`). Idle instances are stopped when their keep-alive runs out, except pinned ones. A watchdog
kills workers that stop answering or stop making progress; their instances leave the pool like any whose worker
exited, and the next request cold-starts a new one.
"""

import asyncio
import contextlib
import contextvars
import logging
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from cirrus.catalog import ModelSpec
from cirrus.errors import CapacityExceeded, ModelTooLarge, RequestTimeout
from cirrus.pool.affinity import AffinityTable
from cirrus.pool.background import BackgroundLeases, share
from cirrus.pool.cores import cores_each
from cirrus.pool.instance import Instance, InstanceState, InstanceStatus, Worker
from cirrus.pool.prefix_routes import PrefixRoutes
from cirrus.pool.prompt_keys import PromptChain

log = logging.getLogger(__name__)
MIB = 1024 * 1024


class Launcher(Protocol):
    async def estimate_bytes(self, spec: ModelSpec) -> int: ...

    async def launch(self, spec: ModelSpec) -> Worker: ...


@dataclass(eq=False)
class Lease:
    """The right to send one request to one instance. Release it exactly once."""

    instance: Instance
    cold_start: bool
    queue_s: float
    _pool: "Pool"

    @property
    def worker(self) -> Worker:
        assert self.instance.worker is not None
        return self.instance.worker

    def release(self, keep_alive_s: float | None = None) -> None:
        self._pool._release_lease(self, keep_alive_s)

    def settled_now(self, stream_id: str) -> bool:
        """No cancel of this stream is waiting for the worker: the slot can be released at once."""
        return not self.worker.cancelling(stream_id)

    def release_when_settled(self, stream_id: str, keep_alive_s: float | None = None) -> "asyncio.Task[None]":
        """Release once the worker has stopped this request: a cancelled one within an engine step, or when a
        worker that did not confirm is killed. The caller may wait on the task, or not."""
        return self._pool._release_when_settled(self, stream_id, keep_alive_s)


class Pool:
    def __init__(
        self,
        launcher: Launcher,
        budget_bytes: int,
        queue_size: int,
        default_keep_alive_s: float,
        clock: Callable[[], float] = time.time,
        cores: int | None = None,
    ) -> None:
        self._launcher = launcher
        self._cores = cores
        self.budget_bytes = budget_bytes
        self._queue_size = queue_size
        self._default_keep_alive_s = default_keep_alive_s
        self._clock = clock
        self._instances: list[Instance] = []
        self._waiting: dict[str, int] = {}  # interactive requests in `acquire`, starters included
        self._starters: dict[str, int] = {}  # of which those holding the slot of an instance they start
        self._background = BackgroundLeases()
        self._changed = asyncio.Condition()
        self._stops: set[asyncio.Task[None]] = set()
        self._affinity = AffinityTable()
        self._routes = PrefixRoutes()
        self._starts: set[asyncio.Task[None]] = set()  # cold starts in progress, owned by the pool

    # -- what callers see -------------------------------------------------------------------------------------

    def statuses(self) -> list[InstanceStatus]:
        return [instance.status() for instance in self._instances]

    def used_bytes(self) -> int:
        return sum(instance.memory_bytes for instance in self._instances)

    def busy(self) -> bool:
        """Some instance is generating or starting (a starting instance counts its first request as active)."""
        return any(instance.active for instance in self._instances)

    async def until_idle(self, timeout_s: float) -> None:
        """Return once nothing is generating or starting, or after `timeout_s`; for background work that would
        otherwise take the cores from a request."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s), self._changed:
                await self._changed.wait_for(lambda: not self.busy())

    def waiting(self, model_id: str) -> int:
        """Requests queued for a slot of the model. A request that starts an instance holds that instance's slot
        (among its active requests) and is not queued: counted in both, a node's report read one cold-starting
        request as two, and a placer sent the next request to a pull elsewhere rather than wait behind a queue
        that was not there."""
        return self._acquiring(model_id) - self._starters.get(model_id, 0)

    def _acquiring(self, model_id: str) -> int:
        """Interactive requests in `acquire`: what bounds the queue and holds background work back."""
        return self._waiting.get(model_id, 0)

    def serving_worker(self, model_id: str) -> Worker | None:
        """The worker of a loaded, responsive instance of the model, for work its worker answers without a slot
        (a token count). No lease: the instance may be stopped while that work runs, and the caller then falls
        back to `acquire`."""
        serving = [i for i in self._instances if i.spec.id == model_id and i.serving]
        return max(serving, key=lambda i: i.last_used).worker if serving else None

    async def acquire(
        self,
        spec: ModelSpec,
        deadline: float,
        affinity: str | None = None,
        *,
        chain: PromptChain | None = None,
        reject_if_busy: bool = False,
        preempt: Callable[[], None] | None = None,
    ) -> Lease:
        """Lease a slot on an instance of spec, cold-starting one if needed; deadline is on the loop's clock.
        With `reject_if_busy` (Workers AI's `rejectIfBusy`) a request that would have to wait for a slot is
        refused at once instead (429, 3040), behind a cold start as well; a free slot, or a cold start that this
        request can begin now, still serves it.

        Requests with the same affinity key go to the same instance while it has room, so they find their
        earlier turns in its prefix cache. Without one (or when it is full), `chain`, the request's prompt keys,
        sends it to the instance that served the longest prefix of its prompt (see `_by_prefix`).

        With `preempt`, the request is background work: it waits outside the bounded queue, takes a slot only
        while no interactive request of any model waits (and a cold start only if it evicts nothing), and
        `preempt` is called when an interactive request needs its slot (`pool.background`).
        """
        enqueued = asyncio.get_running_loop().time()
        if preempt is not None:
            instance, cold = await self._background_slot(spec, deadline, chain)
        else:
            instance, cold = await self._interactive_slot(spec, deadline, affinity, chain, reject_if_busy)
        if affinity is not None:
            self._affinity.remember(affinity, instance.id)
        if chain is not None:
            self._routes.remember(chain.hashes, instance.id)
        lease = Lease(instance, cold, asyncio.get_running_loop().time() - enqueued, self)
        if preempt is not None:
            self._background.hold(lease, spec.id, instance, preempt)
            self._preempt_for_waiting(
                spec.id
            )  # a request that came during its cold start waits for this slot
        return lease

    async def _interactive_slot(
        self,
        spec: ModelSpec,
        deadline: float,
        affinity: str | None,
        chain: PromptChain | None,
        reject_if_busy: bool,
    ) -> tuple[Instance, bool]:
        if self._acquiring(spec.id) >= self._queue_size and self._with_room(spec.id, affinity, chain) is None:
            raise CapacityExceeded("Capacity temporarily exceeded, please try again.", retry_after_s=1.0)
        self._waiting[spec.id] = self._acquiring(spec.id) + 1
        try:
            async with asyncio.timeout_at(deadline):
                return await self._obtain(spec, affinity, chain, reject_if_busy)
        except TimeoutError:
            raise RequestTimeout(f"the request waited in {spec.id}'s queue past its time limit") from None
        finally:
            self._waiting[spec.id] -= 1

    async def _background_slot(
        self, spec: ModelSpec, deadline: float, chain: PromptChain | None
    ) -> tuple[Instance, bool]:
        needed = await self._launcher.estimate_bytes(spec)
        self._check_can_ever_fit(spec, needed)
        try:
            async with asyncio.timeout_at(deadline):
                while True:
                    if not any(self._waiting.values()):
                        instance = self._with_room_for_background(spec.id, chain)
                        if instance is not None:
                            return self._take(instance), False
                        if self._may_start_for_background(spec, needed):
                            return await self._cold_start(spec, needed, []), True
                    async with self._changed:
                        await self._changed.wait()
        except TimeoutError:
            raise RequestTimeout(f"background work waited for {spec.id} past its time limit") from None

    async def prewarm(self, spec: ModelSpec, timeout_s: float) -> InstanceStatus:
        lease = await self.acquire(spec, asyncio.get_running_loop().time() + timeout_s)
        lease.release()
        return lease.instance.status()

    async def unload(self, model_id: str) -> int:
        """Stop every idle instance of a model (busy ones stop when their request ends). Returns how many."""
        idle = [i for i in self._instances if i.spec.id == model_id and i.idle]
        await asyncio.gather(*(self._stop(instance) for instance in idle))
        return len(idle)

    async def reap(self) -> None:
        """Stop instances whose keep-alive has run out."""
        now = self._clock()
        expired = [i for i in self._instances if (at := i.expires_at) is not None and at <= now]
        await asyncio.gather(*(self._stop(instance) for instance in expired))

    async def run_reaper(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.reap()
            except Exception:  # the reaper must outlive any one failure
                log.exception("keep-alive reaper failed")

    def watch(self) -> None:
        """One watchdog tick over the ready instances: a worker judged hung is killed (its exit removes the
        instance, fails its requests with WorkerCrashed and wakes the queue); the others get their next ping.
        Then the queue is woken if a request waits for a model that has room: a late worker that answers again
        takes no other path through the pool, and an idle one would otherwise leave its waiters to their 408."""
        self._tick_workers()
        if any(i.has_room and self.waiting(i.spec.id) > 0 for i in self._instances):
            self._spawn_notify()

    def _tick_workers(self) -> None:
        for instance in list(self._instances):
            worker = instance.worker
            if worker is None or instance.state is not InstanceState.READY:
                continue
            reason = worker.watch()
            if reason is not None:
                log.warning(
                    "worker of %s (%s, pid %s) %s; killing it",
                    instance.spec.id,
                    instance.id,
                    worker.pid,
                    reason,
                )
                self._spawn(worker.kill())

    async def run_watchdog(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                self.watch()
            except Exception:  # the watchdog must outlive any one failure
                log.exception("worker watchdog failed")

    async def close(self) -> None:
        for start in list(self._starts):  # a worker still loading is killed by its cancelled load
            start.cancel()
        await asyncio.gather(*self._starts, return_exceptions=True)
        await asyncio.gather(*(self._stop(instance) for instance in list(self._instances)))
        await asyncio.gather(*self._stops, return_exceptions=True)

    # -- scheduling -------------------------------------------------------------------------------------------

    def _with_room(self, model_id: str, affinity: str | None, chain: PromptChain | None) -> Instance | None:
        """An instance that can take one more sequence: the affine one if it can, else the one holding the
        prompt's prefix (`_by_prefix`), else the least loaded (the most recently used among equals)."""
        candidates = sorted(
            (i for i in self._instances if i.spec.id == model_id and i.has_room),
            key=lambda i: (i.active, -i.last_used),
        )
        if not candidates:
            return None
        preferred = self._affinity.get(affinity) if affinity is not None else None
        for instance in candidates:
            if instance.id == preferred:
                return instance
        return self._by_prefix(candidates, chain) or candidates[0]

    def _by_prefix(self, candidates: list[Instance], chain: PromptChain | None) -> Instance | None:
        """The candidate that served the longest prefix of the prompt, least loaded first among equals.

        It wins when its match covers more than what many conversations share (the system prompt, or half of
        a text prompt): that is the request's own history, and reading it again would cost more than sharing a
        batch with the instance's other sequences. A match on the shared head alone only breaks a tie: it wins
        when the instance is no busier than the least loaded one, so a popular system prompt does not pile
        every conversation onto the instance that saw it first."""
        if chain is None:
            return None
        match = self._routes.best(chain.hashes, [i.id for i in candidates])
        if match is None:
            return None
        holder = next(i for i in candidates if i.id == match.instance_id)
        if match.depth > chain.shared_head or holder.active <= candidates[0].active:
            return holder
        return None

    async def _obtain(
        self, spec: ModelSpec, affinity: str | None, chain: PromptChain | None, reject_if_busy: bool
    ) -> tuple[Instance, bool]:
        needed = await self._launcher.estimate_bytes(spec)
        self._check_can_ever_fit(spec, needed)
        while True:
            instance = self._with_room(spec.id, affinity, chain)
            if instance is not None:
                self._yield_compute(instance)
                return self._take(instance), False
            victims = self._victims_for(needed) if self._may_add_instance(spec) else None
            if victims is not None and not self._background.holds(spec.id):
                with self._starting(spec.id):
                    return await self._cold_start(spec, needed, victims), True
            if reject_if_busy:
                raise CapacityExceeded(
                    f"{spec.id} is busy: no instance has a free slot and none can start now (rejectIfBusy)",
                    retry_after_s=1.0,
                )
            self._preempt_for_waiting(spec.id)
            async with self._changed:
                await self._changed.wait()

    @contextlib.contextmanager
    def _starting(self, model_id: str) -> Iterator[None]:
        self._starters[model_id] = self._starters.get(model_id, 0) + 1
        try:
            yield
        finally:
            self._starters[model_id] -= 1

    def _preempt_for_waiting(self, model_id: str) -> None:
        waiting = self._acquiring(model_id)
        if waiting and self._background.preempt_for(model_id, waiting):
            log.info("preempted background work on %s for a waiting request", model_id)

    def _may_start_for_background(self, spec: ModelSpec, needed: int) -> bool:
        """Background work starts a model that has no instance, if nothing has to be evicted for it; it never
        scales a model out: a second instance would take cores and memory from interactive requests."""
        if any(i.spec.id == spec.id for i in self._instances):
            return False
        return self._may_add_instance(spec) and self._victims_for(needed) == []

    def _with_room_for_background(self, model_id: str, chain: PromptChain | None) -> Instance | None:
        """A free slot where background work may take it: an instance without interactive requests, or one
        whose background sequences are below their `share`."""
        instance = self._with_room(model_id, None, chain)
        if instance is None or self._background_may_grow(instance):
            return instance
        candidates = [i for i in self._instances if i.spec.id == model_id and i.has_room]
        return next((i for i in candidates if self._background_may_grow(i)), None)

    def _background_may_grow(self, instance: Instance) -> bool:
        background = self._background.held_on(instance)
        interactive = instance.active - background
        return interactive == 0 or background < share(instance.spec.parallel)

    def _yield_compute(self, instance: Instance) -> None:
        """An interactive request starts here: background work keeps at most its share of the instance."""
        if self._background.preempt_beyond(instance, share(instance.spec.parallel)):
            log.info("background work on %s yields to interactive requests", instance.spec.id)

    def _take(self, instance: Instance) -> Instance:
        instance.active += 1
        self._share_cores()
        return instance

    def _check_can_ever_fit(self, spec: ModelSpec, needed: int) -> None:
        pinned = sum(i.memory_bytes for i in self._instances if i.spec.pinned and i.spec.id != spec.id)
        available = self.budget_bytes - pinned
        if needed > available:
            raise ModelTooLarge(
                f"{spec.id} needs about {needed // MIB} MiB but the memory budget leaves "
                f"{available // MIB} MiB for it (budget {self.budget_bytes // MIB} MiB)",
                param="model",
            )

    def _may_add_instance(self, spec: ModelSpec) -> bool:
        """Below max_instances, and none starting: requests queue behind a cold start, and a model scales out
        only when every instance's batch is full."""
        mine = [i for i in self._instances if i.spec.id == spec.id and i.state is not InstanceState.STOPPING]
        starting = any(i.state is InstanceState.STARTING for i in mine)
        return len(mine) < spec.max_instances and not starting

    def _victims_for(self, needed: int) -> list[Instance] | None:
        """Idle instances to stop, least recently used first, so needed bytes fit; None if they cannot."""
        shortfall = self.used_bytes() + needed - self.budget_bytes
        victims: list[Instance] = []
        for instance in sorted((i for i in self._instances if i.evictable), key=lambda i: i.last_used):
            if shortfall <= 0:
                break
            victims.append(instance)
            shortfall -= instance.memory_bytes
        return victims if shortfall <= 0 else None

    async def _cold_start(self, spec: ModelSpec, needed: int, victims: list[Instance]) -> Instance:
        """Start an instance for the requester (its one active slot). The start is the pool's own task: a
        requester that leaves (its deadline, its client gone) does not cancel it, since the requests queued
        behind it want the instance too, and a model whose load outlasts one request's time limit would
        otherwise never become ready. The requester's slot is given back once the start ends."""
        keep_alive = spec.keep_alive_s if spec.keep_alive_s is not None else self._default_keep_alive_s
        now = self._clock()
        instance = Instance(spec, needed, keep_alive, now, active=1, started_at=now)
        self._instances.append(instance)
        start = asyncio.get_running_loop().create_task(self._start(instance, victims))
        self._starts.add(start)
        start.add_done_callback(self._starts.discard)
        try:
            await asyncio.shield(start)
        except asyncio.CancelledError:
            start.add_done_callback(lambda task: self._requester_left(instance, task))
            raise
        return instance

    async def _start(self, instance: Instance, victims: list[Instance]) -> None:
        started = time.perf_counter()
        try:
            await asyncio.gather(*(self._stop(victim) for victim in victims))
            worker = await self._launcher.launch(instance.spec)
        except BaseException:
            self._instances.remove(instance)
            self._spawn_notify()
            raise
        instance.worker, instance.state = worker, InstanceState.READY
        instance.load_s = time.perf_counter() - started
        worker.on_exit(lambda: self._on_worker_exit(instance))
        self._share_cores()
        self._spawn_notify()  # requests queued behind the start take its free slots now
        log.info(
            "cold-started %s (%s, pid %s) in %.2fs",
            instance.spec.id,
            instance.id,
            worker.pid,
            instance.load_s,
        )

    def _requester_left(self, instance: Instance, start: "asyncio.Task[None]") -> None:
        """The start ended after its requester left: its slot goes to whoever is queued."""
        if start.cancelled() or start.exception() is not None:
            return  # the instance is gone already (and a failed start's error is seen here, not lost)
        self._release(instance, None)

    # -- state changes ----------------------------------------------------------------------------------------

    def _release_lease(self, lease: Lease, keep_alive_s: float | None) -> None:
        self._background.drop(lease)
        self._release(lease.instance, keep_alive_s)

    def _release(self, instance: Instance, keep_alive_s: float | None) -> None:
        instance.active -= 1
        instance.last_used = self._clock()
        if keep_alive_s is not None:
            instance.keep_alive_s = keep_alive_s
        if instance.idle and instance.keep_alive_s <= 0 and not instance.spec.pinned:
            self._spawn_stop(instance)
        self._share_cores()
        self._spawn_notify()

    def _release_when_settled(
        self, lease: Lease, stream_id: str, keep_alive_s: float | None
    ) -> "asyncio.Task[None]":
        async def settle_then_release() -> None:
            try:
                with contextlib.suppress(Exception):
                    await lease.worker.settled(stream_id)
            finally:
                self._release_lease(lease, keep_alive_s)

        return self._spawn(settle_then_release())

    def _share_cores(self) -> None:
        """Split the cores between the instances that are decoding. llama.cpp's threads spin while they wait for
        each other, so two instances using every core each run many times slower than one using half."""
        if self._cores is None:
            return
        busy = [i for i in self._instances if i.worker is not None and i.active > 0]
        share = cores_each(self._cores, len(busy))
        for instance in busy:
            if instance.threads != share:
                instance.threads = share
                assert instance.worker is not None
                instance.worker.set_threads(share)

    def _on_worker_exit(self, instance: Instance) -> None:
        if instance in self._instances and instance.state is not InstanceState.STOPPING:
            log.warning("worker of %s (%s) exited; removing the instance", instance.spec.id, instance.id)
            self._instances.remove(instance)
            self._routes.forget(instance.id)
            self._spawn_notify()

    async def _stop(self, instance: Instance) -> None:
        if instance.state is InstanceState.STOPPING or instance not in self._instances:
            return
        instance.state = InstanceState.STOPPING
        try:
            if instance.worker is not None:
                await instance.worker.stop()
        finally:
            with contextlib.suppress(ValueError):
                self._instances.remove(instance)
            self._routes.forget(instance.id)
            log.info("stopped %s (%s)", instance.spec.id, instance.id)
            await self._notify()

    def _spawn_stop(self, instance: Instance) -> None:
        self._spawn(self._stop(instance))

    def _spawn_notify(self) -> None:
        self._spawn(self._notify())

    def _spawn(self, work: Coroutine[Any, Any, None]) -> "asyncio.Task[None]":
        """Background work the pool owns (close waits for it), logging as no request."""
        task = asyncio.get_running_loop().create_task(work, context=contextvars.Context())
        self._stops.add(task)
        task.add_done_callback(self._stops.discard)
        return task

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()
