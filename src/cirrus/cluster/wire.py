"""What a node agent sends the gateway about one generation, besides the generation's own events. Plain
dataclasses that Ray pickles; no Ray import, so both sides and the tests share them.

A generation's stream is a sequence of batches (lists): the first holds `Opened` (or only `Failed`), every batch
ends with a `Tally` of the tokens so far, and the last holds the `Finished` event or `Failed`. Batching is what
keeps Ray's per-item cost (about 0.5 ms) off the token rate: the agent sends whatever events are ready at once.
"""

from dataclasses import dataclass

from cirrus.errors import CirrusError
from cirrus.runtime.events import GenerationEvent
from cirrus.runtime.params import Usage


@dataclass(frozen=True)
class Opened:
    """The node has the first event in hand: the answer starts."""

    node_id: str
    instance_id: str
    cold_start: bool
    queue_s: float
    cold_start_phases: dict[str, float]


@dataclass(frozen=True)
class Failed:
    """The generation ended with an error on the node. `started`: the worker had admitted the request (so a retry
    elsewhere could repeat work it did, and the request may be what crashed it)."""

    error: CirrusError
    usage: Usage
    started: bool


@dataclass(frozen=True)
class Tally:
    """The worker's counts so far (its final count once the generation closed): what an early end is billed."""

    usage: Usage
    final: bool


Item = Opened | Failed | Tally | GenerationEvent
Batch = list[Item]
