"""Time estimates a placement is ranked by: cold start, registry pull, and the wait in a busy instance's queue.

Each estimate uses what the node measured, else what other nodes of the fleet measured (measured.py), and falls
back to `Defaults` only until some node has. The defaults are the figures measured on the development machines (bench/RESULTS.md, docs, DESIGN.md), cited per field.
"""

import math
from dataclasses import dataclass

from cirrus.placement.measured import Measured
from cirrus.placement.view import PlacementRequest


@dataclass(frozen=True)
class Defaults:
    # Gemma 3 270M (253 MB) loads in 172-290 ms inside a worker (bench/RESULTS.md, "Cirrus phases", last entry).
    load_bytes_per_s: float = 1.1e9
    # oras pulls a 98 MB GGUF from a registry on 127.0.0.1 in under a second (DESIGN.md, "Other facts measured").
    pull_bytes_per_s: float = 1.0e8
    # Before the weights, a pull asks the registry for a token, the manifest and the config: a few round trips
    # (assumed). It keeps a pull dearer than a start from disk even while a model's size is not yet known, so it
    # must exceed `process_start_s`: a node that never started a worker is estimated at that default, while the
    # node a pull would go to may have measured a start of ~0 (a spare process was ready). At 0.1 s, a model
    # cached only on node b was pulled onto node a whenever b had not yet read its size (a loaded machine).
    pull_setup_s: float = 0.25
    # A model whose size no node has read yet is costed as the default model's weights (SmolLM2, 98 MB), for a
    # load from disk and a pull alike: unknown bytes still move. Costed as nothing, a pull's estimate was its
    # setup alone, and a loaded machine's slow measured process start on the node holding the model (0.3 s and
    # more in a clean clone's CI) made pulling it elsewhere look cheaper.
    unknown_artifact_bytes: int = 98_000_000
    # Python plus `import llama_cpp`, 140-148 ms, when no spare process is ready (docs/design-notes.md).
    process_start_s: float = 0.15
    # A warm request's first token: 15.7-23.5 ms over HTTP (bench/RESULTS.md, "Cirrus warm (HTTP SSE): TTFT").
    first_token_s: float = 0.02
    # How long a request holds a slot until a node has measured it: a few hundred tokens at tens per second.
    service_s: float = 5.0
    # Estimates within this fraction of each other count as equal, so evicting nothing or a lighter load decides.
    tie_tolerance: float = 0.05
    # A cold start this placer sent counts as starting until a snapshot shows it, or this long past its estimate.
    pending_grace_s: float = 30.0
    # Session-affinity keys remembered (least recently used forgotten first).
    affinity_keys: int = 100_000


def cold_start_s(measures: Measured, request: PlacementRequest, defaults: Defaults) -> float:
    """From the artifact on local disk to a loaded instance: the node's last measured start of this model if any,
    else a process start plus the weights at the measured (or the default) load bandwidth."""
    measured = measures.cold_start_s(request.model)
    if measured is not None:
        return measured
    process = measures.process_start_s if measures.process_start_s is not None else defaults.process_start_s
    bandwidth = measures.load_bytes_per_s or defaults.load_bytes_per_s
    return process + artifact_bytes(request, defaults) / bandwidth


def pull_s(measures: Measured, request: PlacementRequest, defaults: Defaults) -> float:
    bandwidth = measures.pull_bytes_per_s or defaults.pull_bytes_per_s
    return defaults.pull_setup_s + artifact_bytes(request, defaults) / bandwidth


def artifact_bytes(request: PlacementRequest, defaults: Defaults) -> int:
    return request.artifact_bytes or defaults.unknown_artifact_bytes


def service_s(measures: Measured, model: str, defaults: Defaults) -> float:
    measured = measures.service_s(model)
    return measured if measured is not None else defaults.service_s


def queue_wait_s(position: int, ready_slots: int, service: float) -> float:
    """Until the `position`-th request in line (1 = next) gets one of `ready_slots` busy slots. With slots ending
    at random moments, one frees every `service / ready_slots` seconds on average."""
    if ready_slots <= 0:
        return math.inf
    return service * position / ready_slots


def bucket(estimate_s: float, tolerance: float) -> float:
    """The estimate on a logarithmic grid of `tolerance` steps: equal buckets are equal estimates."""
    if tolerance <= 0:
        return estimate_s
    return math.floor(math.log(max(estimate_s, 1e-6)) / math.log1p(tolerance))
