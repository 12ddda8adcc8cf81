"""`cirrus cost`: a month of a traffic profile, serverless (per token or per neuron) against reserved instances.

Serverless cost grows with every request. A reserved instance costs its hourly price whether busy or idle,
and the peak decides how many are needed: an instance serves `concurrency` streams at once at the prompt and
decode rates the bench measured under that concurrency.
"""

import math
from dataclasses import asdict, dataclass
from typing import Any

from cirrus.evals.errors import EvalError
from cirrus.metering.neurons import USD_PER_THOUSAND_NEURONS, format_usd, neurons_for

DAYS_PER_MONTH = 30
SECONDS_PER_DAY = 86_400


@dataclass(frozen=True)
class Traffic:
    requests_per_day: float
    peak_to_mean: float
    input_tokens: float
    output_tokens: float


@dataclass(frozen=True)
class TokenPrices:
    input_per_million: float
    output_per_million: float
    usd_per_thousand_neurons: float = USD_PER_THOUSAND_NEURONS


@dataclass(frozen=True)
class Capacity:
    """What one instance sustained in the bench: streams at once, and each stream's token rates."""

    concurrency: int
    prompt_tps: float
    decode_tps: float

    def requests_per_s(self, traffic: Traffic) -> float:
        seconds = traffic.input_tokens / self.prompt_tps + traffic.output_tokens / self.decode_tps
        return self.concurrency / seconds


def request_neurons(prices: TokenPrices, traffic: Traffic) -> float:
    """Neurons one request costs, converted from its token prices as Workers AI's meter does."""
    usd = traffic.input_tokens * prices.input_per_million + traffic.output_tokens * prices.output_per_million
    return neurons_for(usd / 1_000_000)


def request_cost(prices: TokenPrices, traffic: Traffic) -> float:
    """USD per request: its neurons at the neuron price (equal to the token price at $0.011 per 1,000)."""
    return request_neurons(prices, traffic) * prices.usd_per_thousand_neurons / 1000


def serverless_monthly(prices: TokenPrices, traffic: Traffic) -> float:
    return traffic.requests_per_day * DAYS_PER_MONTH * request_cost(prices, traffic)


def instances_needed(capacity: Capacity, traffic: Traffic) -> int:
    """Reserved instances for the peak (mean rate times peak-to-mean); at least one stays up."""
    peak_rps = traffic.requests_per_day / SECONDS_PER_DAY * traffic.peak_to_mean
    return max(1, math.ceil(peak_rps / capacity.requests_per_s(traffic) - 1e-9))


def reserved_monthly(hourly: float, capacity: Capacity, traffic: Traffic) -> float:
    return instances_needed(capacity, traffic) * hourly * 24 * DAYS_PER_MONTH


def break_even_requests_per_day(
    prices: TokenPrices, hourly: float, capacity: Capacity, traffic: Traffic
) -> float | None:
    """The least daily traffic at which serverless costs as much as reserved; None if serverless is always cheaper.

    Reserved cost steps up by one instance per `one_instance_daily` requests. Serverless meets the first
    step at 24 * hourly / cost-per-request; it can meet a later step k only at k times that traffic, which
    lies beyond step k exactly when it lies beyond the first. So the first step decides.
    """
    per_request = request_cost(prices, traffic)
    if per_request <= 0:
        return None
    crossing = 24 * hourly / per_request
    one_instance_daily = capacity.requests_per_s(traffic) * SECONDS_PER_DAY / traffic.peak_to_mean
    return crossing if crossing <= one_instance_daily else None


def capacity_from_bench(result: object) -> Capacity:
    """An instance's capacity from a `cirrus bench --json` result."""
    try:
        assert isinstance(result, dict)
        warm = result["warm"]
        capacity = Capacity(
            int(warm["concurrency"]), float(warm["stream_prompt_tps"]), float(warm["stream_decode_tps"])
        )
    except (AssertionError, KeyError, TypeError, ValueError):
        raise EvalError("the bench file is not a `cirrus bench --json` result (no warm throughput)") from None
    if capacity.concurrency < 1 or capacity.prompt_tps <= 0 or capacity.decode_tps <= 0:
        raise EvalError("the bench result has no positive throughput to size reserved instances by")
    return capacity


def cost_report(
    traffic: Traffic, prices: TokenPrices, capacity: Capacity, hourly: float | None
) -> dict[str, Any]:
    serverless = serverless_monthly(prices, traffic)
    report: dict[str, Any] = {
        "traffic": asdict(traffic),
        "prices": asdict(prices),
        "capacity": {**asdict(capacity), "requests_per_s_per_instance": capacity.requests_per_s(traffic)},
        "per_request": {"neurons": request_neurons(prices, traffic), "usd": request_cost(prices, traffic)},
        "serverless_monthly_usd": serverless,
        "reserved": None,
        "break_even_requests_per_day": None,
        "cheaper": "serverless",
    }
    if hourly is not None:
        reserved = reserved_monthly(hourly, capacity, traffic)
        report["reserved"] = {
            "hourly_usd": hourly,
            "instances": instances_needed(capacity, traffic),
            "monthly_usd": reserved,
        }
        report["break_even_requests_per_day"] = break_even_requests_per_day(prices, hourly, capacity, traffic)
        report["cheaper"] = "serverless" if serverless <= reserved else "reserved"
    return report


def cost_table(report: dict[str, Any]) -> str:
    traffic, per_request = report["traffic"], report["per_request"]
    lines = [
        f"traffic       {traffic['requests_per_day']:,.0f} requests/day, peak {traffic['peak_to_mean']:g}x the mean, "
        f"{traffic['input_tokens']:g} in + {traffic['output_tokens']:g} out tokens each",
        f"per request   {per_request['neurons']:.4g} neurons, {format_usd(per_request['usd'])}",
        f"serverless    {format_usd(report['serverless_monthly_usd'])} a month",
    ]
    reserved = report["reserved"]
    if reserved is not None:
        capacity = report["capacity"]["requests_per_s_per_instance"]
        lines.append(
            f"reserved      {format_usd(reserved['monthly_usd'])} a month: {reserved['instances']} instance(s) at "
            f"${reserved['hourly_usd']:g}/hour, each serving {capacity:.2f} requests/s"
        )
        even = report["break_even_requests_per_day"]
        lines.append(
            f"break-even    {even:,.0f} requests/day"
            if even is not None
            else "break-even    none: serverless is cheaper at every traffic level"
        )
        lines.append(f"cheaper       {report['cheaper']}")
    return "\n".join(lines)
