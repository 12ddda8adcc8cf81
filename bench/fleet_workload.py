"""The simulated fleet's catalog, nodes and arrivals (bench/fleet.py), and the measured figures they rest on.

Models: GGUF sizes log-normal around 2 GB (most are small quantized models; a few reach 40 GB), memory = a worker
process + the weights + a KV cache for `parallel` sequences (about half the weights, as for a 7B model at 8k
context per slot) + a fixed part. Popularity is Zipf over a random order, independent of size.

Arrivals follow what serverless traces show (Azure Functions 2019, Shahrad et al., "Serverless in the Wild",
ATC'20): invocations are dominated by a few hot functions while most are invoked rarely, and arrivals come in
bursts. Each model's requests are split into bursts (more bursts for a hotter model); a burst starts at a
uniformly random moment and its requests follow it at exponential offsets. A request holds its slot for a
log-normal time (first token plus generation).

Load: the offered busy-slot demand (arrival rate x mean time a request holds a slot) over the fleet's total slots,
which are the slots its memory holds when filled with instances in the demand's mix (each node's budget over the
demand-weighted mean instance memory, times the demand-weighted mean `parallel`).
"""

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

GB = 1_000_000_000
GIB = 1024**3
MIB = 1024**2

# Measured on this machine; a simulated node's true figures are these, times its own factor.
# Loading weights: Gemma 3 270M (253 MB) loads in 228 ms median inside a worker, i.e. ~1.1 GB/s
# (bench/RESULTS.md, last section, "Cirrus phases: ... load 228 [172-290]").
LOAD_BYTES_PER_S = 1.1e9
# Registry pulls: oras pulls a 98 MB GGUF from a registry on 127.0.0.1 in under a second (/work/shared/DESIGN.md,
# "Other facts measured on these machines"); bench/RESULTS.md has no pull figure yet. A lower bound, so 100 MB/s.
PULL_BYTES_PER_S = 1.0e8
# A worker process: Python plus `import llama_cpp`, 140-148 ms (docs/design-notes.md, "Cold start, measured
# inside a worker"; bench/RESULTS.md issue 3 findings: `python -c "import llama_cpp"` 148 ms).
PROCESS_START_S = 0.148
# After the load, to the first token: cold TTFT 282 ms less its 228 ms load (bench/RESULTS.md, last section).
COLD_FIRST_TOKEN_S = 0.054
# A warm request's first token on SmolLM2 (~0.1 GB): 15.7-23.5 ms over HTTP (bench/RESULTS.md, bench/core.py
# "Cirrus warm (HTTP SSE): TTFT"). Larger models prefill more slowly: assumed +10 ms per GB (not measured).
WARM_FIRST_TOKEN_S = 0.018
WARM_FIRST_TOKEN_S_PER_GB = 0.010
# A worker before it loads a model: 40 MiB resident (docs/design-notes.md). KV cache and buffers: SmolLM2 is
# 378 MB resident and Gemma 3 532 MB at n_ctx 8192 (docs/design-notes.md); for large models the KV of 4 slots
# at 8k context is about half the weights (assumed from a 7B Q4 model's shapes, not measured here).
WORKER_BYTES = 40 * MIB
FIXED_KV_BYTES = 200 * MIB
KV_PER_WEIGHT = 0.5

SLOTS = 4  # the catalog's default `parallel`
# Instances per node: the catalog's default of 1, except for a model whose demand needs more instances than
# half the nodes it fits could give it one each (as an operator would configure a hot model).
MAX_INSTANCES_HOT = 4
KEEP_ALIVE_S = 60.0  # shorter than the pool's 300 s default so a bounded run spans several keep-alive periods
NODE_BUDGETS = (48 * GIB, 48 * GIB, 96 * GIB)  # assigned in turn: two thirds small nodes, one third large
DISK_BYTES = 400 * GB
DISK_PREFILLED = 0.5  # each node's disk starts half full of artifacts drawn by popularity
# and its memory half full of idle instances of the first of those, so the run starts from a fleet that has
# been serving (every policy starts from the same state) rather than ramping up from nothing
MEMORY_PREFILLED = 0.5


@dataclass(frozen=True)
class Model:
    index: int
    id: str
    artifact_bytes: int
    memory_bytes: int
    slots: int
    share: float  # of requests
    max_instances: int = 1  # per node

    @property
    def warm_first_token_s(self) -> float:
        return WARM_FIRST_TOKEN_S + WARM_FIRST_TOKEN_S_PER_GB * self.artifact_bytes / GB


@dataclass(frozen=True)
class NodeSpec:
    index: int
    id: str
    budget_bytes: int
    load_bytes_per_s: float
    pull_bytes_per_s: float
    disk: tuple[int, ...]  # model indexes on its disk at the start, least recently used first
    warm: tuple[int, ...]  # models with an idle ready instance at the start


@dataclass(frozen=True)
class Workload:
    models: list[Model]
    nodes: list[NodeSpec]
    arrival_s: np.ndarray  # sorted
    model_of: np.ndarray  # model index per request
    hold_s: np.ndarray  # seconds after the first token that the request keeps its slot
    total_slots: float
    offered_busy_slots: float
    duration_s: float


def make_models(count: int, rng: np.random.Generator, zipf: float) -> list[Model]:
    sizes = np.clip(np.exp(rng.normal(np.log(2.0 * GB), 1.2, count)), 0.1 * GB, 40 * GB).astype(np.int64)
    popularity = 1.0 / np.arange(1, count + 1) ** zipf
    shares = rng.permutation(popularity / popularity.sum())
    return [
        Model(
            index=i,
            id=f"@cf/sim/model-{i:03}",
            artifact_bytes=int(size),
            memory_bytes=int(WORKER_BYTES + FIXED_KV_BYTES + size * (1 + KV_PER_WEIGHT)),
            slots=SLOTS,
            share=float(share),
        )
        for i, (size, share) in enumerate(zip(sizes, shares, strict=True))
    ]


def make_nodes(count: int, models: list[Model], rng: np.random.Generator) -> list[NodeSpec]:
    shares = np.array([model.share for model in models])
    nodes = []
    for i in range(count):
        order = rng.choice(len(models), size=len(models), replace=False, p=shares)
        disk, used = [], 0
        for index in order:
            if used + models[index].artifact_bytes <= DISK_PREFILLED * DISK_BYTES:
                disk.append(int(index))
                used += models[index].artifact_bytes
        budget = NODE_BUDGETS[i % len(NODE_BUDGETS)]
        warm, held = [], 0
        for index in disk:
            if held + models[index].memory_bytes <= MEMORY_PREFILLED * budget:
                warm.append(index)
                held += models[index].memory_bytes
        nodes.append(
            NodeSpec(
                index=i,
                id=f"node-{i:05}",
                budget_bytes=budget,
                load_bytes_per_s=LOAD_BYTES_PER_S * rng.uniform(0.8, 1.25),
                pull_bytes_per_s=PULL_BYTES_PER_S * rng.uniform(0.5, 2.0),
                disk=tuple(reversed(disk)),  # the most popular were drawn first: least recently used last
                warm=tuple(warm),
            )
        )
    return nodes


def total_slots(models: list[Model], nodes: list[NodeSpec], mean_hold_s: float) -> float:
    weights = np.array([model.share * (model.warm_first_token_s + mean_hold_s) for model in models])
    weights /= weights.sum()
    memory = float(np.dot(weights, [model.memory_bytes for model in models]))
    slots = float(np.dot(weights, [model.slots for model in models]))
    return sum(node.budget_bytes / memory * slots for node in nodes)


def make_workload(
    node_count: int,
    model_count: int,
    requests: int,
    load: float,
    seed: int,
    zipf: float = 1.0,
    mean_hold_s: float = 30.0,
) -> Workload:
    rng = np.random.default_rng(seed)
    models = make_models(model_count, rng, zipf)
    nodes = make_nodes(node_count, models, rng)
    slots = total_slots(models, nodes, mean_hold_s)
    mean_busy_s = mean_hold_s + sum(model.share * model.warm_first_token_s for model in models)
    duration = requests * mean_busy_s / (load * slots)
    models = _with_max_instances(models, nodes, load * slots)
    model_of, arrival = _bursty_arrivals(models, requests, duration, rng)
    # log-normal with the given mean, sigma 0.8: most requests short, some long generations
    hold = np.exp(rng.normal(np.log(mean_hold_s) - 0.32, 0.8, requests)).clip(0.5, 20 * mean_hold_s)
    return Workload(
        models, nodes, arrival, model_of, hold, slots, requests * mean_busy_s / duration, duration
    )


def _with_max_instances(models: list[Model], nodes: list[NodeSpec], busy_slots: float) -> list[Model]:
    configured = []
    for model in models:
        needed = model.share * busy_slots / model.slots
        fitting = sum(1 for node in nodes if node.budget_bytes >= model.memory_bytes)
        per_node = min(MAX_INSTANCES_HOT, max(1, math.ceil(2 * needed / max(1, fitting))))
        configured.append(dataclasses.replace(model, max_instances=per_node))
    return configured


def _bursty_arrivals(
    models: list[Model], requests: int, duration: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    counts = rng.multinomial(requests, [model.share for model in models])
    times, owners = [], []
    for model, count in zip(models, counts, strict=True):
        if count == 0:
            continue
        bursts = max(1, round(count / (1 + np.sqrt(count))))
        # a burst's requests arrive within about a quarter of the gap between bursts
        span = duration / bursts / 4
        starts = rng.uniform(0, duration, bursts)
        times.append(starts[rng.integers(0, bursts, count)] + rng.exponential(span, count))
        owners.append(np.full(count, model.index, dtype=np.int32))
    all_times = np.concatenate(times) % duration  # a burst running past the end wraps to the start
    order = np.argsort(all_times, kind="stable")
    return np.concatenate(owners)[order], all_times[order]
