"""Neurons, Workers AI's billing unit: $0.011 per 1,000 neurons, so a model's USD price converts exactly."""

from cirrus.catalog.spec import ModelSpec

USD_PER_THOUSAND_NEURONS = 0.011


def neurons_for(cost_usd: float) -> float:
    return cost_usd / USD_PER_THOUSAND_NEURONS * 1000


def price(
    spec: ModelSpec, prompt: int, completion: int, cached: int, *, cache_hit: bool = False
) -> tuple[float, float]:
    """(cost in USD, neurons) of one answer; an answer from the response cache costs nothing."""
    if cache_hit:
        return 0.0, 0.0
    cost = spec.pricing.cost(prompt, completion, cached)
    return cost, neurons_for(cost)


def billable_neurons(day_neurons: float, free_neurons: float) -> float:
    """What a paid account pays for in a day: the neurons beyond its daily free allocation."""
    return max(0.0, day_neurons - free_neurons)


def format_usd(amount: float) -> str:
    """Dollars and cents, or four significant digits for amounts under a dollar."""
    return f"${amount:,.2f}" if amount >= 1 else f"${amount:.4g}"
