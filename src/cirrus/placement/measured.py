"""What a node's estimates are computed from: its own measurements, else the fleet's latest, else a default.

A node that has not measured a figure yet is assumed to be like the fleet's nodes that have: nodes of one fleet
are mostly alike, while the defaults were fitted to other machines. Costed at defaults, an unmeasured node
looked faster than a measured one whenever the machines were slower than the defaults' (every node of a loaded
test machine measured loads at a quarter of the default bandwidth), so a pull onto it beat a start from the
disk of the node that had the model.
"""

from typing import NamedTuple

from cirrus.placement.view import NodeMeasures


class FleetMeasures:
    """The latest figure any node reported for each measure. Kept as reports arrive; a figure is remembered
    after the instance it was measured on stopped (a node's own report forgets it then). A node's place in the
    warm index (indexes.py) is not recomputed when these change, only when its own report does: the few nodes
    taken from the top are evaluated with the current figures, and a node not measured yet has few requests."""

    def __init__(self) -> None:
        self.load_bytes_per_s: float | None = None
        self.pull_bytes_per_s: float | None = None
        self.process_start_s: float | None = None
        self.service_s: dict[str, float] = {}

    def learn(self, measures: NodeMeasures) -> None:
        """A node's report; a bandwidth of 0 is no measurement (nothing was moved), a start of 0 is one (a
        spare process was ready)."""
        if measures.load_bytes_per_s:
            self.load_bytes_per_s = measures.load_bytes_per_s
        if measures.pull_bytes_per_s:
            self.pull_bytes_per_s = measures.pull_bytes_per_s
        if measures.process_start_s is not None:
            self.process_start_s = measures.process_start_s
        self.service_s.update(measures.service_s)


class Measured(NamedTuple):
    """One node's figures, each falling back to the fleet's (None: nobody measured it, a default stands in)."""

    node: NodeMeasures
    fleet: FleetMeasures

    @property
    def load_bytes_per_s(self) -> float | None:
        return self.node.load_bytes_per_s or self.fleet.load_bytes_per_s

    @property
    def pull_bytes_per_s(self) -> float | None:
        return self.node.pull_bytes_per_s or self.fleet.pull_bytes_per_s

    @property
    def process_start_s(self) -> float | None:
        own = self.node.process_start_s
        return own if own is not None else self.fleet.process_start_s

    def cold_start_s(self, model: str) -> float | None:
        """The node's own last start of the model: another node's says little of this one's disk and load."""
        return self.node.cold_start_s.get(model)

    def service_s(self, model: str) -> float | None:
        own = self.node.service_s.get(model)
        return own if own is not None else self.fleet.service_s.get(model)
