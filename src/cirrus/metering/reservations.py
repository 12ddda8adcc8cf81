"""Budget reservations: what requests admitted but not yet metered may still cost, held in this gateway's memory.

Why: a budget check that reads only what was metered lets every concurrent request through while the first one
is still running (16 requests on a free account with room for one all ran, 69x over). So admission holds the
request's estimated cost (see estimate.py), every later check counts it as used, and it is let go exactly once:
when the request's usage is metered (the meter's pending amounts take over in the same step, so nothing is
counted twice or not at all) or when the request fails before costing anything.
"""

from dataclasses import dataclass, field

from cirrus.metering.estimate import Estimate
from cirrus.metering.ledger import Key


class Holds:
    """Amounts held per key; a key whose holds are all released is forgotten."""

    def __init__(self) -> None:
        self._held: dict[Key, float] = {}
        self._count: dict[Key, int] = {}

    def add(self, key: Key, amount: float) -> None:
        self._held[key] = self._held.get(key, 0.0) + amount
        self._count[key] = self._count.get(key, 0) + 1

    def remove(self, key: Key, amount: float) -> None:
        left = self._count.get(key, 0) - 1
        if left <= 0:  # the last one: drop the key rather than keep float residue
            self._held.pop(key, None)
            self._count.pop(key, None)
            return
        self._count[key] = left
        self._held[key] -= amount

    def held(self, key: Key) -> float:
        return max(0.0, self._held.get(key, 0.0))

    def requests(self, key: Key) -> int:
        return self._count.get(key, 0)

    def snapshot(self) -> dict[Key, float]:
        return dict(self._held)


@dataclass
class Reservation:
    """One request's hold on its account's daily neurons and its token's monthly spend; `release` is idempotent,
    so every path that ends a request may call it."""

    holds: "Reservations | None"
    neurons_key: Key | None
    spend_key: Key | None
    estimate: Estimate
    released: bool = field(default=False)

    def release(self) -> None:
        if self.released:
            return
        self.released = True
        if self.holds is not None:
            self.holds.let_go(self)


def nothing_reserved() -> Reservation:
    """For a caller with no budget (the open node): holds nothing, releases nothing."""
    return Reservation(None, None, None, Estimate(0.0, 0.0))


class Reservations:
    def __init__(self) -> None:
        self.neurons = Holds()  # (account id, day) -> neurons
        self.spend = Holds()  # (token id, month) -> USD

    def hold(self, neurons_key: Key, spend_key: Key | None, estimate: Estimate) -> Reservation:
        self.neurons.add(neurons_key, estimate.neurons)
        if spend_key is not None:
            self.spend.add(spend_key, estimate.cost_usd)
        return Reservation(self, neurons_key, spend_key, estimate)

    def let_go(self, reservation: Reservation) -> None:
        if reservation.neurons_key is not None:
            self.neurons.remove(reservation.neurons_key, reservation.estimate.neurons)
        if reservation.spend_key is not None:
            self.spend.remove(reservation.spend_key, reservation.estimate.cost_usd)
