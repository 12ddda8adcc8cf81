"""Placement: which node of a cluster a request goes to, by estimated time to first token. Pure logic (no Ray,
no I/O): the gateway's cluster router and the fleet simulation (bench/fleet.py) both drive it."""

from cirrus.placement.estimate import Defaults
from cirrus.placement.placer import NoNodeFits, Placer
from cirrus.placement.view import (
    InstanceView,
    NodeMeasures,
    NodeView,
    Placement,
    PlacementRequest,
    Rule,
)

__all__ = [
    "Defaults",
    "InstanceView",
    "NoNodeFits",
    "NodeMeasures",
    "NodeView",
    "Placement",
    "PlacementRequest",
    "Placer",
    "Rule",
]
